package wire

// Error codes: the "code" of an ErrorBody (ipc/protocol.md, Errors). A
// client branches on them; the message is for people. The status each
// comes with is fixed and named after it.
const (
	// 400: a path parameter, query parameter, header or body the daemon
	// refuses. The invalid_* codes name what was wrong.
	CodeInvalidType       = "invalid_type"
	CodeInvalidSession    = "invalid_session"
	CodeInvalidLimit      = "invalid_limit" // ?limit= of a session listing outside 1 to MaxPageLimit
	CodeInvalidAfter      = "invalid_after" // ?after= of a session listing that is no session id
	CodeInvalidSince      = "invalid_since"
	CodeInvalidSinceTime  = "invalid_sinceTime"
	CodeInvalidMaxQueued  = "invalid_maxQueued"
	CodeInvalidTypes      = "invalid_types"
	CodeInvalidFamily     = "invalid_family"
	CodeInvalidEvent      = "invalid_event"
	CodeInvalidBody       = "invalid_body"
	CodeInvalidQuery      = "invalid_query"
	CodeInvalidAck        = "invalid_ack"
	CodeInvalidConsumer   = "invalid_consumer" // a consumer's name, or ?consumer= on a family or global stream
	CodeInvalidID         = "invalid_id"       // an ack's id: not a number, or above the session's lastId
	CodeInvalidRingSize   = "invalid_ringSize"
	CodeInvalidClientID   = "invalid_client_id"
	CodeInvalidIdemKey    = "invalid_idempotency_key"
	CodeInvalidPath       = "invalid_path"
	CodeInvalidScopes     = "invalid_scopes"
	CodeWebSocketRequired = "websocket_required"
	CodeReloadRefused     = "reload_refused"

	// 401: no credentials, unknown ones, or ones sent in the query string.
	CodeUnauthorized       = "unauthorized"
	CodeInvalidCredentials = "invalid_credentials"
	CodeCredentialsInQuery = "credentials_in_query"
	// CodeInvalidTicket: a ?ticket= that is unknown, used, expired or for
	// another path.
	CodeInvalidTicket = "invalid_ticket"

	// 403: the caller lacks the route's scope, or a browser's Origin is
	// not allowed.
	CodeForbidden        = "forbidden"
	CodeOriginNotAllowed = "origin_not_allowed"

	// 404: no such session or route.
	CodeNotFound = "not_found"
	// 404: GET /api/v1/upstream on a daemon without an [upstream] table.
	CodeNoUpstream = "no_upstream"
	// 405: the route exists, not with this method (the reply has Allow).
	CodeMethodNotAllowed = "method_not_allowed"
	// 408: a request body stalled.
	CodeBodyTimeout = "body_timeout"
	// 408: a request body came slower than 64 KiB/s over 5 s, after its
	// first 5 s.
	CodeBodyTooSlow = "body_too_slow"
	// 409: the session exists, or an Idempotency-Key was used on the
	// session with a different request.
	CodeSessionExists        = "session_exists"
	CodeIdempotencyKeyReused = "idempotency_key_reused"
	// CodeReadOnly: a publish to a mirror of another node's session (409).
	CodeReadOnly = "read_only"
	// 409, consumers (SPEC §2.4): ?since= or ?sinceTime= on a consumer
	// that exists; ?ack= naming the other mode than the consumer's; an ack
	// of an auto consumer; an ack whose epoch is not the consumer's.
	CodeConsumerExists      = "consumer_exists"
	CodeConsumerAckMode     = "consumer_ack_mode"
	CodeConsumerNotExplicit = "consumer_not_explicit"
	CodeEpochMismatch       = "epoch_mismatch"

	// 413: an event, a batch or a body over its limit.
	CodeEventTooLarge = "event_too_large"
	CodeBatchTooLarge = "batch_too_large"
	CodeBodyTooLarge  = "body_too_large"

	// 421: on TCP, a Host that is not loopback or allowed.
	CodeHostNotAllowed = "host_not_allowed"
	// 429: the daemon's session limit is reached.
	CodeSessionLimit = "session_limit"
	// 429 on REST, or the code of a stream's terminal stream:error frame:
	// the subscriber limit is reached.
	CodeSubscriberLimit = "subscriber_limit"
	// 429: as many browser tickets are outstanding as the daemon keeps.
	CodeTicketLimit = "ticket_limit"
	// 429: the session has max_consumers consumers, or the caller holds
	// its share of them.
	CodeConsumerLimit = "consumer_limit"
	// 431: the request line and headers are too large.
	CodeHeadersTooLarge = "headers_too_large"

	// 503: the daemon is shutting down, not ready yet, cannot reload, or
	// is reading as many request bodies as max_inflight_body_bytes allows
	// (busy, with Retry-After).
	CodeShuttingDown      = "shutting_down"
	CodeBusy              = "busy"
	CodeNotReady          = "not_ready"
	CodeReloadUnavailable = "reload_unavailable"

	// 507: the journal's disk is full; nothing was published.
	CodeDiskFull = "disk_full"

	// 500: anything else; the message says what.
	CodeInternal = "internal"
)
