package bus

import (
	"bytes"
	"strconv"
)

// The global bus's copy of a session event is the session event's envelope
// with two changes: its own "id", and a "seq" field (the session's id)
// after "session". Everything else, data, timestamp and originator, is the
// same bytes, because the copy is built from them (Batch.Copies) rather
// than encoded again. The copy's frame carries its CopyOf from the moment
// it is built, so nothing downstream reads the bytes to learn what it
// copies; a journal stores the copy as a reference to the session's event
// and rebuilds it with AppendGlobalEnvelope, the same splice.

// CopyOf names the session event that a frame of the global bus copies
// ([Frame.CopyOf]). Session, Epoch and Seq together name one event for
// good: a session deleted and created again has a new epoch.
type CopyOf struct {
	// Session is the session's id.
	Session string
	// Epoch is the epoch of the session's bus that published the event.
	Epoch string
	// Seq is the event's id on the session's bus, the copy's "seq".
	Seq uint64
}

// Copies are events that one session's bus published, for [Batch.Copies]
// to copy onto the global bus.
type Copies struct {
	// From is the session's bus.
	From *Bus
	// Frames are events that From published, as [Staged.Frames] holds
	// them.
	Frames []*Frame
}

// stageCopies is Stage of a Batch of Copies.
func (b *Bus) stageCopies(batches []Copies) (Staged, error) {
	n := 0
	for _, c := range batches {
		n += len(c.Frames)
	}
	if n == 0 {
		return Staged{}, inputError("events", "", "empty batch")
	}
	if b.session != "" {
		return Staged{}, inputError("session", b.session, "copies go on the global bus")
	}
	var one [1]prepared
	preps := one[:0]
	if n > 1 {
		preps = make([]prepared, 0, n)
	}
	defer func() {
		for _, p := range preps {
			p.release()
		}
	}()
	metas := make([]frameMeta, n)
	for _, c := range batches {
		if c.From == nil && len(c.Frames) > 0 {
			return Staged{}, inputError("frames", "", "copies of no session")
		}
		for _, f := range c.Frames {
			p, ok := prepareCopy(f, c.From.session)
			if !ok {
				return Staged{}, inputError("frames", "", "not an event of session "+c.From.session)
			}
			m := &metas[len(preps)]
			m.copyOf = CopyOf{Session: c.From.session, Epoch: c.From.epoch, Seq: f.ID}
			if f.meta != nil {
				m.lost = f.meta.lost // the copy of a mirrored event carries its loss
			}
			p.meta = m
			preps = append(preps, p)
		}
	}
	return b.commit(preps, Batch{}) // a copy keeps no frames and no key
}

// prepareCopy encodes everything but the id of the copy of f, an event of
// session; false if f is not one this package encoded.
func prepareCopy(f *Frame, session string) (prepared, bool) {
	if _, copied := f.CopyOf(); f.Reserved() || copied || session == "" {
		return prepared{}, false
	}
	env := f.JSON()
	h, ok := parseSessionHead(env, f.Type)
	if !ok || h.id != f.ID || string(h.session) != session {
		return prepared{}, false
	}
	b := tailPool.Get().(*bytes.Buffer)
	b.Reset()
	b.Grow(len(env) + len(`,"seq":`) + 20)
	b.Write(appendCopyTail(b.AvailableBuffer(), env, h))
	return prepared{typ: f.Type, tail: b}, true
}

// AppendGlobalEnvelope appends to dst the envelope of the global bus's
// copy, under id, of the session event whose type and envelope are given
// (as Frame.Type and Frame.JSON of a session's event, or a journal's copy
// of them): byte for byte the envelope of the copy Batch.Copies built. ok
// is false when env is not the envelope of a session's event this package
// encoded.
func AppendGlobalEnvelope(dst []byte, typ string, env []byte, id uint64) ([]byte, bool) {
	h, ok := parseSessionHead(env, typ)
	if !ok {
		return dst, false
	}
	dst = append(dst, `{"id":`...)
	dst = strconv.AppendUint(dst, id, 10)
	return appendCopyTail(dst, env, h), true
}

// appendCopyTail appends the envelope of the copy of a session's event
// after its `{"id":N`: the session envelope's fields up to "session", the
// "seq", then the rest. Both the live copy and a journal's rebuild go
// through it, so they cannot differ.
func appendCopyTail(dst, env []byte, h sessionHead) []byte {
	dst = append(dst, env[h.idEnd:h.sessionEnd]...)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, h.id, 10)
	return append(dst, env[h.sessionEnd:]...)
}

// sessionHead locates the fields of a session event's envelope that come
// before "data": idEnd is where the "id" value ends, sessionEnd where the
// "session" field ends.
type sessionHead struct {
	id                uint64
	session           []byte
	idEnd, sessionEnd int
}

// parseSessionHead reads the head of env, the envelope of an event of type
// typ on a session's bus as prepare encodes it: `{"id":N,"v":1,"type":"T",
// "session":"S"` and no "seq". Session ids are never escaped (they are
// validated), so the session ends at the next quote.
func parseSessionHead(env []byte, typ string) (sessionHead, bool) {
	var h sessionHead
	const idPrefix, vType, sessionPrefix, seqPrefix = `{"id":`, `,"v":1,"type":"`, `,"session":"`, `,"seq":`
	if !hasPrefixAt(env, 0, idPrefix) {
		return h, false
	}
	var ok bool
	if h.id, h.idEnd, ok = scanDecimal(env, len(idPrefix)); !ok {
		return h, false
	}
	p := h.idEnd
	if !hasPrefixAt(env, p, vType) || !hasPrefixAt(env, p+len(vType), typ) || !hasPrefixAt(env, p+len(vType)+len(typ), `"`) {
		return h, false
	}
	p += len(vType) + len(typ) + 1
	if !hasPrefixAt(env, p, sessionPrefix) {
		return h, false
	}
	start := p + len(sessionPrefix)
	end := bytes.IndexByte(env[start:], '"')
	if end <= 0 {
		return h, false
	}
	h.session, h.sessionEnd = env[start:start+end], start+end+1
	if hasPrefixAt(env, h.sessionEnd, seqPrefix) {
		return h, false // a copy already
	}
	return h, true
}

// hasPrefixAt reports whether p[i:] starts with s.
func hasPrefixAt(p []byte, i int, s string) bool {
	return len(p)-i >= len(s) && string(p[i:i+len(s)]) == s
}

// scanDecimal reads the unsigned decimal at p[i:], returning it and the
// offset past it.
func scanDecimal(p []byte, i int) (uint64, int, bool) {
	var n uint64
	j := i
	for ; j < len(p) && p[j] >= '0' && p[j] <= '9'; j++ {
		d := uint64(p[j] - '0')
		if n > (^uint64(0)-d)/10 {
			return 0, j, false // overflows
		}
		n = n*10 + d
	}
	return n, j, j > i && (p[i] != '0' || j == i+1)
}
