package bus

import (
	"bytes"
	"strconv"
)

// The global bus's copy of a session event has the session event's
// envelope with two changes: its own "id", and a "seq" field (the session's
// id) after "session". Everything else, data and timestamp included, is
// the same bytes when the copy was published from the same Event with its
// Time set, as the hub does. A journal uses that to store the copy as a
// reference to the session's event: the functions below recognise a copy
// and rebuild one.

// envelopeHead locates the fields of an event envelope this package
// encoded that come before "data": idEnd is where the "id" value ends,
// sessionEnd where the "session" field ends (idEnd's "v" and "type" fields
// included), seqEnd where the "seq" field ends (sessionEnd if there is
// none).
type envelopeHead struct {
	id, seq            uint64
	session            []byte
	idEnd, sessionEnd  int
	seqEnd             int
	hasSession, hasSeq bool
}

func parseEnvelopeHead(env []byte, typ string) (envelopeHead, bool) {
	var h envelopeHead
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
	if hasPrefixAt(env, p, sessionPrefix) {
		start := p + len(sessionPrefix)
		end := bytes.IndexByte(env[start:], '"')
		if end < 0 {
			return h, false
		}
		h.session, h.hasSession = env[start:start+end], true
		p = start + end + 1
	}
	h.sessionEnd = p
	if hasPrefixAt(env, p, seqPrefix) {
		if h.seq, p, ok = scanDecimal(env, p+len(seqPrefix)); !ok {
			return h, false
		}
		h.hasSeq = true
	}
	h.seqEnd = p
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

// GlobalOrigin returns the session and the session's id of a frame of the
// global bus that copies a session's event; ok is false for any other
// frame. session shares the frame's memory: it must not be modified.
func GlobalOrigin(f *Frame) (session []byte, seq uint64, ok bool) {
	if f.Reserved() {
		return nil, 0, false
	}
	h, ok := parseEnvelopeHead(f.JSON(), f.Type)
	if !ok || !h.hasSession || !h.hasSeq || h.id != f.ID {
		return nil, 0, false
	}
	return h.session, h.seq, true
}

// IsGlobalCopy reports whether global is the global bus's copy of the
// session's event: the same envelope, byte for byte, but for its id and
// its "seq", which is the session event's id.
func IsGlobalCopy(global, session *Frame) bool {
	if global.Reserved() || session.Reserved() || global.Type != session.Type {
		return false
	}
	g, ok := parseEnvelopeHead(global.JSON(), global.Type)
	if !ok || !g.hasSession || !g.hasSeq || g.id != global.ID || g.seq != session.ID {
		return false
	}
	// The session's envelope must read {"id":<seq>, then the global one's
	// fields up to "seq", then its fields after it.
	genv, senv := global.JSON(), session.JSON()
	if !hasPrefixAt(senv, 0, `{"id":`) {
		return false
	}
	id, p, ok := scanDecimal(senv, len(`{"id":`))
	if !ok || id != session.ID {
		return false
	}
	head, tail := genv[g.idEnd:g.sessionEnd], genv[g.seqEnd:]
	return len(senv) == p+len(head)+len(tail) &&
		bytes.Equal(senv[p:p+len(head)], head) && bytes.Equal(senv[p+len(head):], tail)
}

// AppendGlobalEnvelope appends to dst the envelope of the global bus's
// copy, under id, of the session event whose type and envelope are given:
// the inverse of IsGlobalCopy. ok is false when env is not the envelope of
// a session's event this package encoded.
func AppendGlobalEnvelope(dst []byte, typ string, env []byte, id uint64) ([]byte, bool) {
	h, ok := parseEnvelopeHead(env, typ)
	if !ok || !h.hasSession || h.hasSeq {
		return dst, false
	}
	dst = append(dst, `{"id":`...)
	dst = strconv.AppendUint(dst, id, 10)
	dst = append(dst, env[h.idEnd:h.sessionEnd]...)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, h.id, 10)
	return append(dst, env[h.sessionEnd:]...), true
}
