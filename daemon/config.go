package daemon

import (
	"errors"
	"fmt"
	"github.com/localbus/localbus/access"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/BurntSushi/toml"
)

// Config is the configuration of localbus serve: one field per key of the
// configuration file, each also settable by a serve flag (see ServeFlags).
// A field is named after its key: RingSize is ring_size and --ring-size.
//
// The zero Config is not valid; start from Defaults, or get one from
// LoadConfig or ConfigFromCLI, which return only valid configurations.
// A Config is a plain value: copy it freely, and do not modify one that other
// goroutines read.
type Config struct {
	// Socket is the Unix socket path; it is ignored under socket activation.
	// Default: DefaultSocketPath().
	Socket string
	// SocketMode is the permission of the socket file, written in the file
	// as an octal string ("0660"). Default: 0660.
	SocketMode os.FileMode
	// SocketGroup is the group (name or numeric id) of the socket file.
	// Default: "", which leaves the daemon's own group.
	SocketGroup string
	// UnixAuth is how callers on the socket are authorized: UnixAuthPeer
	// (peer credentials grant scopes) or UnixAuthKey (keys required, as on
	// TCP). Default: "peer".
	UnixAuth string
	// UnixPeerScopes are the scopes of a socket peer that is neither root nor
	// the daemon's own uid. Default: ["read", "publish"].
	UnixPeerScopes []string
	// ListenTCP is the TCP address to serve on, "host:port"; "" means no
	// TCP listener. Unless AllowRemote is set the host must be a loopback
	// address or "localhost". Default: "".
	ListenTCP string
	// AllowRemote reports whether ListenTCP may name a non-loopback
	// address. Default: false.
	AllowRemote bool
	// AllowedOrigins are the browser origins accepted on TCP besides
	// loopback ones. Default: none.
	AllowedOrigins []string
	// AllowedHosts are the Host header values accepted on TCP besides
	// loopback hosts (DNS-rebinding defence). Default: none.
	AllowedHosts []string
	// KeysFile is the file of hashed keys. Default: keys.json in the
	// directory of the configuration file.
	KeysFile string
	// RingSize is the number of events each bus keeps for replay, from 1 to
	// 1,000,000. Default: 8000.
	RingSize int
	// RingMaxBytes caps the serialized events each bus keeps, at least
	// 1 KiB. Default: 67108864 (64 MiB).
	RingMaxBytes int64
	// MaxQueued is the live frames a subscriber may have queued, and the
	// default of ?maxQueued=, from 16 to 2048. Default: 256.
	MaxQueued int
	// MaxQueuedBytes caps the live bytes a subscriber may have queued, at
	// least 1 KiB. Default: 2097152 (2 MiB).
	MaxQueuedBytes int64
	// MaxSubscribers is the number of subscribers of one bus, at least 1.
	// Default: 64.
	MaxSubscribers int
	// MaxSubscribersTotal is the number of subscribers of all buses
	// together, at least 1, so many sessions cannot multiply the per-bus
	// limit without bound. Default: 4096.
	MaxSubscribersTotal int
	// MaxSessions is the number of sessions, at least 1. Default: 4096.
	MaxSessions int
	// AutoCreateSessions reports whether a publish creates a missing
	// session. Default: true.
	AutoCreateSessions bool
	// MaxEventBytes is the size limit of one event, from 1 KiB to 64 MiB.
	// Default: 1048576 (1 MiB).
	MaxEventBytes int64
	// MaxBodyBytes is the size limit of one request body (a publish batch),
	// from MaxEventBytes to 1 GiB. The default is a fixed 64 MiB rather than
	// a multiple of MaxEventBytes: a full batch of 1000 events of 1 MiB
	// would let one request hold a gigabyte in memory. Default: 67108864
	// (64 MiB).
	MaxBodyBytes int64
	// MaxHeaderBytes is the size limit of a request's headers, from 1 KiB
	// to 1 MiB. Default: 16384 (16 KiB).
	MaxHeaderBytes int64
	// Keepalive is the interval of SSE comments and WebSocket pings on a
	// quiet stream, at least 1s. Default: 15s.
	Keepalive time.Duration
	// ShutdownTimeout bounds a graceful shutdown; 0 closes everything at
	// once. Default: 10s.
	ShutdownTimeout time.Duration
	// ReadHeaderTimeout is the time a client has to send its request
	// headers, more than 0. Default: 10s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout is how long an idle keep-alive HTTP connection stays
	// open between requests, more than 0. Streams are never idle in this
	// sense. Default: 120s.
	IdleTimeout time.Duration
	// LogLevel is "debug", "info", "warn" or "error". Default: "info".
	LogLevel string
	// StateDir is where the journal lives; it must be set when Durability
	// is DurabilityDisk. Default: DefaultStateDir().
	StateDir string
	// Durability is DurabilityDisk (journal every bus) or DurabilityMemory.
	// Default: "disk".
	Durability string
	// Fsync is when the journal is synced: FsyncAlways, FsyncInterval or
	// FsyncNever. Default: "always".
	Fsync string
	// FsyncInterval is the sync period under FsyncInterval, more than 0.
	// Default: 100ms.
	FsyncInterval time.Duration
}

