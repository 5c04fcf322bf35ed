package daemon

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// DefaultsFile returns a configuration file that lists every key of the
// settings table, in the table's order, commented out with its default,
// and the [upstream] table commented out after them. It is what
// "localbus config defaults" prints and what the packages install as
// /etc/localbus/config.toml. A setting whose default depends on who runs
// the daemon (Setting.DefaultRule) gets a comment stating the rule instead
// of a value.
//
// set holds keys to write set rather than commented out, with values as
// their serve flags take them ("15s", "0660", "read,publish"); an unknown
// key or a value of the wrong form is a *ConfigError naming it. A value is
// not otherwise validated: LoadConfig does that when the daemon reads the
// file.
func DefaultsFile(set map[string]string) ([]byte, error) {
	for key := range set {
		if _, ok := lookupSetting(key); !ok {
			return nil, &ConfigError{Key: key, Msg: "unknown key" + suggest(key)}
		}
	}
	def := Defaults()
	var b bytes.Buffer
	b.WriteString(defaultsHeader)
	for _, s := range settings {
		b.WriteString("\n")
		restart := ""
		if !s.Reloadable() {
			restart = " A change needs a restart."
		}
		if s.Env != "" {
			restart += " $" + s.Env + " sets it over this file."
		}
		writeComment(&b, s.Key+": "+s.Usage+"."+restart)
		if v, ok := set[s.Key]; ok {
			var c Config
			if msg := setString(s.field(&c), v); msg != "" {
				return nil, &ConfigError{Key: s.Key, Msg: msg}
			}
			if s.DefaultRule != "" {
				writeComment(&b, "Default: "+s.DefaultRule+".")
			} else {
				fmt.Fprintf(&b, "# Default: %s\n", tomlLine(s, &def))
			}
			b.WriteString(tomlLine(s, &c) + "\n")
			continue
		}
		if s.DefaultRule != "" {
			writeComment(&b, "Default: "+s.DefaultRule+".")
			continue
		}
		fmt.Fprintf(&b, "#%s\n", tomlLine(s, &def))
	}
	b.WriteString(upstreamDefaults)
	return b.Bytes(), nil
}

// defaultsHeader opens the file DefaultsFile writes.
const defaultsHeader = `# localbus configuration (TOML).
#
# Every key is listed with its default, commented out: uncomment a line to
# change it. A default that depends on who runs the daemon is stated in
# words. "localbus serve --help" shows the same keys as flags (ring_size
# is --ring-size), which win over this file. Sizes are in bytes, durations
# are strings ("15s", "100ms", "168h"), modes are octal strings ("0660").
# Unknown keys, wrong types and out-of-range values stop the daemon with an
# error naming the key. A reload (localbus reload, or SIGHUP) applies the
# keys it can and names those that wait for a restart.
`

// upstreamDefaults is the [upstream] table (SPEC §12), commented out: the
// bridge to NATS JetStream is off unless the table is present. Every key of
// upstream.Keys is listed (a test checks it).
const upstreamDefaults = `
# The bridge to NATS JetStream (more than one machine): off unless this table
# is present. Only export and import are applied by a reload.
#[upstream]
# The NATS servers, a string or a list; "tls://" forces TLS. Required.
#url = "nats://127.0.0.1:4222"
# node: this daemon's name, [a-z0-9][a-z0-9-]{0,62}.
# Default: the host name, lowercased.
# The JetStream stream, created if missing (subjects localbus.>).
#stream = "LOCALBUS"
# Session id globs whose events are exported.
#export = []
# node/session globs of other nodes' sessions to mirror in, e.g. "build-1/*".
#import = []
# A NATS credentials file, as made by nsc.
#creds = ""
# A client certificate and its key (PEM), for servers that verify clients.
#tls_cert = ""
#tls_key = ""
# The CAs that sign the server's certificate (PEM). Default: the system's.
#tls_ca = ""
# Journal space kept, for every exported session together, for events NATS
# has not confirmed beyond what the rings retain; past it the oldest
# unexported events are dropped, counted and logged. Export needs
# durability = "disk".
#backlog_bytes = 1073741824
`

// writeComment writes text as comment lines of at most about 76 columns.
func writeComment(b *bytes.Buffer, text string) {
	line := "#"
	for _, w := range strings.Fields(text) {
		if len(line)+1+len(w) > 76 && line != "#" {
			b.WriteString(line + "\n")
			line = "#"
		}
		line += " " + w
	}
	b.WriteString(line + "\n")
}

// tomlLine writes the value of s in c as one TOML line, "key = value".
func tomlLine(s Setting, c *Config) string {
	var v any
	switch p := s.field(c).(type) {
	case *time.Duration:
		v = formatDuration(*p)
	case *os.FileMode:
		v = fmt.Sprintf("%04o", uint32(*p))
	case *[]string:
		v = *p
		if *p == nil {
			v = []string{}
		}
	case *string:
		v = *p
	case *bool:
		v = *p
	case *int:
		v = *p
	case *int64:
		v = *p
	case *float64:
		v = *p
	default:
		panic(fmt.Sprintf("daemon: no TOML encoding for %T", p))
	}
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).Encode(map[string]any{s.Key: v}); err != nil {
		panic(fmt.Sprintf("daemon: encoding %s: %v", s.Key, err))
	}
	return strings.TrimSpace(b.String())
}

// formatDuration writes d as people write it: "168h", "10m", "15s",
// "100ms", "0s", without the zero units time.Duration.String adds.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
