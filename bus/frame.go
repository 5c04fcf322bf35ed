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

	sse       []byte     // the complete SSE frame, ending in a blank line
	jsonStart int        // sse[jsonStart:len(sse)-2] is the JSON envelope
	meta      *frameMeta // what a global copy copies, a loss before a mirrored event; nil for most frames
}

// frameMeta is what few frames carry beyond their bytes, out of line so
// that every other frame stays small.
type frameMeta struct {
	copyOf CopyOf // the session event a global copy copies; Session "" for none
	lost   Lost   // origin ids lost before a mirrored event; From 0 for none
}

// Lost is a range of a mirror's origin ids, inclusive, that never reached
// the mirror (SPEC §12): recorded with the first event after the loss, in
// its envelope's "origin" ("lostFrom", "lostTo"), and announced to each
// reader with a stream:gap (reason upstream_lost) just before that event.
type Lost struct {
	From, To uint64
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

// CopyOf returns the session event that the frame copies, for a frame that
// [Batch.Copies] built; ok is false for every other frame (a session's
// event, an event published on the global bus with Events (the daemon's
// included), a reserved frame, a frame rebuilt by NewFrame or
// ParseFrame). It is set when the copy is built and never changes.
func (f *Frame) CopyOf() (c CopyOf, ok bool) {
	if f.meta == nil || f.meta.copyOf.Session == "" {
		return CopyOf{}, false
	}
	return f.meta.copyOf, true
}

// Lost returns the origin ids that a mirror lost just before this event
// (its envelope's origin has "lostFrom" and "lostTo"), for the event's
// frame on the mirror's bus and the global bus's copy of it; ok is false
// for every other frame.
func (f *Frame) Lost() (l Lost, ok bool) {
	if f.meta == nil || f.meta.lost.From == 0 {
		return Lost{}, false
	}
	return f.meta.lost, true
}

// Event is what a publisher hands to Publish.
type Event struct {
	// Type is family:name, parsed by ParseType (or one of the daemon's).
	Type Type
	// Data is the event's JSON payload; empty means null. It is validated and
	// compacted to one line.
	Data json.RawMessage
	// Originator is the publisher's Localbus-Client-Id, "" when absent.
	Originator string
	// Session names the session the event belongs to. On a session's bus it
	// defaults to the bus's name and is left zero; an event published on
	// the global bus with Session and Seq set has the shape of a copy but
	// carries no [CopyOf]: the hub copies a session's events with
	// [Batch.Copies] instead.
	Session SessionID
	// Seq is the event's id in its session, for an event of the global bus.
	Seq uint64
	// Time is the publish time; zero means now.
	Time time.Time
	// Origin, for an event mirrored in from another node (SPEC §12), names
	// where it was first published; nil for a local event.
	Origin *RemoteOrigin
}

// RemoteOrigin is where a mirrored event was first published: the
// envelope's "origin" (SPEC §12). (What a global copy copies is its
// [CopyOf].)
type RemoteOrigin struct {
	// Node is the name of the daemon that published it.
	Node string `json:"node"`
	// Session is its session there.
	Session string `json:"session"`
	// ID is its id in that session.
	ID uint64 `json:"id"`
	// Epoch is that session's epoch.
	Epoch string `json:"epoch"`
	// LostFrom and LostTo, when LostFrom is not 0, are the origin's ids
	// just before ID (in Epoch, inclusive) that never reached the mirror:
	// the importer sets them on the first event after a jump in the
	// origin's ids, and readers get a stream:gap (upstream_lost) before
	// the event.
	LostFrom uint64 `json:"lostFrom,omitempty"`
	LostTo   uint64 `json:"lostTo,omitempty"`
}

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
	typ  string
	tail *bytes.Buffer
	meta *frameMeta // set for a global copy (Batch.Copies) and a loss before a mirrored event
}

var tailPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const timestampLayout = "2006-01-02T15:04:05.000Z07:00"

