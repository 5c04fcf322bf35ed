package daemon

import (
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/localbus/localbus/daemon/upstream"
)

// Config is the configuration of localbus serve: one field per key of the
// configuration file (see Settings), each also settable by a serve flag. A
// field is named after its key: RingSize is ring_size and --ring-size.
//
// The zero Config is not valid; start from Defaults, or get one from
// LoadConfig, which returns only valid configurations.
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
	// MaxRingBytesTotal caps the serialized events the rings of every bus
	// keep together, at least 1 KiB; past it the largest rings evict their
	// oldest events first. Default: 1073741824 (1 GiB).
	MaxRingBytesTotal int64
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
	// MaxAutoSessions is the number of sessions a publish may create (they
	// also count against MaxSessions), at least 1; a value above half of
	// MaxSessions is lowered to that half (and logged), so publishers
	// always leave room for admins. Default: 1024.
	MaxAutoSessions int
	// AutoSessionTTL is how long a session a publish created may go with
	// no publish and no subscriber before it is deleted (SPEC §2); 0 keeps
	// them. Sessions made with POST /api/v1/sessions never expire.
	// Default: 168h.
	AutoSessionTTL time.Duration
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
	// MaxInflightBodyBytes caps the request bodies being read at once,
	// counted as their bytes are read, at least 1 KiB; past it (or past a
	// peer's share of it, see PeerShare) a request gets 503 with
	// Retry-After. Default: 67108864 (64 MiB).
	MaxInflightBodyBytes int64
	// PeerShare is the fraction of every shared pool (request body bytes
	// being read, outstanding tickets, sessions a publish creates,
	// remembered idempotency keys, subscribers of a bus and of all buses)
	// that one peer other than root and the daemon's uid may hold, at
	// least one unit (SPEC §2, fair shares); more than 0 and at most 1,
	// which turns shares off. A peer is its uid on the socket, its key's
	// name on TCP. Default: 0.25.
	PeerShare float64
	// IdempotencyWindow is how long a publish's Idempotency-Key is
	// remembered (SPEC §6), from 1s to 24h. Default: 10m.
	IdempotencyWindow time.Duration
	// IdempotencyMaxBytes bounds the remembered Idempotency-Keys, in
	// bytes, a pool with fair shares (SPEC §6); default 16 MiB.
	IdempotencyMaxBytes int64
	// MaxConsumers is the number of consumers of one session, at least 1,
	// a pool with fair shares (SPEC §2.4). Default: 64.
	MaxConsumers int
	// ConsumerTTL is how long a consumer may go without a stream before
	// it is forgotten (SPEC §2.4); 0 keeps them. Default: 720h.
	ConsumerTTL time.Duration
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
	// LogFormat is LogFormatText (logfmt-like key=value lines) or
	// LogFormatJSON (one JSON object per line). Under journald
	// (JOURNAL_STREAM set) lines carry no timestamp of their own either
	// way. Default: "text".
	LogFormat string
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
	// Upstream is the [upstream] table (SPEC §12): the bridge to NATS
	// JetStream, filled with its defaults. Default: nil, no bridge. It is
	// the file's one table, not in the settings table and without flags
	// (config_upstream.go).
	Upstream *upstream.Config
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