// Values of Config.UnixAuth, Config.Durability and Config.Fsync.
const (
	UnixAuthPeer = "peer"
	UnixAuthKey  = "key"

	DurabilityDisk   = "disk"
	DurabilityMemory = "memory"

	FsyncAlways   = "always"
	FsyncInterval = "interval"
	FsyncNever    = "never"
)

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
)

// Defaults returns the default configuration: what an absent configuration
// file means. The paths depend on the environment (see DefaultSocketPath,
// DefaultConfigPath and DefaultStateDir).
func Defaults() Config {
	return Config{
		Socket:              DefaultSocketPath(),
		SocketMode:          0o660,
		UnixAuth:            UnixAuthPeer,
		UnixPeerScopes:      []string{"read", "publish"},
		KeysFile:            keysFileBeside(DefaultConfigPath()),
		RingSize:            8000,
		RingMaxBytes:        64 * mib,
		MaxQueued:           256,
		MaxQueuedBytes:      2 * mib,
		MaxSubscribers:      64,
		MaxSubscribersTotal: 4096,
		MaxSessions:         4096,
		AutoCreateSessions:  true,
		MaxEventBytes:       1 * mib,
		MaxBodyBytes:        64 * mib,
		MaxHeaderBytes:      16 * kib,
		Keepalive:           15 * time.Second,
		ShutdownTimeout:     10 * time.Second,
		ReadHeaderTimeout:   10 * time.Second,
		IdleTimeout:         120 * time.Second,
		LogLevel:            "info",
		StateDir:            DefaultStateDir(),
		Durability:          DurabilityDisk,
		Fsync:               FsyncAlways,
		FsyncInterval:       100 * time.Millisecond,
	}
}

// setting ties a configuration key to its Config field and its serve flag,
// whose name is the key with '-' for '_'. Adding a key to Config means one
// line here, plus its default in Defaults and its checks in Validate.
type setting struct {
	key string
	// path marks a path: a relative value in a file is taken relative to
	// the file's directory.
	path bool
	// env is an environment variable that sets the key when its flag is
	// absent, if any.
	env   string
	usage string
	// field returns a pointer to the field in c.
	field func(c *Config) any
}

