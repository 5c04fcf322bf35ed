package bus

import (
	"encoding/json"
	"time"
)

// ReadyData is the data of stream:ready, the first frame of every stream.
type ReadyData struct {
	// Cursor is the resume point the client asked for; on a new connection
	// the bus's lastId (a safe anchor); null when a malformed Last-Event-ID
	// was ignored and no ?since= was given.
	Cursor     *uint64  `json:"cursor"`
	LastID     uint64   `json:"lastId"`
	EarliestID *uint64  `json:"earliestId"`
	Epoch      string   `json:"epoch"`
	Types      []string `json:"types"`
	MaxQueued  int      `json:"maxQueued"`
	// Consumer is the consumer a stream reads through (SPEC §2.4), absent
	// on other streams; Cursor is then its acknowledged id.
	Consumer *ReadyConsumer `json:"consumer,omitempty"`
}

// ReadyConsumer is the consumer of a stream, as its stream:ready shows it
// when the stream began.
type ReadyConsumer struct {
	Name    string `json:"name"`
	AckedID uint64 `json:"ackedId"`
	// Ack is the consumer's ack mode, "auto" or "explicit".
	Ack string `json:"ack"`
	// Created reports whether this stream created the consumer.
	Created bool `json:"created"`
}

// Gap reasons, the data.reason of stream:gap.
const (
	GapRingEvicted  = "ring_evicted"
	GapEpochReset   = "epoch_reset"
	GapUpstreamLost = "upstream_lost"
)

// GapData is the data of stream:gap: the resume point could not be
// served, or (upstream_lost) a mirror's origin lost events before the
// event that follows the gap, whose id is EarliestAvailableID.
type GapData struct {
	Reason              string  `json:"reason"`
	LastDeliveredID     uint64  `json:"lastDeliveredId"`
	EarliestAvailableID *uint64 `json:"earliestAvailableId"`
	LastID              uint64  `json:"lastId"`
	// OriginFrom and OriginTo are the missing origin ids, inclusive, for
	// upstream_lost only.
	OriginFrom uint64 `json:"originFrom,omitempty"`
	OriginTo   uint64 `json:"originTo,omitempty"`
}

// ReplayedData is the data of stream:replayed, sent after a resume's replay.
type ReplayedData struct {
	ReplayedCount       int     `json:"replayedCount"`
	LastReplayedEventID *uint64 `json:"lastReplayedEventId"`
}

// SlowData is the data of stream:slow, the warning at 75% of a queue limit.
type SlowData struct {
	Queued         int   `json:"queued"`
	MaxQueued      int   `json:"maxQueued"`
	QueuedBytes    int64 `json:"queuedBytes"`
	MaxQueuedBytes int64 `json:"maxQueuedBytes"`
}

// Lag reasons, the data.reason of stream:lagged.
const (
	LagQueueOverflow      = "queue_overflow"
	LagQueueBytesOverflow = "queue_bytes_overflow"
)

// LaggedData is the data of stream:lagged, the terminal frame of an evicted
// subscriber.
type LaggedData struct {
	Reason         string `json:"reason"`
	QueueSize      int    `json:"queueSize"`
	MaxQueued      int    `json:"maxQueued"`
	QueuedBytes    int64  `json:"queuedBytes"`
	MaxQueuedBytes int64  `json:"maxQueuedBytes"`
	// EventBytes is the size of the frame that did not fit; bytes overflow only.
	EventBytes *int64 `json:"eventBytes,omitempty"`
}

// ErrorData is the data of stream:error, the terminal frame of a stream
// refused after its response began.
type ErrorData struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// ClosedData is the data of stream:closed, the terminal frame of a stream the
// daemon ended: its session was deleted, the daemon is shutting down or
// reloading, or another stream took its consumer over.
type ClosedData struct {
	Reason string `json:"reason"`
	// RetryMs is a jittered reconnect hint; absent (0) for replaced, which
	// is final.
	RetryMs int `json:"retryMs,omitempty"`
}

// Envelope is the decoded form of any frame, for clients and tests.
type Envelope struct {
	ID         uint64          `json:"id,omitempty"`
	V          int             `json:"v"`
	Type       string          `json:"type"`
	Session    string          `json:"session,omitempty"`
	Seq        uint64          `json:"seq,omitempty"`
	Data       json.RawMessage `json:"data"`
	Timestamp  string          `json:"timestamp"`
	Originator string          `json:"originator,omitempty"`
	Origin     *RemoteOrigin   `json:"origin,omitempty"`
}

// reservedFrame encodes a stream:* frame with the given data. session may be
// "" (the global bus).
func reservedFrame(typ, session string, data any) *Frame {
	d, err := json.Marshal(data)
	if err != nil {
		// The data types above always marshal; keep Publish panic-free anyway.
		d = []byte("null")
	}
	env := make([]byte, 0, 96+len(d))
	env = append(env, `{"v":1,"type":"`...)
	env = append(env, typ...)
	env = append(env, '"')
	if session != "" {
		// Escaped: ErrorFrame takes any string, not only a validated id.
		env = append(env, `,"session":`...)
		env = appendJSONString(env, session)
	}
	env = append(env, `,"data":`...)
	env = append(env, d...)
	env = append(env, `,"timestamp":"`...)
	env = time.Now().UTC().AppendFormat(env, timestampLayout)
	env = append(env, `"}`...)
	return buildFrame(0, typ, env)
}

// ErrorFrame builds a terminal stream:error frame, for the router to send when
// a stream is refused after its response began (SPEC §4).
func ErrorFrame(session, code, message string) *Frame {
	return reservedFrame(TypeError, session, ErrorData{Code: code, Message: message})
}