// Values of Config.LogFormat.
const (
	LogFormatText = "text"
	LogFormatJSON = "json"
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
		Socket:               DefaultSocketPath(),
		SocketMode:           0o660,
		UnixAuth:             UnixAuthPeer,
		UnixPeerScopes:       []string{"read", "publish"},
		KeysFile:             keysFileBeside(DefaultConfigPath()),
		RingSize:             8000,
		RingMaxBytes:         64 * mib,
		MaxRingBytesTotal:    1024 * mib,
		MaxQueued:            256,
		MaxQueuedBytes:       2 * mib,
		MaxSubscribers:       64,
		MaxSubscribersTotal:  4096,
		MaxSessions:          4096,
		MaxAutoSessions:      1024,
		AutoSessionTTL:       168 * time.Hour,
		AutoCreateSessions:   true,
		MaxEventBytes:        1 * mib,
		MaxBodyBytes:         64 * mib,
		MaxInflightBodyBytes: 64 * mib,
		PeerShare:            0.25,
		IdempotencyWindow:    10 * time.Minute,
		IdempotencyMaxBytes:  16 * mib,
		MaxConsumers:         64,
		ConsumerTTL:          720 * time.Hour,
		MaxHeaderBytes:       16 * kib,
		Keepalive:            15 * time.Second,
		ShutdownTimeout:      10 * time.Second,
		ReadHeaderTimeout:    10 * time.Second,
		IdleTimeout:          120 * time.Second,
		LogLevel:             "info",
		LogFormat:            LogFormatText,
		StateDir:             DefaultStateDir(),
		Durability:           DurabilityDisk,
		Fsync:                FsyncAlways,
		FsyncInterval:        100 * time.Millisecond,
	}
}

// A Setting is one key of the configuration, as the settings table
// describes it: the file loader, the serve flags (built in cmd/localbus) and
// reload all work from the table, so adding a key to Config means one entry
// there, plus its default in Defaults and its checks in Validate. A test
// fails when a Config field has no entry.
type Setting struct {
	// Key is the key in the file, e.g. "ring_size".
	Key string
	// Usage is a one-line description for flag help.
	Usage string
	// Env is an environment variable that sets the key when its flag is
	// not given (see Source.Env), or "".
	Env string
	// Path marks a path: a relative value in a file is taken relative to
	// the file's directory, and its flag takes a file name.
	Path bool
	// DefaultRule states the default of a setting whose default depends on
	// who runs the daemon and where ("" for a fixed default); the commented
	// configuration file (DefaultsFile) writes it instead of a value.
	DefaultRule string

	// field returns a pointer to the setting's field in c.
	field func(c *Config) any
}

// Kind is the type of a setting's value, which says how a flag or a file
// writes it.
type Kind int

// The kinds of settings. In a file, a KindString, KindDuration or KindMode
// value is a string, a KindInt an integer, a KindFloat a number, a
// KindBool a boolean and a KindList an array of strings.
const (
	// KindString is a string.
	KindString Kind = iota
	// KindBool is a boolean: "true" or "false" as a flag value.
	KindBool
	// KindList is a list of strings, comma-separated as a flag value.
	KindList
	// KindInt is a decimal integer.
	KindInt
	// KindDuration is a duration like "15s" or "100ms".
	KindDuration
	// KindFloat is a decimal number like "0.25".
	KindFloat
	// KindMode is a file mode in octal, like "0660".
	KindMode
)

// Flag returns the name of the serve flag of s, the key with '-' for '_':
// ring_size is ring-size.
func (s Setting) Flag() string { return strings.ReplaceAll(s.Key, "_", "-") }

// Kind returns the type of the value of s.
func (s Setting) Kind() Kind {
	switch s.field(&Config{}).(type) {
	case *bool:
		return KindBool
	case *[]string:
		return KindList
	case *int, *int64:
		return KindInt
	case *time.Duration:
		return KindDuration
	case *float64:
		return KindFloat
	case *os.FileMode:
		return KindMode
	}
	return KindString
}

// Default returns the default of s, written as its flag takes it ("15s",
// "0660", "read,publish"). Path defaults depend on the environment, like
// Defaults.
func (s Setting) Default() string {
	def := Defaults()
	return formatValue(s.field(&def))
}

// Settings returns the settings table: one Setting per key of the
// configuration, in the order of Config's fields. The slice is the
// caller's.
func Settings() []Setting { return slices.Clone(settings) }