var settings = []setting{
	{key: "socket", path: true, env: "LOCALBUS_SOCKET", usage: "Unix socket path (ignored under socket activation)", field: func(c *Config) any { return &c.Socket }},
	{key: "socket_mode", usage: "permission of the socket file, octal", field: func(c *Config) any { return &c.SocketMode }},
	{key: "socket_group", usage: "group of the socket file (default: the daemon's group)", field: func(c *Config) any { return &c.SocketGroup }},
	{key: "unix_auth", usage: `socket authorization: "peer" (credentials) or "key"`, field: func(c *Config) any { return &c.UnixAuth }},
	{key: "unix_peer_scopes", usage: "scopes of socket peers other than root and the daemon's user", field: func(c *Config) any { return &c.UnixPeerScopes }},
	{key: "listen_tcp", usage: `TCP address to serve on, e.g. "127.0.0.1:8001" (default: off)`, field: func(c *Config) any { return &c.ListenTCP }},
	{key: "allow_remote", usage: "allow a non-loopback listen_tcp address", field: func(c *Config) any { return &c.AllowRemote }},
	{key: "allowed_origins", usage: "browser origins accepted on TCP", field: func(c *Config) any { return &c.AllowedOrigins }},
	{key: "allowed_hosts", usage: "Host header values accepted on TCP besides loopback", field: func(c *Config) any { return &c.AllowedHosts }},
	{key: "keys_file", path: true, usage: "file of hashed keys", field: func(c *Config) any { return &c.KeysFile }},
	{key: "ring_size", usage: "events each bus keeps for replay", field: func(c *Config) any { return &c.RingSize }},
	{key: "ring_max_bytes", usage: "bytes of events each bus keeps for replay", field: func(c *Config) any { return &c.RingMaxBytes }},
	{key: "max_queued", usage: "live frames a subscriber may have queued", field: func(c *Config) any { return &c.MaxQueued }},
	{key: "max_queued_bytes", usage: "live bytes a subscriber may have queued", field: func(c *Config) any { return &c.MaxQueuedBytes }},
	{key: "max_subscribers", usage: "subscribers per bus", field: func(c *Config) any { return &c.MaxSubscribers }},
	{key: "max_subscribers_total", usage: "subscribers of all buses together", field: func(c *Config) any { return &c.MaxSubscribersTotal }},
	{key: "max_sessions", usage: "number of sessions", field: func(c *Config) any { return &c.MaxSessions }},
	{key: "auto_create_sessions", usage: "create a missing session on publish", field: func(c *Config) any { return &c.AutoCreateSessions }},
	{key: "max_event_bytes", usage: "size limit of one event", field: func(c *Config) any { return &c.MaxEventBytes }},
	{key: "max_body_bytes", usage: "size limit of one request body", field: func(c *Config) any { return &c.MaxBodyBytes }},
	{key: "max_header_bytes", usage: "size limit of a request's headers", field: func(c *Config) any { return &c.MaxHeaderBytes }},
	{key: "keepalive", usage: "SSE comment and WebSocket ping interval", field: func(c *Config) any { return &c.Keepalive }},
	{key: "shutdown_timeout", usage: "time allowed for a graceful shutdown", field: func(c *Config) any { return &c.ShutdownTimeout }},
	{key: "read_header_timeout", usage: "time a client has to send request headers", field: func(c *Config) any { return &c.ReadHeaderTimeout }},
	{key: "idle_timeout", usage: "idle time of a keep-alive HTTP connection", field: func(c *Config) any { return &c.IdleTimeout }},
	{key: "log_level", usage: "debug, info, warn or error", field: func(c *Config) any { return &c.LogLevel }},
	{key: "state_dir", path: true, usage: "directory of the journal", field: func(c *Config) any { return &c.StateDir }},
	{key: "durability", usage: `"disk" (journal) or "memory"`, field: func(c *Config) any { return &c.Durability }},
	{key: "fsync", usage: `journal sync: "always", "interval" or "never"`, field: func(c *Config) any { return &c.Fsync }},
	{key: "fsync_interval", usage: `sync period when fsync is "interval"`, field: func(c *Config) any { return &c.FsyncInterval }},
}

// lookupSetting returns the setting of key.
func lookupSetting(key string) (setting, bool) {
	for _, s := range settings {
		if s.key == key {
			return s, true
		}
	}
	return setting{}, false
}

// Diff returns the keys whose values differ between c and next, in a fixed
// order. Reload uses it to name changes that need a restart.
func (c Config) Diff(next Config) []string {
	var keys []string
	for _, s := range settings {
		if !reflect.DeepEqual(s.field(&c), s.field(&next)) {
			keys = append(keys, s.key)
		}
	}
	return keys
}

