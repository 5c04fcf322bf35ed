package wire

import "time"

// ErrorBody is the JSON body of every refusal (SPEC §6):
// {"error":{"code":"…","message":"…"}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is what an ErrorBody says: a machine-readable code (one of
// the Code constants) and a message for people.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// StreamErrorBody is the reply of a streaming publish (?ack=end) that
// stopped with an error: the ErrorBody, plus what was published before it
// when anything was.
type StreamErrorBody struct {
	Error     ErrorDetail  `json:"error"`
	Published *StreamReply `json:"published,omitempty"`
}

// PublishReply is the body of a successful publish: the ids assigned, in
// order, and the session's last id.
type PublishReply struct {
	IDs    []uint64 `json:"ids"`
	LastID uint64   `json:"lastId"`
}

// ReloadReply is the body of a successful POST /api/v1/reload.
type ReloadReply struct {
	Reloaded bool `json:"reloaded"`
	// RestartNeeded names the changed keys the running daemon keeps at
	// their old values until it restarts (listen_tcp, upstream.url, …);
	// empty, never null, when the reload applied every change.
	RestartNeeded []string `json:"restartNeeded"`
}

// StreamReply is the final acknowledgement of a streaming publish.
type StreamReply struct {
	// Count is the number of events published.
	Count int `json:"count"`
	// FirstID and LastID are the ids of the first and last events
	// published (absent when Count is 0). Events other publishers sent to
	// the session at the same time may have ids between them.
	FirstID uint64 `json:"firstId,omitempty"`
	LastID  uint64 `json:"lastId,omitempty"`
	// IDs lists every id when Count is at most MaxStreamAckIDs.
	IDs []uint64 `json:"ids,omitempty"`
}

// CreateSessionRequest is the optional body of POST /api/v1/sessions.
type CreateSessionRequest struct {
	// ID names the session; empty lets the daemon choose one.
	ID string `json:"id,omitempty"`
	// RingSize is the session's replay ring in events. Zero is left out
	// of the body, which means the daemon's ring_size; a body that sends
	// 0 explicitly is refused with 400.
	RingSize int `json:"ringSize,omitempty"`
}

// SessionInfo is what the daemon reports of a session.
type SessionInfo struct {
	ID         string  `json:"id"`
	Epoch      string  `json:"epoch"`
	LastID     uint64  `json:"lastId"`
	EarliestID *uint64 `json:"earliestId"`
	// Subscribers is the number of streams reading the session now.
	Subscribers int `json:"subscribers"`
	// Consumers is the number of the session's consumers (SPEC §2.4).
	Consumers int      `json:"consumers"`
	Ring      RingInfo `json:"ring"`
	// PublishRate and DeliverRate are events/s over the last 10 s:
	// published to the session, and delivered to its streams' queues.
	PublishRate float64 `json:"publishRate"`
	DeliverRate float64 `json:"deliverRate"`
	// Durability is present when the session is journaled.
	Durability *DurabilityInfo `json:"durability,omitempty"`
}

// DurabilityInfo is a journaled session's figures.
type DurabilityInfo struct {
	// BytesOnDisk is what the session's retained events take on disk.
	BytesOnDisk int64 `json:"bytesOnDisk"`
	// LastSyncedID is the last id known to be on stable storage.
	LastSyncedID uint64 `json:"lastSyncedId"`
}

// RingInfo is a session's replay ring occupancy and limits.
type RingInfo struct {
	Count    int   `json:"count"`
	Bytes    int64 `json:"bytes"`
	MaxCount int   `json:"maxCount"`
	MaxBytes int64 `json:"maxBytes"`
}

// SessionList is the body of GET /api/v1/sessions.
type SessionList struct {
	Sessions []SessionInfo `json:"sessions"`
	// Next is the page's last id when more sessions follow: pass it as
	// ?after= for the next page. Empty on the last page.
	Next string `json:"next,omitempty"`
}

// Caps is the body of GET /api/v1/caps: what the daemon speaks.
type Caps struct {
	Version       string   `json:"version"`
	SchemaVersion int      `json:"schemaVersion"`
	Features      []string `json:"features"`
	Limits        Limits   `json:"limits"`
	// Admin is shown to admin callers only.
	Admin *AdminCaps `json:"admin,omitempty"`
	// Durability is "disk" or "memory" (SPEC §11); "" when the daemon
	// does not say.
	Durability string `json:"durability,omitempty"`
	// Fsync is the journal's sync mode ("always", "interval", "never")
	// with durability "disk", else "".
	Fsync string `json:"fsync,omitempty"`
}

// AdminCaps is what Caps tells an admin caller about the daemon's files,
// so that "localbus keys" edits the keys file this daemon reads.
type AdminCaps struct {
	// KeysFile is the absolute path of the keys file (keys_file).
	KeysFile string `json:"keysFile"`
}

// Limits are the figures Caps reports to clients.
type Limits struct {
	RingSize       int   `json:"ringSize"`
	RingMaxBytes   int64 `json:"ringMaxBytes"`
	MaxQueued      int   `json:"maxQueued"`
	MaxQueuedBytes int64 `json:"maxQueuedBytes"`
	MaxSubscribers int   `json:"maxSubscribers"`
	MaxConsumers   int   `json:"maxConsumers"`
	MaxSessions    int   `json:"maxSessions"`
	MaxEventBytes  int64 `json:"maxEventBytes"`
	MaxBatch       int   `json:"maxBatch"`
	MinMaxQueued   int   `json:"minMaxQueued"`
	MaxMaxQueued   int   `json:"maxMaxQueued"`
	KeepaliveMs    int64 `json:"keepaliveMs"`
}

// TicketRequest is the body of POST /api/v1/tickets: a single-use ticket
// for one GET stream route, for a browser's EventSource, which cannot send
// an Authorization header (SPEC §7).
type TicketRequest struct {
	// Path is the stream route the ticket opens, e.g.
	// SessionEventsPath("s-1"); no query string.
	Path string `json:"path"`
	// Scopes are what the ticket carries, each one held by the caller;
	// empty means all of the caller's scopes.
	Scopes []string `json:"scopes,omitempty"`
}

// TicketReply is the reply of POST /api/v1/tickets. The ticket goes in
// the stream's URL as ?ticket=…, once, before ExpiresAt.
type TicketReply struct {
	Ticket    string    `json:"ticket"`
	ExpiresAt time.Time `json:"expiresAt"`
}
