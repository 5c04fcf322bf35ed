package wire

import "time"

// Consumer is one of a session's consumers (SPEC §2.4): a named cursor
// the daemon keeps for a reader. GET /api/v1/sessions/{id}/consumers
// answers a JSON array of them, sorted by name.
type Consumer struct {
	Name string `json:"name"`
	// AckedID is the last id acknowledged (0 for none): the consumer's
	// next stream starts after it.
	AckedID uint64 `json:"ackedId"`
	// Pending is how many of the session's events come after AckedID:
	// every event, when Epoch is not the session's epoch.
	Pending uint64 `json:"pending"`
	// Ack is the consumer's ack mode, AckAuto or AckExplicit.
	Ack string `json:"ack"`
	// Connected reports whether a stream reads through it now.
	Connected bool `json:"connected"`
	// LastActive is when a stream of it last stored its position or
	// ended, or it was acknowledged; consumer_ttl counts from it.
	LastActive time.Time `json:"lastActive"`
	// Epoch is the session's epoch AckedID belongs to.
	Epoch string `json:"epoch"`
}

// AckRequest is the body of POST
// /api/v1/sessions/{id}/consumers/{name}/ack: acknowledge every event up
// to ID for an explicit consumer.
type AckRequest struct {
	// ID is the id acknowledged: at most the session's lastId. A lower id
	// than the consumer's moves nothing.
	ID uint64 `json:"id"`
	// Epoch is the epoch ID belongs to, as the stream's stream:ready gave
	// it; "" omits it. One that is not the consumer's is a 409
	// (CodeEpochMismatch) and moves nothing, so an ack from before a
	// restart never skips events of a new id sequence.
	Epoch string `json:"epoch,omitempty"`
}

// AckReply is the answer to an AckRequest, once the acknowledgement is
// stored: the consumer's acknowledged id, which may be higher than the
// request's.
type AckReply struct {
	Name    string `json:"name"`
	AckedID uint64 `json:"ackedId"`
}
