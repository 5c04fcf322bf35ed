package wire

// Request headers of the protocol (SPEC §3, §6).
const (
	// HeaderEpoch carries the epoch of the bus a resuming stream last read,
	// with HeaderLastEventID; it wins over the ?epoch= parameter.
	HeaderEpoch = "Localbus-Epoch"
	// HeaderLastEventID carries the id of the last event a resuming stream
	// received; it wins over the ?since= parameter. A malformed value is
	// ignored.
	HeaderLastEventID = "Last-Event-ID"
	// HeaderClientID names a publisher: 1 to 128 printable ASCII
	// characters, which become the published envelopes' "originator".
	HeaderClientID = "Localbus-Client-Id"
	// HeaderIdempotencyKey makes a publish safe to send again: 1 to
	// MaxIdempotencyKey printable ASCII characters. The same key on the same
	// session within the daemon's idempotency_window gets the first reply
	// and publishes nothing; with a different body it is a 409
	// (CodeIdempotencyKeyReused).
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderIdempotentReplayed is "true" on the reply to a publish that
	// repeated an Idempotency-Key: the first request's reply, nothing
	// published.
	HeaderIdempotentReplayed = "Idempotent-Replayed"
)

// MaxIdempotencyKey is the longest Idempotency-Key the daemon takes.
const MaxIdempotencyKey = 128

// Content types of request and response bodies.
const (
	// ContentTypeJSON is the type of every JSON body, requests and replies.
	ContentTypeJSON = "application/json"
	// ContentTypeNDJSON is the type of a newline-delimited publish, and of
	// the reply of a streaming publish with ?ack=line.
	ContentTypeNDJSON = "application/x-ndjson"
	// ContentTypeSSE is the type of a Server-Sent Events stream.
	ContentTypeSSE = "text/event-stream"
)

// Query parameters of the stream and publish routes.
const (
	// ParamSince is a stream's resume cursor: an event id, or "now".
	ParamSince = "since"
	// ParamSinceTime starts a stream at the first event published at or
	// after a time (RFC 3339) or a duration ago ("10m"); the header
	// Last-Event-ID wins over it.
	ParamSinceTime = "sinceTime"
	// ParamTypes is a stream's type filter: comma-separated types or
	// family:* patterns.
	ParamTypes = "types"
	// ParamMaxQueued is a stream's queue limit, within Limits.MinMaxQueued
	// and Limits.MaxMaxQueued.
	ParamMaxQueued = "maxQueued"
	// ParamEpoch is the epoch a stream's cursor belongs to.
	ParamEpoch = "epoch"
	// ParamTicket carries a browser's single-use ticket on a GET stream
	// route: the only credential ever read from a URL (SPEC §7).
	ParamTicket = "ticket"
	// ParamAck chooses a streaming publish's acknowledgements: AckEnd or
	// AckLine. On a stream through a consumer it is the consumer's ack
	// mode: AckAuto or AckExplicit.
	ParamAck = "ack"
	// ParamConsumer names the consumer a session stream reads through
	// (SPEC §2.4): the daemon keeps its position.
	ParamConsumer = "consumer"
)

// Values of ParamAck.
const (
	// AckEnd answers a streaming publish once, with a StreamReply, when
	// its body ends (the default).
	AckEnd = "end"
	// AckLine answers a streaming publish with NDJSON: a {"id":N} line per
	// event as soon as it is published, then a StreamReply line (or an
	// error line).
	AckLine = "line"
	// AckAuto makes a consumer's position follow what its stream wrote:
	// the default of a new consumer.
	AckAuto = "auto"
	// AckExplicit moves a consumer's position only when the reader
	// acknowledges: the WebSocket control frame {"op":"ack","id":N}, or a
	// POST to ConsumerAckPath.
	AckExplicit = "explicit"
)

// Subprotocol is the WebSocket subprotocol a browser offers, together with
// "localbus-key.<key>", to send its key (SPEC §7); the server selects it.
const Subprotocol = "localbus-key"

// RetryMs is the SSE retry: field every stream starts with, in
// milliseconds: how long a client waits before it reconnects.
const RetryMs = 3000

// MaxStreamAckIDs is the most ids a StreamReply lists; a longer stream's
// reply gives only the count and the first and last ids.
const MaxStreamAckIDs = 1000