// settings is the settings table. Which of them a reload applies is the
// reloadable list (reload_keys.go), the one list of reloadable keys.
var settings = []Setting{
	{Key: "socket", Path: true, Env: "LOCALBUS_SOCKET", DefaultRule: "/run/localbus/localbus.sock for root, else $XDG_RUNTIME_DIR/localbus/localbus.sock; $LOCALBUS_SOCKET when set", Usage: "Unix socket path (ignored under socket activation)", field: func(c *Config) any { return &c.Socket }},
	{Key: "socket_mode", Usage: "permission of the socket file, octal", field: func(c *Config) any { return &c.SocketMode }},
	{Key: "socket_group", DefaultRule: "the daemon's own group", Usage: "group of the socket file (default: the daemon's group)", field: func(c *Config) any { return &c.SocketGroup }},
	{Key: "unix_auth", Usage: `socket authorization: "peer" (credentials) or "key"`, field: func(c *Config) any { return &c.UnixAuth }},
	{Key: "unix_peer_scopes", Usage: "scopes of socket peers other than root and the daemon's user", field: func(c *Config) any { return &c.UnixPeerScopes }},
	{Key: "listen_tcp", Usage: `TCP address to serve on, e.g. "127.0.0.1:8001" (default: off)`, field: func(c *Config) any { return &c.ListenTCP }},
	{Key: "allow_remote", Usage: "allow a non-loopback listen_tcp address", field: func(c *Config) any { return &c.AllowRemote }},
	{Key: "allowed_origins", Usage: "browser origins accepted on TCP", field: func(c *Config) any { return &c.AllowedOrigins }},
	{Key: "allowed_hosts", Usage: "Host header values accepted on TCP besides loopback", field: func(c *Config) any { return &c.AllowedHosts }},
	{Key: "keys_file", Path: true, DefaultRule: "keys.json in the directory of this file", Usage: "file of hashed keys", field: func(c *Config) any { return &c.KeysFile }},
	{Key: "ring_size", Usage: "events each bus keeps for replay", field: func(c *Config) any { return &c.RingSize }},
	{Key: "ring_max_bytes", Usage: "bytes of events each bus keeps for replay", field: func(c *Config) any { return &c.RingMaxBytes }},
	{Key: "max_ring_bytes_total", Usage: "bytes of events the rings of every bus keep together", field: func(c *Config) any { return &c.MaxRingBytesTotal }},
	{Key: "max_queued", Usage: "live frames a subscriber may have queued", field: func(c *Config) any { return &c.MaxQueued }},
	{Key: "max_queued_bytes", Usage: "live bytes a subscriber may have queued", field: func(c *Config) any { return &c.MaxQueuedBytes }},
	{Key: "max_subscribers", Usage: "subscribers per bus", field: func(c *Config) any { return &c.MaxSubscribers }},
	{Key: "max_subscribers_total", Usage: "subscribers of all buses together", field: func(c *Config) any { return &c.MaxSubscribersTotal }},
	{Key: "max_sessions", Usage: "number of sessions", field: func(c *Config) any { return &c.MaxSessions }},
	{Key: "max_auto_sessions", Usage: "number of sessions a publish may create", field: func(c *Config) any { return &c.MaxAutoSessions }},
	{Key: "auto_session_ttl", Usage: `idle time after which a session a publish created is deleted ("0": never)`, field: func(c *Config) any { return &c.AutoSessionTTL }},
	{Key: "auto_create_sessions", Usage: "create a missing session on publish", field: func(c *Config) any { return &c.AutoCreateSessions }},
	{Key: "max_event_bytes", Usage: "size limit of one event", field: func(c *Config) any { return &c.MaxEventBytes }},
	{Key: "max_body_bytes", Usage: "size limit of one request body", field: func(c *Config) any { return &c.MaxBodyBytes }},
	{Key: "max_inflight_body_bytes", Usage: "request bodies being read at once", field: func(c *Config) any { return &c.MaxInflightBodyBytes }},
	{Key: "peer_share", Usage: "fraction of each shared pool one peer other than root may hold (1: no shares)", field: func(c *Config) any { return &c.PeerShare }},
	{Key: "idempotency_window", Usage: "how long a publish's Idempotency-Key is remembered", field: func(c *Config) any { return &c.IdempotencyWindow }},
	{Key: "idempotency_max_bytes", Usage: "bytes the remembered Idempotency-Keys may take, shared fairly between peers", field: func(c *Config) any { return &c.IdempotencyMaxBytes }},
	{Key: "max_consumers", Usage: "consumers of one session, shared fairly between peers", field: func(c *Config) any { return &c.MaxConsumers }},
	{Key: "consumer_ttl", Usage: `time without a stream after which a consumer is forgotten ("0": never)`, field: func(c *Config) any { return &c.ConsumerTTL }},
	{Key: "max_header_bytes", Usage: "size limit of a request's headers", field: func(c *Config) any { return &c.MaxHeaderBytes }},
	{Key: "keepalive", Usage: "SSE comment and WebSocket ping interval", field: func(c *Config) any { return &c.Keepalive }},
	{Key: "shutdown_timeout", Usage: "time allowed for a graceful shutdown", field: func(c *Config) any { return &c.ShutdownTimeout }},
	{Key: "read_header_timeout", Usage: "time a client has to send request headers", field: func(c *Config) any { return &c.ReadHeaderTimeout }},
	{Key: "idle_timeout", Usage: "idle time of a keep-alive HTTP connection", field: func(c *Config) any { return &c.IdleTimeout }},
	{Key: "log_level", Usage: "debug, info, warn or error", field: func(c *Config) any { return &c.LogLevel }},
	{Key: "log_format", Usage: `log lines: "text" or "json"`, field: func(c *Config) any { return &c.LogFormat }},
	{Key: "state_dir", Path: true, DefaultRule: "$STATE_DIRECTORY (set by systemd's StateDirectory=), else /var/lib/localbus for root, else $XDG_STATE_HOME/localbus (~/.local/state/localbus)", Usage: "directory of the journal", field: func(c *Config) any { return &c.StateDir }},
	{Key: "durability", Usage: `"disk" (journal) or "memory"`, field: func(c *Config) any { return &c.Durability }},
	{Key: "fsync", Usage: `journal sync: "always", "interval" or "never"`, field: func(c *Config) any { return &c.Fsync }},
	{Key: "fsync_interval", Usage: `sync period when fsync is "interval"`, field: func(c *Config) any { return &c.FsyncInterval }},
}

