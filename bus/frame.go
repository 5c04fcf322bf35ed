package bus

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// SchemaVersion is the envelope's "v": the version of the wire schema.
const SchemaVersion = 1

// Reserved frame types, family stream (SPEC §4).
const (
	TypeReady    = "stream:ready"
	TypeGap      = "stream:gap"
	TypeReplayed = "stream:replayed"
	TypeSlow     = "stream:slow"
	TypeLagged   = "stream:lagged"
	TypeError    = "stream:error"
	TypeClosed   = "stream:closed"
)

// A Frame is one unit of a stream, encoded once: an event (ID > 0) or a
// reserved stream:* frame (ID == 0). Frames are immutable and shared by every
// subscriber and every replay; writers must not modify the bytes.
type Frame struct {
	// ID is the event id on the bus that encoded it, 0 for reserved frames.
	ID uint64
	// Type is the event type, e.g. "build:step" or "stream:ready".
	Type string

	sse       []byte  // the complete SSE frame, ending in a blank line
	jsonStart int     // sse[jsonStart:len(sse)-2] is the JSON envelope
	origin    *Origin // the session event a global copy copies; nil for any other frame
}

// SSE returns the complete Server-Sent Events frame: "id:" (events only),
// "event:" and "data:" lines and the terminating blank line.
func (f *Frame) SSE() []byte { return f.sse }

// JSON returns the one-line JSON envelope, the payload of a WebSocket text
// frame. It shares memory with SSE.
func (f *Frame) JSON() []byte { return f.sse[f.jsonStart : len(f.sse)-2] }

// Size is the frame's encoded size in bytes, the figure queue and ring
// byte limits count.
func (f *Frame) Size() int { return len(f.sse) }

// Time returns the frame's publish time, from its envelope's timestamp
// (to the millisecond); the zero time if it has none.
func (f *Frame) Time() time.Time {
	j := f.JSON()
	// The envelope's own timestamp is its last "timestamp" key: only the
	// originator, a JSON string, may follow it, and the data before it
	// cannot end the search early when searching from the end.
	i := bytes.LastIndex(j, timestampKey)
	if i < 0 {
		return time.Time{}
	}
	rest := j[i+len(timestampKey):]
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, string(rest[:end]))
	if err != nil {
		return time.Time{}
	}
	return t
}

var timestampKey = []byte(`"timestamp":"`)

// Reserved reports whether the frame is a stream:* frame (it has no id).
func (f *Frame) Reserved() bool { return f.ID == 0 }

// Origin returns the session event that the frame copies, for a frame that
// [Batch.Copies] built; ok is false for every other frame (a session's
// event, an event published on the global bus with Events (the daemon's
// included), a reserved frame, a frame rebuilt by NewFrame or
// ParseFrame). The origin is set when the copy is built and never changes.
func (f *Frame) Origin() (o Origin, ok bool) {
	if f.origin == nil {
		return Origin{}, false
	}
	return *f.origin, true
}

// Event is what a publisher hands to Publish.
type Event struct {
	// Type is family:name.
	Type string
	// Data is the event's JSON payload; empty means null. It is validated and
	// compacted to one line.
	Data json.RawMessage
	// Originator is the publisher's Localbus-Client-Id, "" when absent.
	Originator string
	// Session names the session the event belongs to. On a session's bus it
	// defaults to the bus's name and is left empty; an event published on
	// the global bus with Session and Seq set has the shape of a copy but
	// carries no [Origin]: the hub copies a session's events with
	// [Batch.Copies] instead.
	Session string
	// Seq is the event's id in its session, for an event of the global bus.
	Seq uint64
	// Time is the publish time; zero means now.
	Time time.Time
	// Origin, for an event mirrored in from another node (SPEC §12), names
	// where it was first published; nil for a local event.
	Origin *RemoteOrigin

	// checkedType is Type as CheckType (or a publish) last found it
	// publishable: a type is validated once on its way through the router,
	// the session's bus and the global bus. A Type changed since no longer
	// matches, and is validated again.
	checkedType string
}

// RemoteOrigin is where a mirrored event was first published: the
// envelope's "origin" (SPEC §12). (Origin is what a global copy copies.)
type RemoteOrigin struct {
	// Node is the name of the daemon that published it.
	Node string `json:"node"`
	// Session is its session there.
	Session string `json:"session"`
	// ID is its id in that session.
	ID uint64 `json:"id"`
	// Epoch is that session's epoch.
	Epoch string `json:"epoch"`
}

// CheckType validates the event's type for publishing, as
// ValidatePublishType does, and notes in the event that it is valid:
// Publish, ValidateEvent and the global copy a hub makes of the event then
// trust it instead of validating it again. A type already checked (and not
// changed since) is not validated again.
func (ev *Event) CheckType() error {
	if ev.typeChecked() {
		return nil
	}
	if err := ValidatePublishType(ev.Type); err != nil {
		return err
	}
	ev.checkedType = ev.Type
	return nil
}

// typeChecked reports whether CheckType found the current Type valid.
func (ev *Event) typeChecked() bool { return ev.checkedType != "" && ev.checkedType == ev.Type }

