package daemon

import (
	"log/slog"
	"os"
	"reflect"
	"time"
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