// lookupSetting returns the setting of key.
func lookupSetting(key string) (Setting, bool) {
	for _, s := range settings {
		if s.Key == key {
			return s, true
		}
	}
	return Setting{}, false
}

// Diff returns the keys whose values differ between c and next, in the
// order of the settings table.
func (c Config) Diff(next Config) []string {
	var keys []string
	for _, s := range settings {
		if !reflect.DeepEqual(s.field(&c), s.field(&next)) {
			keys = append(keys, s.Key)
		}
	}
	return keys
}

// formatValue formats the value a field points to as its flag would take
// it.
func formatValue(ptr any) string {
	switch p := ptr.(type) {
	case *string:
		return *p
	case *bool:
		return strconv.FormatBool(*p)
	case *[]string:
		return strings.Join(*p, ",")
	case *int:
		return strconv.Itoa(*p)
	case *int64:
		return strconv.FormatInt(*p, 10)
	case *float64:
		return strconv.FormatFloat(*p, 'g', -1, 64)
	case *time.Duration:
		return p.String()
	case *os.FileMode:
		return fmt.Sprintf("%04o", uint32(*p))
	}
	panic(fmt.Sprintf("daemon: no formatting for %T", ptr))
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

// ConfigError is an invalid configuration value. Every error of LoadConfig
// and Config.Validate that concerns a key is a *ConfigError,
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