// SlogLevel returns LogLevel as a slog.Level; an unknown level is
// slog.LevelInfo.
func (c Config) SlogLevel() slog.Level {
	switch c.LogLevel {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// ConfigError is an invalid configuration value. Every error of LoadConfig,
// ConfigFromCLI and Config.Validate that concerns a key is a *ConfigError,
// alone or joined with others by errors.Join; find them with errors.As.
type ConfigError struct {
	// Key is the configuration key, e.g. "ring_size".
	Key string
	// Msg says what is wrong, e.g. "must be between 1 and 1000000, got 0".
	Msg string
	// File is the configuration file the value came from, if it did.
	File string
	// Flag is the flag the value came from, e.g. "--ring-size", or the
	// environment variable, e.g. "$LOCALBUS_SOCKET", if it did.
	Flag string
}

func (e *ConfigError) Error() string {
	switch {
	case e.Flag != "":
		return "config: " + e.Flag + ": " + e.Msg
	case e.File != "":
		return "config: " + e.File + ": " + e.Key + ": " + e.Msg
	}
	return "config: " + e.Key + ": " + e.Msg
}

// LoadConfig reads the configuration file at path over Defaults and
// validates the result; path "" means DefaultConfigPath(), which is never
// explicit. An absent file means all defaults, unless explicit is set (the
// user named the file, with --config): then an absent file is an error
// naming it, since a typo in the path should not silently start a daemon on
// defaults.
//
// The file is strict: an unknown key, a value of the wrong type and a value
// out of range are each a *ConfigError naming the key; all of them are
// reported at once, joined. Relative socket, keys_file and state_dir values
// are taken relative to the file's directory. If the file does not set
// keys_file, it is keys.json beside the file.
//
// On error the returned Config is the zero value.
func LoadConfig(path string, explicit bool) (Config, error) {
	l, err := loadFile(path, explicit)
	if err != nil {
		return Config{}, err
	}
	return l.finish()
}

// loader builds a Config from defaults, a file and flags, remembering where
// each value came from so errors can name it.
type loader struct {
	cfg  Config
	errs []error
	// from maps a key to the file or flag that set it.
	from map[string]valueOrigin
}

// valueOrigin is where a value came from: a file or a flag.
type valueOrigin struct{ file, flag string }

// loadFile returns a loader holding the file at path over the defaults. Key
// errors are kept in the loader; the error returned is one that stops
// loading (the file cannot be read or is not TOML).
func loadFile(path string, explicit bool) (*loader, error) {
	if path == "" {
		path, explicit = DefaultConfigPath(), false
	}
	l := &loader{cfg: Defaults(), from: make(map[string]valueOrigin)}
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	l.cfg.KeysFile = keysFileBeside(abs)

	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		return l, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := l.decode(path, filepath.Dir(abs), string(data)); err != nil {
		return nil, err
	}
	return l, nil
}

// fileType is a struct with one toml.Primitive field per setting. Decoding
// into it leaves unknown keys undecoded, so MetaData.Undecoded names them.
var fileType = sync.OnceValue(func() reflect.Type {
	fields := make([]reflect.StructField, len(settings))
	for i, s := range settings {
		fields[i] = reflect.StructField{
			Name: "F" + strconv.Itoa(i),
			Type: reflect.TypeFor[toml.Primitive](),
			Tag:  reflect.StructTag(`toml:"` + s.key + `"`),
		}
	}
	return reflect.StructOf(fields)
})

// decode applies the TOML document data, read from path, over l.cfg.
func (l *loader) decode(path, dir, data string) error {
	doc := reflect.New(fileType())
	md, err := toml.Decode(data, doc.Interface())
	if err != nil {
		var perr toml.ParseError
		if errors.As(err, &perr) {
			return fmt.Errorf("config: %s: %w%s", path, err, syntaxHint(data, perr))
		}
		return fmt.Errorf("config: %s: %w", path, err)
	}

	// Undecoded names the keys that match no field. The decoder also matches
	// fields case-insensitively, so a key that differs from a known one only
	// in case is caught by the exact lookup below.
	reported := make(map[string]bool)
	unknown := func(key string) {
		if reported[key] {
			return
		}
		reported[key] = true
		l.errs = append(l.errs, &ConfigError{Key: key, Msg: "unknown key" + suggest(key), File: path})
	}
	for _, k := range md.Undecoded() {
		if _, ok := lookupSetting(k[0]); !ok {
			unknown(k[0])
		}
	}
	for _, k := range md.Keys() {
		if _, ok := lookupSetting(k[0]); !ok {
			unknown(k[0])
		}
	}

	for i, s := range settings {
		if !md.IsDefined(s.key) {
			continue
		}
		var v any
		if err := md.PrimitiveDecode(doc.Elem().Field(i).Interface().(toml.Primitive), &v); err != nil {
			l.errs = append(l.errs, &ConfigError{Key: s.key, Msg: err.Error(), File: path})
			continue
		}
		ptr := s.field(&l.cfg)
		if msg := setTOML(ptr, v); msg != "" {
			l.errs = append(l.errs, &ConfigError{Key: s.key, Msg: msg, File: path})
			continue
		}
		if p, ok := ptr.(*string); ok && s.path && *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
		l.from[s.key] = valueOrigin{file: path}
	}
	return nil
}

// finish validates the loaded configuration and returns it, or every error
// found while loading and validating it.
func (l *loader) finish() (Config, error) {
	errs := l.errs
	for _, e := range l.cfg.problems() {
		from := l.from[e.Key]
		e.File, e.Flag = from.file, from.flag
		errs = append(errs, e)
	}
	if len(errs) > 0 {
		return Config{}, joinErrors(errs)
	}
	return l.cfg, nil
}

// joinErrors is errors.Join that returns a single error as itself.
func joinErrors(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// syntaxHint returns advice for a TOML syntax error on a mode or duration:
// those are strings, and the unquoted forms people write (0660, 15s) are not
// TOML.
func syntaxHint(data string, perr toml.ParseError) string {
	key := perr.LastKey
	if key == "" {
		// The parser names no key when the value ends early, as in
		// "keepalive = 15s"; take it from the start of the line.
		lines := strings.Split(data, "\n")
		if n := perr.Position.Line; n >= 1 && n <= len(lines) {
			before, _, _ := strings.Cut(lines[n-1], "=")
			key = strings.TrimSpace(before)
		}
	}
	s, ok := lookupSetting(key)
	if !ok {
		return ""
	}
	switch s.field(&Config{}).(type) {
	case *os.FileMode:
		return fmt.Sprintf(`; write %s as a string, e.g. %s = "0660"`, key, key)
	case *time.Duration:
		return fmt.Sprintf(`; write %s as a string, e.g. %s = "15s"`, key, key)
	}
	return ""
}

// suggest returns a hint naming the known key closest to an unknown one, or
// "" if none is close.
func suggest(key string) string {
	best, bestDist := "", 3 // suggest only within two edits
	for _, s := range settings {
		d := editDistance(strings.ToLower(strings.ReplaceAll(key, "-", "_")), s.key)
		if d < bestDist {
			best, bestDist = s.key, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("; did you mean %q?", best)
}

// editDistance returns the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// setTOML stores v, a value decoded from TOML, in the field ptr points to.
// It returns what is wrong with v, or "".
func setTOML(ptr, v any) string {
	switch p := ptr.(type) {
	case *string:
		s, ok := v.(string)
		if !ok {
			return wrongType("a string", v)
		}
		*p = s
	case *bool:
		b, ok := v.(bool)
		if !ok {
			return wrongType("a boolean", v)
		}
		*p = b
	case *[]string:
		arr, ok := v.([]any)
		if !ok {
			return wrongType("an array of strings", v)
		}
		list := make([]string, 0, len(arr))
		for i, e := range arr {
			s, ok := e.(string)
			if !ok {
				return fmt.Sprintf("must be an array of strings, element %d is %s", i, describeTOML(e))
			}
			list = append(list, s)
		}
		*p = nilIfEmpty(list)
	case *int:
		n, ok := v.(int64)
		if !ok {
			return wrongType("an integer", v)
		}
		if int64(int(n)) != n {
			return fmt.Sprintf("%d does not fit in an int", n)
		}
		*p = int(n)
	case *int64:
		n, ok := v.(int64)
		if !ok {
			return wrongType("an integer", v)
		}
		*p = n
	case *time.Duration:
		s, ok := v.(string)
		if !ok {
			return wrongType(`a duration string like "15s"`, v)
		}
		return setString(ptr, s)
	case *os.FileMode:
		s, ok := v.(string)
		if !ok {
			return wrongType(`a quoted octal string like "0660"`, v)
		}
		return setString(ptr, s)
	default:
		panic(fmt.Sprintf("daemon: no TOML decoding for %T", ptr))
	}
	return ""
}

// setString parses s, a flag value or a TOML string, into the field ptr
// points to. It returns what is wrong with s, or "". Booleans and lists are
// not parsed from strings: their flags have their own types.
func setString(ptr any, s string) string {
	switch p := ptr.(type) {
	case *string:
		*p = s
	case *int:
		n, err := strconv.ParseInt(s, 10, strconv.IntSize)
		if err != nil {
			return fmt.Sprintf("must be a decimal integer, got %s", quoteValue(s))
		}
		*p = int(n)
	case *int64:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Sprintf("must be a decimal integer, got %s", quoteValue(s))
		}
		*p = n
	case *time.Duration:
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Sprintf(`must be a duration like "15s" or "100ms", got %s`, quoteValue(s))
		}
		*p = d
	case *os.FileMode:
		m, ok := parseMode(s)
		if !ok {
			return fmt.Sprintf(`must be an octal mode like "0660", got %s`, quoteValue(s))
		}
		*p = m
	default:
		panic(fmt.Sprintf("daemon: no string parsing for %T", ptr))
	}
	return ""
}

// parseMode parses one to four octal digits. The range is Validate's job.
func parseMode(s string) (os.FileMode, bool) {
	if len(s) == 0 || len(s) > 4 {
		return 0, false
	}
	for _, r := range s {
		if r < '0' || r > '7' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s, 8, 32)
	return os.FileMode(n), err == nil
}

// wrongType returns the message for a TOML value v that is not what the key
// takes.
func wrongType(want string, v any) string {
	return fmt.Sprintf("must be %s, got %s", want, describeTOML(v))
}

// describeTOML names a decoded TOML value by its TOML type, with the value when
// it is short.
func describeTOML(v any) string {
	switch v := v.(type) {
	case string:
		return "string " + quoteValue(v)
	case int64:
		return fmt.Sprintf("integer %d", v)
	case float64:
		return fmt.Sprintf("float %v", v)
	case bool:
		return fmt.Sprintf("boolean %t", v)
	case []any, []map[string]any:
		return "an array"
	case map[string]any:
		return "a table"
	case time.Time:
		return "a date-time"
	}
	return fmt.Sprintf("%T", v)
}

// quoteValue quotes s for a message, shortened so a huge value cannot flood a log.
func quoteValue(s string) string {
	const max = 64
	if len(s) > max {
		return strconv.Quote(s[:max]) + "..."
	}
	return strconv.Quote(s)
}

// nilIfEmpty returns nil for an empty list, so an empty list from a file or a
// flag compares equal to an unset one.
func nilIfEmpty(list []string) []string {
	if len(list) == 0 {
		return nil
	}
	return list
}

// Limits that Validate enforces.
const (
	minRingSize      = 1
	maxRingSize      = 1_000_000
	minMaxQueued     = 16
	maxMaxQueued     = 2048
	minBufferBytes   = 1 * kib // ring_max_bytes, max_queued_bytes
	minEventBytes    = 1 * kib
	maxEventBytes    = 64 * mib
	maxBodyBytes     = 1 * gib
	minHeaderBytes   = 1 * kib
	maxHeaderBytes   = 1 * mib
	minKeepalive     = time.Second
	maxSocketPathLen = 107 // sun_path on Linux holds 108 bytes with the final NUL
)

// Validate reports whether c is a usable configuration: it checks every key
// and returns nil, or a *ConfigError per bad key (joined with errors.Join
// when there are several), each naming the key and the allowed values.
func (c Config) Validate() error {
	problems := c.problems()
	errs := make([]error, len(problems))
	for i, p := range problems {
		errs[i] = p
	}
	if len(errs) == 0 {
		return nil
	}
	return joinErrors(errs)
}

// problems returns what is wrong with c, one error per key, in settings
// order.
func (c Config) problems() []*ConfigError {
	var errs []*ConfigError
	add := func(key, format string, args ...any) {
		errs = append(errs, &ConfigError{Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	check := func(key, msg string) {
		if msg != "" {
			add(key, "%s", msg)
		}
	}

	switch {
	case c.Socket == "":
		add("socket", "must not be empty")
	case len(c.Socket) > maxSocketPathLen:
		add("socket", "is %d bytes long, more than the %d a Unix socket path can hold", len(c.Socket), maxSocketPathLen)
	}
	switch {
	case c.SocketMode > 0o777:
		add("socket_mode", "must be an octal mode from \"0600\" to \"0777\", got %04o", uint32(c.SocketMode))
	case c.SocketMode&0o600 != 0o600:
		// The daemon must be able to connect to its own socket, to tell a
		// live daemon from a stale socket.
		add("socket_mode", "must give the owner read and write (0600), got %04o", uint32(c.SocketMode))
	}
	if strings.ContainsFunc(c.SocketGroup, badNameRune) || strings.ContainsAny(c.SocketGroup, ":/") {
		add("socket_group", "must be a group name or number, got %s", quoteValue(c.SocketGroup))
	}
	check("unix_auth", oneOf(c.UnixAuth, UnixAuthPeer, UnixAuthKey))
	for _, sc := range c.UnixPeerScopes {
		if _, err := access.ParseScope(sc); err != nil {
			add("unix_peer_scopes", "%s is not a scope: use admin, read, publish, read:FAMILY or publish:FAMILY", quoteValue(sc))
			break
		}
	}
	check("listen_tcp", checkListen(c.ListenTCP, c.AllowRemote))
	for _, o := range c.AllowedOrigins {
		if o == "" || strings.ContainsFunc(o, badNameRune) {
			add("allowed_origins", "must hold origins like \"http://localhost:3000\", got %s", quoteValue(o))
			break
		}
	}
	for _, h := range c.AllowedHosts {
		if h == "" || strings.ContainsFunc(h, badNameRune) || strings.Contains(h, "/") {
			add("allowed_hosts", "must hold host names or host:port, got %s", quoteValue(h))
			break
		}
	}
	if c.KeysFile == "" {
		add("keys_file", "must not be empty")
	}

	check("ring_size", inRange(c.RingSize, minRingSize, maxRingSize))
	check("ring_max_bytes", atLeastBytes(c.RingMaxBytes, minBufferBytes))
	check("max_queued", inRange(c.MaxQueued, minMaxQueued, maxMaxQueued))
	check("max_queued_bytes", atLeastBytes(c.MaxQueuedBytes, minBufferBytes))
	check("max_subscribers", inRange(c.MaxSubscribers, 1, 0))
	check("max_subscribers_total", inRange(c.MaxSubscribersTotal, 1, 0))
	check("max_sessions", inRange(c.MaxSessions, 1, 0))
	check("max_event_bytes", bytesInRange(c.MaxEventBytes, minEventBytes, maxEventBytes))
	switch {
	case c.MaxBodyBytes < c.MaxEventBytes:
		// A body must be able to carry the largest event.
		add("max_body_bytes", "must be at least max_event_bytes (%s), got %d", formatBytes(c.MaxEventBytes), c.MaxBodyBytes)
	default:
		check("max_body_bytes", bytesInRange(c.MaxBodyBytes, minEventBytes, maxBodyBytes))
	}
	check("max_header_bytes", bytesInRange(c.MaxHeaderBytes, minHeaderBytes, maxHeaderBytes))

	if c.Keepalive < minKeepalive {
		add("keepalive", "must be at least %v, got %v", minKeepalive, c.Keepalive)
	}
	if c.ShutdownTimeout < 0 {
		add("shutdown_timeout", "must not be negative, got %v", c.ShutdownTimeout)
	}
	check("read_header_timeout", positive(c.ReadHeaderTimeout))
	check("idle_timeout", positive(c.IdleTimeout))
	check("log_level", oneOf(c.LogLevel, "debug", "info", "warn", "error"))
	if c.StateDir == "" && c.Durability == DurabilityDisk {
		add("state_dir", "must be set when durability is %q", DurabilityDisk)
	}
	check("durability", oneOf(c.Durability, DurabilityDisk, DurabilityMemory))
	check("fsync", oneOf(c.Fsync, FsyncAlways, FsyncInterval, FsyncNever))
	check("fsync_interval", positive(c.FsyncInterval))
	return errs
}

// checkListen checks a listen_tcp value: "" (off) or host:port with a
// numeric port, on a loopback host unless remote is allowed.
func checkListen(addr string, remote bool) string {
	if addr == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Sprintf(`must be host:port, e.g. "127.0.0.1:8001", got %s`, quoteValue(addr))
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Sprintf("port must be a number from 0 to 65535, got %s", quoteValue(port))
	}
	if remote {
		return ""
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Sprintf("%s is not a loopback address; set allow_remote to listen on it", quoteValue(addr))
	}
	return ""
}

// badNameRune reports whether r cannot appear in a group, origin or host:
// spaces and control characters.
func badNameRune(r rune) bool {
	return unicode.IsSpace(r) || unicode.IsControl(r)
}

// oneOf checks that v is one of allowed.
func oneOf(v string, allowed ...string) string {
	if slices.Contains(allowed, v) {
		return ""
	}
	quoted := make([]string, len(allowed))
	for i, a := range allowed {
		quoted[i] = strconv.Quote(a)
	}
	return fmt.Sprintf("must be one of %s; got %s", strings.Join(quoted, ", "), quoteValue(v))
}

// inRange checks lo <= v <= hi; hi 0 means no upper bound.
func inRange(v, lo, hi int) string {
	switch {
	case hi == 0 && v < lo:
		return fmt.Sprintf("must be at least %d, got %d", lo, v)
	case hi != 0 && (v < lo || v > hi):
		return fmt.Sprintf("must be between %d and %d, got %d", lo, hi, v)
	}
	return ""
}

// atLeastBytes checks v >= lo.
func atLeastBytes(v, lo int64) string {
	if v < lo {
		return fmt.Sprintf("must be at least %s, got %d", formatBytes(lo), v)
	}
	return ""
}

// bytesInRange checks lo <= v <= hi.
func bytesInRange(v, lo, hi int64) string {
	if v < lo || v > hi {
		return fmt.Sprintf("must be between %s and %s, got %d", formatBytes(lo), formatBytes(hi), v)
	}
	return ""
}

// positive checks d > 0.
func positive(d time.Duration) string {
	if d <= 0 {
		return fmt.Sprintf("must be more than 0, got %v", d)
	}
	return ""
}

// formatBytes writes n in bytes, with its binary unit when it has an exact
// one: "1048576 (1 MiB)".
func formatBytes(n int64) string {
	for _, u := range []struct {
		size int64
		name string
	}{{gib, "GiB"}, {mib, "MiB"}, {kib, "KiB"}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d (%d %s)", n, n/u.size, u.name)
		}
	}
	return strconv.FormatInt(n, 10)
}