// lastStamp is the last timestamp formatted: events published in the same
// millisecond share it.
var lastStamp atomic.Pointer[stamp]

type stamp struct {
	ms int64
	b  []byte
}

// appendTimestamp appends t in the envelope's format, UTC to the
// millisecond.
func appendTimestamp(dst []byte, t time.Time) []byte {
	ms := t.UnixMilli()
	if ms < 0 {
		return t.UTC().AppendFormat(dst, timestampLayout)
	}
	if st := lastStamp.Load(); st != nil && st.ms == ms {
		return append(dst, st.b...)
	}
	b := time.UnixMilli(ms).UTC().AppendFormat(nil, timestampLayout)
	lastStamp.Store(&stamp{ms: ms, b: b})
	return append(dst, b...)
}

// prepared is an event validated and encoded up to its id: the envelope's
// bytes after `{"id":N`.
type prepared struct {
	typ    string
	tail   *bytes.Buffer
	origin *Origin // set for a global copy (Batch.Copies)
}

var tailPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const timestampLayout = "2006-01-02T15:04:05.000Z07:00"

// prepare validates ev and encodes everything but its id. It does the work
// that does not need the bus lock, so concurrent publishers encode in
// parallel.
//
// A type CheckType found valid is trusted; any other is validated, and
// noted in *ev as checked when it is publishable, so that the copy a hub
// puts on the global bus is not validated again.
func prepare(ev *Event, session string, allowLocalbus bool) (prepared, error) {
	switch {
	case ev.typeChecked():
	case allowLocalbus && FamilyOf(ev.Type) == FamilyLocalbus:
		if err := ValidateType(ev.Type); err != nil {
			return prepared{}, err
		}
	default:
		if err := ev.CheckType(); err != nil {
			return prepared{}, err
		}
	}
	if ev.Session != "" {
		// Written into the envelope unescaped, so it must be a valid id.
		if err := ValidateSessionID(ev.Session); err != nil {
			return prepared{}, err
		}
		session = ev.Session
	}
	if !utf8.Valid(ev.Data) {
		// json.Compact passes invalid UTF-8 through, and a WebSocket text
		// frame must be valid UTF-8.
		return prepared{}, inputError("data", "", "not valid UTF-8")
	}
	b := tailPool.Get().(*bytes.Buffer)
	b.Reset()
	b.WriteString(`,"v":1,"type":"`)
	b.WriteString(ev.Type) // validated: nothing to escape
	b.WriteByte('"')
	if session != "" {
		b.WriteString(`,"session":"`)
		b.WriteString(session) // validated by the caller: nothing to escape
		b.WriteByte('"')
	}
	if ev.Seq != 0 {
		b.WriteString(`,"seq":`)
		b.Write(strconv.AppendUint(b.AvailableBuffer(), ev.Seq, 10))
	}
	b.WriteString(`,"data":`)
	if len(bytes.TrimSpace(ev.Data)) == 0 {
		b.WriteString("null")
	} else if err := compactInto(b, ev.Data); err != nil {
		tailPool.Put(b)
		return prepared{}, inputError("data", "", "not valid JSON: "+err.Error())
	}
	t := ev.Time
	if t.IsZero() {
		t = time.Now()
	}
	b.WriteString(`,"timestamp":"`)
	b.Write(appendTimestamp(b.AvailableBuffer(), t))
	b.WriteByte('"')
	if ev.Originator != "" {
		b.WriteString(`,"originator":`)
		b.Write(appendJSONString(b.AvailableBuffer(), ev.Originator))
	}
	if o := ev.Origin; o != nil {
		b.WriteString(`,"origin":{"node":`)
		b.Write(appendJSONString(b.AvailableBuffer(), o.Node))
		b.WriteString(`,"session":`)
		b.Write(appendJSONString(b.AvailableBuffer(), o.Session))
		b.WriteString(`,"id":`)
		b.Write(strconv.AppendUint(b.AvailableBuffer(), o.ID, 10))
		b.WriteString(`,"epoch":`)
		b.Write(appendJSONString(b.AvailableBuffer(), o.Epoch))
		b.WriteByte('}')
	}
	b.WriteByte('}')
	return prepared{typ: ev.Type, tail: b}, nil
}

func (p prepared) release() {
	if p.tail != nil {
		tailPool.Put(p.tail)
	}
}

// size is the encoded size the frame will have with id.
func (p prepared) size(id uint64) int {
	idLen := decimalLen(id)
	return len("id: ") + idLen + len("\nevent: ") + len(p.typ) + len("\ndata: ") + len(`{"id":`) + idLen + p.tail.Len() + 2
}

// appendFrame appends the final frame's bytes with its id and returns
// them with the offset of its JSON envelope.
func (p prepared) appendFrame(buf []byte, id uint64) ([]byte, int) {
	buf = append(buf, "id: "...)
	buf = strconv.AppendUint(buf, id, 10)
	buf = append(buf, "\nevent: "...)
	buf = append(buf, p.typ...)
	buf = append(buf, "\ndata: "...)
	start := len(buf)
	buf = append(buf, `{"id":`...)
	buf = strconv.AppendUint(buf, id, 10)
	buf = append(buf, p.tail.Bytes()...)
	buf = append(buf, "\n\n"...)
	return buf, start
}

