package daemon

import (
	"errors"
	"path/filepath"
	"sort"

	"github.com/BurntSushi/toml"

	"github.com/localbus/localbus/daemon/upstream"
)

// The [upstream] table (SPEC §12) is the one table of the configuration
// file: it configures the NATS bridge as a whole, so it is not in the
// settings table and has no serve flags. Its keys are named
// "upstream.<key>" in errors.

// upstreamKey is the table's name in the file.
const upstreamKey = "upstream"

// decodeUpstream reads the [upstream] table of the file at path into
// l.cfg.Upstream, with the defaults of the keys it does not set.
func (l *loader) decodeUpstream(path, dir string, md toml.MetaData, prim toml.Primitive) {
	var raw any
	if err := md.PrimitiveDecode(prim, &raw); err != nil {
		l.errs = append(l.errs, &ConfigError{Key: upstreamKey, Msg: err.Error(), File: path})
		return
	}
	table, ok := raw.(map[string]any)
	if !ok {
		l.errs = append(l.errs, &ConfigError{Key: upstreamKey, Msg: wrongType("a table", raw), File: path})
		return
	}
	c := new(upstream.Config)
	keys := make([]string, 0, len(table))
	for k := range table {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := table[k]
		key := upstreamKey + "." + k
		bad := func(msg string) { l.errs = append(l.errs, &ConfigError{Key: key, Msg: msg, File: path}) }
		var msg string
		switch k {
		case "url":
			if s, ok := v.(string); ok {
				c.URLs = []string{s}
			} else {
				msg = setTOML(&c.URLs, v)
				if msg != "" {
					msg = wrongType("a string or an array of strings", v)
				}
			}
		case "node":
			msg = setTOML(&c.Node, v)
		case "stream":
			msg = setTOML(&c.Stream, v)
		case "export":
			msg = setTOML(&c.Export, v)
		case "import":
			msg = setTOML(&c.Import, v)
		case "backlog_bytes":
			msg = setTOML(&c.BacklogBytes, v)
		case "creds", "tls_cert", "tls_key", "tls_ca":
			p := map[string]*string{"creds": &c.Creds, "tls_cert": &c.TLSCert, "tls_key": &c.TLSKey, "tls_ca": &c.TLSCA}[k]
			if msg = setTOML(p, v); msg == "" && *p != "" && !filepath.IsAbs(*p) {
				*p = filepath.Join(dir, *p)
			}
		default:
			msg = "unknown key; the [upstream] table takes " + joinKeys(upstream.Keys)
		}
		if msg != "" {
			bad(msg)
			continue
		}
		l.from[key] = valueSource{file: path}
	}
	for _, k := range upstream.Keys {
		if _, ok := l.from[upstreamKey+"."+k]; !ok {
			l.from[upstreamKey+"."+k] = valueSource{file: path} // a default the table implies
		}
	}
	c.Fill()
	l.cfg.Upstream = c
}

func joinKeys(keys []string) string {
	out := ""
	for i, k := range keys {
		if i > 0 {
			out += ", "
		}
		out += k
	}
	return out
}

// upstreamProblems returns what is wrong with c.Upstream, naming the key.
func (c Config) upstreamProblems() []*ConfigError {
	if c.Upstream == nil {
		return nil
	}
	if len(c.Upstream.Export) > 0 && c.Durability != DurabilityDisk {
		return []*ConfigError{{Key: upstreamKey + ".export", Msg: `requires durability = "disk": the journal keeps what NATS has not confirmed`}}
	}
	err := c.Upstream.Validate()
	if err == nil {
		return nil
	}
	var ce *upstream.ConfigError
	if errors.As(err, &ce) {
		return []*ConfigError{{Key: ce.Key, Msg: ce.Reason}}
	}
	return []*ConfigError{{Key: upstreamKey, Msg: err.Error()}}
}
