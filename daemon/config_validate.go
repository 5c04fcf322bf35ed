package daemon

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/localbus/localbus/ipc/access"
)

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
	check("max_ring_bytes_total", atLeastBytes(c.MaxRingBytesTotal, minBufferBytes))
	check("max_queued", inRange(c.MaxQueued, minMaxQueued, maxMaxQueued))
	check("max_queued_bytes", atLeastBytes(c.MaxQueuedBytes, minBufferBytes))
	check("max_subscribers", inRange(c.MaxSubscribers, 1, 0))
	check("max_subscribers_total", inRange(c.MaxSubscribersTotal, 1, 0))
	check("max_sessions", inRange(c.MaxSessions, 1, 0))
	check("max_auto_sessions", inRange(c.MaxAutoSessions, 1, 0))
	if c.AutoSessionTTL < 0 || (c.AutoSessionTTL > 0 && c.AutoSessionTTL < time.Second) {
		add("auto_session_ttl", "must be 0 or at least 1s, got %v", c.AutoSessionTTL)
	}
	check("max_event_bytes", bytesInRange(c.MaxEventBytes, minEventBytes, maxEventBytes))
	switch {
	case c.MaxBodyBytes < c.MaxEventBytes:
		// A body must be able to carry the largest event.
		add("max_body_bytes", "must be at least max_event_bytes (%s), got %d", formatBytes(c.MaxEventBytes), c.MaxBodyBytes)
	default:
		check("max_body_bytes", bytesInRange(c.MaxBodyBytes, minEventBytes, maxBodyBytes))
	}
	check("max_inflight_body_bytes", atLeastBytes(c.MaxInflightBodyBytes, minBufferBytes))
	check("idempotency_max_bytes", atLeastBytes(c.IdempotencyMaxBytes, 64<<10))
	check("max_consumers", inRange(c.MaxConsumers, 1, 0))
	if c.ConsumerTTL < 0 || (c.ConsumerTTL > 0 && c.ConsumerTTL < time.Second) {
		add("consumer_ttl", "must be 0 or at least 1s, got %v", c.ConsumerTTL)
	}
	if !(c.PeerShare > 0 && c.PeerShare <= 1) {
		add("peer_share", "must be more than 0 and at most 1 (1 turns fair shares off), got %s", strconv.FormatFloat(c.PeerShare, 'g', -1, 64))
	}
	if c.IdempotencyWindow < time.Second || c.IdempotencyWindow > 24*time.Hour {
		add("idempotency_window", "must be between 1s and 24h, got %v", c.IdempotencyWindow)
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
	check("log_format", oneOf(c.LogFormat, LogFormatText, LogFormatJSON))
	if c.StateDir == "" && c.Durability == DurabilityDisk {
		add("state_dir", "must be set when durability is %q", DurabilityDisk)
	}
	check("durability", oneOf(c.Durability, DurabilityDisk, DurabilityMemory))
	check("fsync", oneOf(c.Fsync, FsyncAlways, FsyncInterval, FsyncNever))
	check("fsync_interval", positive(c.FsyncInterval))
	errs = append(errs, c.upstreamProblems()...)
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