// frameChunk is the most bytes of consecutive frames built in one
// allocation. Frames of one publish are laid out back to back, so that a
// writer can send a run of them as one buffer; the chunk bounds what a
// frame left in the ring can keep alive of its neighbours.
const frameChunk = 256 << 10

// buildFrames appends to dst the frames of preps with ids from first on.
func buildFrames(dst []*Frame, preps []prepared, first uint64) []*Frame {
	fs := make([]Frame, len(preps))
	var buf []byte
	for i, p := range preps {
		id := first + uint64(i)
		n := p.size(id)
		if cap(buf)-len(buf) < n {
			// A new chunk: the rest of the batch, up to frameChunk, or
			// this one frame if it is larger.
			c := n
			for j, q := range preps[i+1:] {
				qn := q.size(id + 1 + uint64(j))
				if c+qn > frameChunk {
					break
				}
				c += qn
			}
			buf = make([]byte, 0, c)
		}
		off := len(buf)
		var js int
		buf, js = p.appendFrame(buf, id)
		fs[i] = Frame{ID: id, Type: p.typ, sse: buf[off:len(buf):len(buf)], jsonStart: js - off, origin: p.origin}
		dst = append(dst, &fs[i])
	}
	return dst
}

func decimalLen(n uint64) int {
	l := 1
	for n >= 10 {
		n /= 10
		l++
	}
	return l
}

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, `\ufffd`...)
		} else if r == '\u2028' || r == '\u2029' {
			dst = append(dst, `\u202`...)
			dst = append(dst, hex[r&0xf])
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}

// ParseFrame rebuilds a Frame from a JSON envelope produced by this package,
// as a journal stores it. It reads only the "id", which must be at least 1,
// and the "type"; an envelope that spans lines is compacted to one.
func ParseFrame(envelope []byte) (*Frame, error) {
	var head struct {
		ID   uint64 `json:"id"`
		Type string `json:"type"`
	}
	if err := json.Unmarshal(envelope, &head); err != nil {
		return nil, inputError("envelope", "", err.Error())
	}
	if head.ID == 0 {
		return nil, inputError("envelope", "", "an event needs an id of at least 1")
	}
	if err := ValidateType(head.Type); err != nil {
		return nil, err
	}
	if bytes.ContainsAny(envelope, "\r\n") {
		// A line break would end the SSE data line early.
		var c bytes.Buffer
		if err := json.Compact(&c, envelope); err != nil {
			return nil, inputError("envelope", "", err.Error())
		}
		envelope = c.Bytes()
	}
	return buildFrame(head.ID, head.Type, envelope), nil
}

// NewFrame rebuilds the frame of event id from its type and one-line JSON
// envelope, as a journal stores them: no JSON is parsed and nothing is
// validated, so it is only for bytes this package encoded (Frame.Type and
// Frame.JSON of an event). The envelope is copied. Its Size is
// FrameSize(id, typ, len(envelope)).
func NewFrame(id uint64, typ string, envelope []byte) *Frame {
	return buildFrame(id, typ, envelope)
}

// FrameSize is the Size of the frame NewFrame builds for an event (id ≥ 1),
// computed without building it.
func FrameSize(id uint64, typ string, envelopeLen int) int {
	return len("id: ") + decimalLen(id) + len("\nevent: ") + len(typ) + len("\ndata: ") + envelopeLen + 2
}

// buildFrame wraps an encoded envelope in its SSE framing.
func buildFrame(id uint64, typ string, envelope []byte) *Frame {
	n := len("event: ") + len(typ) + len("\ndata: ") + len(envelope) + 2
	if id != 0 {
		n += len("id: ") + decimalLen(id) + 1
	}
	buf := make([]byte, 0, n)
	if id != 0 {
		buf = append(buf, "id: "...)
		buf = strconv.AppendUint(buf, id, 10)
		buf = append(buf, '\n')
	}
	buf = append(buf, "event: "...)
	buf = append(buf, typ...)
	buf = append(buf, "\ndata: "...)
	start := len(buf)
	buf = append(buf, envelope...)
	buf = append(buf, "\n\n"...)
	return &Frame{ID: id, Type: typ, sse: buf, jsonStart: start}
}

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
}

// Gap reasons, the data.reason of stream:gap.
const (
	GapRingEvicted = "ring_evicted"
	GapEpochReset  = "epoch_reset"
)

// GapData is the data of stream:gap: the resume point could not be served.
type GapData struct {
	Reason              string  `json:"reason"`
	LastDeliveredID     uint64  `json:"lastDeliveredId"`
	EarliestAvailableID *uint64 `json:"earliestAvailableId"`
	LastID              uint64  `json:"lastId"`
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
// daemon ended: its session was deleted, or the daemon is shutting down or
// reloading.
type ClosedData struct {
	Reason  string `json:"reason"`
	RetryMs int    `json:"retryMs"`
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
