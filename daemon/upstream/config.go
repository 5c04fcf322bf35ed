package upstream

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/localbus/localbus/bus"
)

// DefaultStream is the JetStream stream used when Config.Stream is empty.
const DefaultStream = "LOCALBUS"

// SubjectPrefix is the first token of every subject the bridge publishes:
// localbus.<node>.<session>. The stream it creates takes "localbus.>".
const SubjectPrefix = "localbus"

// Config is the [upstream] table of the daemon's config (SPEC §12). Keys
// are named in the comments; Validate checks them.
type Config struct {
	// URLs are the NATS servers to dial (key url: a string or a list), e.g.
	// "nats://127.0.0.1:4222"; "tls://" forces TLS. Required.
	URLs []string
	// Node is this daemon's name (key node), [a-z0-9][a-z0-9-]{0,62};
	// default the host name, lowercased.
	Node string
	// Stream is the JetStream stream (key stream); default "LOCALBUS". It
	// is created if missing, with subjects localbus.> and file storage.
	Stream string
	// Export are session id globs (path.Match) whose events are exported
	// (key export). Mirrors are never exported.
	Export []string
	// Import are node/session globs of other nodes' sessions to mirror in
	// (key import), e.g. "build-1/*".
	Import []string
	// Creds is a NATS credentials file (key creds), as made by nsc.
	Creds string
	// TLSCert and TLSKey are a client certificate and its key, PEM (keys
	// tls_cert, tls_key), for servers that verify clients.
	TLSCert, TLSKey string
	// TLSCA is a PEM file of the CAs that sign the server's certificate
	// (key tls_ca); default the system's.
	TLSCA string
	// BacklogBytes bounds what the journal keeps, for every exported
	// session together, of events NATS has not confirmed beyond what the
	// rings retain (key backlog_bytes); default DefaultBacklogBytes.
	BacklogBytes int64
}

// DefaultBacklogBytes is Config.BacklogBytes's default, 1 GiB.
const DefaultBacklogBytes = 1 << 30

// Keys are the keys the [upstream] table may hold.
var Keys = []string{"url", "node", "stream", "export", "import", "creds", "tls_cert", "tls_key", "tls_ca", "backlog_bytes"}

var (
	nodeRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	streamRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
)

// A ConfigError is a bad value of one key of the [upstream] table.
type ConfigError struct {
	// Key is the full key, e.g. "upstream.node".
	Key string
	// Reason says what is wrong.
	Reason string
}

func (e *ConfigError) Error() string { return e.Key + ": " + e.Reason }

func keyError(key, format string, args ...any) error {
	return &ConfigError{Key: "upstream." + key, Reason: fmt.Sprintf(format, args...)}
}

// DefaultNode returns the host name, lowercased, or "" when it is not a
// valid node name.
func DefaultNode() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	h = strings.ToLower(h)
	if i := strings.IndexByte(h, '.'); i > 0 {
		h = h[:i]
	}
	if !nodeRe.MatchString(h) {
		return ""
	}
	return h
}

// Fill sets the defaults of Node (the host name, when it is a valid node
// name) and Stream where they are empty. Validate reports a Node still
// empty.
func (c *Config) Fill() {
	if c.Stream == "" {
		c.Stream = DefaultStream
	}
	if c.Node == "" {
		c.Node = DefaultNode()
	}
	if c.BacklogBytes == 0 {
		c.BacklogBytes = DefaultBacklogBytes
	}
}

// Validate checks every key, as filled; the error is a *ConfigError
// naming the first bad one.
func (c *Config) Validate() error {
	if len(c.URLs) == 0 {
		return keyError("url", "required: the NATS server, e.g. nats://127.0.0.1:4222")
	}
	for _, s := range c.URLs {
		if err := validateURL(s); err != nil {
			return keyError("url", "%q: %v", redactURL(s), err)
		}
	}
	if c.Node == "" {
		return keyError("node", "required: the host name is not a valid node name")
	}
	if !nodeRe.MatchString(c.Node) {
		return keyError("node", "%q: want [a-z0-9][a-z0-9-]{0,62}", c.Node)
	}
	if c.BacklogBytes < 1 {
		return keyError("backlog_bytes", "%d: want a positive number of bytes", c.BacklogBytes)
	}
	if !streamRe.MatchString(c.Stream) {
		return keyError("stream", "%q: want 1 to 64 of A-Z a-z 0-9 _ -", c.Stream)
	}
	for _, g := range c.Export {
		if err := validateGlob(g); err != nil {
			return keyError("export", "%q: %v", g, err)
		}
	}
	for _, g := range c.Import {
		node, session, ok := strings.Cut(g, "/")
		if !ok || strings.Contains(session, "/") {
			return keyError("import", "%q: want node/session, e.g. build-1/*", g)
		}
		if err := validateGlob(node); err != nil {
			return keyError("import", "%q: %v", g, err)
		}
		if err := validateGlob(session); err != nil {
			return keyError("import", "%q: %v", g, err)
		}
	}
	for _, f := range []struct{ key, path string }{{"creds", c.Creds}, {"tls_cert", c.TLSCert}, {"tls_key", c.TLSKey}, {"tls_ca", c.TLSCA}} {
		if f.path == "" {
			continue
		}
		if fi, err := os.Stat(f.path); err != nil {
			return keyError(f.key, "%v", err)
		} else if !fi.Mode().IsRegular() {
			return keyError(f.key, "%s is not a regular file", f.path)
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return keyError("tls_cert", "tls_cert and tls_key go together")
	}
	return nil
}

func validateURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		// url's errors quote the URL, user information included.
		return errors.New("not a URL")
	}
	switch u.Scheme {
	case "nats", "tls", "ws", "wss":
	default:
		return fmt.Errorf("want a nats://, tls://, ws:// or wss:// URL")
	}
	if u.Hostname() == "" {
		return fmt.Errorf("no host")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %s: want 1 to 65535", p)
		}
	}
	return nil
}

// redactURL replaces the user information of the URL s (a user name, a
// password or a token) with "redacted", for logs, errors and status: who
// the daemon connects as is no business of a reader of its status. A
// string that does not parse loses whatever stands between its scheme and
// the last "@" (so does one with no "//", "alice:pw@host").
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.Opaque == "" {
		if u.User != nil {
			u.User = url.User("redacted")
		}
		return u.String()
	}
	if at := strings.LastIndexByte(s, '@'); at >= 0 {
		start := 0
		if i := strings.Index(s, "://"); i >= 0 && i < at {
			start = i + 3
		}
		return s[:start] + "redacted" + s[at:]
	}
	return s
}

func validateGlob(g string) error {
	if g == "" {
		return fmt.Errorf("empty pattern")
	}
	if _, err := path.Match(g, ""); err != nil {
		return err
	}
	return nil
}

// matchAny reports whether name matches one of globs.
func matchAny(globs []string, name string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}

// mirrorName is the local session that mirrors session of node, and
// whether that is a valid session id.
func mirrorName(node, session string) (bus.SessionID, bool) {
	id, err := bus.ParseSessionID(node + "." + session)
	return id, err == nil
}

// subject is the subject that session's events are exported to, and
// whether session makes a valid subject (no empty token: a session id
// ending in "." or holding ".." does not).
func subject(node, session string) (string, bool) {
	if strings.HasSuffix(session, ".") || strings.Contains(session, "..") {
		return "", false
	}
	return SubjectPrefix + "." + node + "." + session, true
}
