package daemon

import (
	"reflect"

	"github.com/localbus/localbus/daemon/upstream"
)

// reloadable is the one list of the keys a reload applies to the running
// daemon, the settings table's and the [upstream] table's alike. A new
// value of any other key waits for a restart: the listeners are made
// (socket, socket_mode, socket_group, listen_tcp), the logger is made
// (log_format), the journal is open (state_dir, durability, fsync,
// fsync_interval), the http.Server's timeouts and header limit
// (read_header_timeout, idle_timeout, max_header_bytes) are read by its
// serving goroutines without a lock, so changing them while it runs would
// be a data race, and the NATS connection is dialled (every upstream key
// but export and import). A test checks that every name is a key.
var reloadable = map[string]bool{
	"unix_auth": true, "unix_peer_scopes": true,
	"allow_remote": true, "allowed_origins": true, "allowed_hosts": true,
	"keys_file": true,
	"ring_size": true, "ring_max_bytes": true, "max_ring_bytes_total": true,
	"max_queued": true, "max_queued_bytes": true,
	"max_subscribers": true, "max_subscribers_total": true,
	"max_sessions": true, "max_auto_sessions": true, "auto_session_ttl": true, "auto_create_sessions": true,
	"max_event_bytes": true, "max_body_bytes": true, "max_inflight_body_bytes": true,
	"peer_share": true, "idempotency_window": true, "idempotency_max_bytes": true,
	"max_consumers": true, "consumer_ttl": true,
	"keepalive": true, "shutdown_timeout": true, "log_level": true,
	"upstream.export": true, "upstream.import": true,
}

// Reloadable reports whether a reload applies a new value of the setting
// to the running daemon; a new value of any other setting waits for a
// restart, and the reload names it.
func (s Setting) Reloadable() bool { return reloadable[s.Key] }

// upstreamFields returns a pointer to each key's field of an [upstream]
// table, in upstream.Keys's order (a test checks that every key is there).
func upstreamFields(c *upstream.Config) map[string]any {
	return map[string]any{
		"url": &c.URLs, "node": &c.Node, "stream": &c.Stream,
		"export": &c.Export, "import": &c.Import,
		"creds": &c.Creds, "tls_cert": &c.TLSCert, "tls_key": &c.TLSKey, "tls_ca": &c.TLSCA,
		"backlog_bytes": &c.BacklogBytes,
	}
}

// keepRestartValues sets every key of next that a reload cannot apply to
// its value in running, and returns the keys whose values differed, in the
// settings table's order and then upstream.Keys's: what a reload from
// running to next leaves for a restart. Adding or removing the [upstream]
// table as a whole needs a restart and is named "upstream".
func keepRestartValues(running Config, next *Config) []string {
	var kept []string
	keep := func(key string, old, cur any) {
		if reloadable[key] {
			return
		}
		o, c := reflect.ValueOf(old).Elem(), reflect.ValueOf(cur).Elem()
		if !reflect.DeepEqual(o.Interface(), c.Interface()) {
			kept = append(kept, key)
			c.Set(o)
		}
	}
	for _, s := range settings {
		keep(s.Key, s.field(&running), s.field(next))
	}
	switch old, cur := running.Upstream, next.Upstream; {
	case old == nil && cur == nil:
	case old == nil || cur == nil:
		next.Upstream = old
		kept = append(kept, upstreamKey)
	default:
		table := *cur
		next.Upstream = &table
		oldFields, curFields := upstreamFields(old), upstreamFields(&table)
		for _, k := range upstream.Keys {
			keep(upstreamKey+"."+k, oldFields[k], curFields[k])
		}
	}
	return kept
}