// prepare validates ev's data and encodes everything but its id. It does
// the work that does not need the bus lock, so concurrent publishers
// encode in parallel. The type and session were parsed where they came in;
// only the daemon (daemon) publishes one of its own types.
func prepare(ev *Event, session string, daemon bool) (prepared, error) {
	if err := checkDaemonType(ev.Type, daemon); err != nil {
		return prepared{}, err
	}
	if !ev.Session.IsZero() {
		session = ev.Session.id
	}
	if !utf8.Valid(ev.Data) {
		// json.Compact passes invalid UTF-8 through, and a WebSocket text
		// frame must be valid UTF-8.
		return prepared{}, inputError("data", "", "not valid UTF-8")
	}
	b := tailPool.Get().(*bytes.Buffer)
	b.Reset()
	b.WriteString(`,"v":1,"type":"`)
	b.WriteString(ev.Type.name) // parsed: nothing to escape
	b.WriteByte('"')
	if session != "" {
		b.WriteString(`,"session":"`)
		b.WriteString(session) // parsed: nothing to escape
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
		if o.LostFrom != 0 {
			if o.LostTo < o.LostFrom || o.LostTo >= o.ID {
				tailPool.Put(b)
				return prepared{}, inputError("origin", "", "lostFrom..lostTo must be ids before id")
			}
			// Last in the envelope, where buildFrame finds them.
			b.WriteString(`,"lostFrom":`)
			b.Write(strconv.AppendUint(b.AvailableBuffer(), o.LostFrom, 10))
			b.WriteString(`,"lostTo":`)
			b.Write(strconv.AppendUint(b.AvailableBuffer(), o.LostTo, 10))
		}
		b.WriteByte('}')
	}
	b.WriteByte('}')
	p := prepared{typ: ev.Type.name, tail: b}
	if o := ev.Origin; o != nil && o.LostFrom != 0 {
		p.meta = &frameMeta{lost: Lost{From: o.LostFrom, To: o.LostTo}}
	}
	return p, nil
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
		fs[i] = Frame{ID: id, Type: p.typ, sse: buf[off:len(buf):len(buf)], jsonStart: js - off, meta: p.meta}
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
	if err := validateType(head.Type); err != nil {
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
	f := &Frame{ID: id, Type: typ, sse: buf, jsonStart: start}
	if l, ok := parseLost(envelope); ok && id != 0 {
		f.meta = &frameMeta{lost: l}
	}
	return f
}

// parseLost reads the loss a mirrored event's envelope records: it ends
// with `,"lostFrom":A,"lostTo":B}}`, the end of its "origin" and of the
// envelope, as prepare encodes it. Only an envelope with an origin ends
// in "}}" (every other one ends with a string), and the pattern cannot
// occur inside a JSON string, so reading it from the end, without parsing
// the JSON, is exact and cheap.
func parseLost(env []byte) (Lost, bool) {
	const fromKey, toKey = `,"lostFrom":`, `,"lostTo":`
	n := len(env)
	if n < 2 || env[n-1] != '}' || env[n-2] != '}' {
		return Lost{}, false
	}
	to, i, ok := scanDecimalBack(env, n-2)
	if !ok || i < len(toKey) || string(env[i-len(toKey):i]) != toKey {
		return Lost{}, false
	}
	from, j, ok := scanDecimalBack(env, i-len(toKey))
	if !ok || j < len(fromKey) || string(env[j-len(fromKey):j]) != fromKey || from == 0 || to < from {
		return Lost{}, false
	}
	return Lost{From: from, To: to}, true
}

// scanDecimalBack reads the unsigned decimal that ends at p[end], returning
// it and the offset where it starts.
func scanDecimalBack(p []byte, end int) (uint64, int, bool) {
	i := end
	for i > 0 && end-i < 20 && p[i-1] >= '0' && p[i-1] <= '9' {
		i--
	}
	n, j, ok := scanDecimal(p, i)
	return n, i, ok && j == end
}
