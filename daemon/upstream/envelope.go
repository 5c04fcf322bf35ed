package upstream

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/localbus/localbus/bus"
)

// decodeEnvelope reads the event an exported envelope carries: its type,
// data, originator and time. An envelope as a localbus exporter sends it
// (`{"id":N,"v":1,"type":"T","session":"S","data":D,"timestamp":"…"}`,
// then an optional "originator") is read by position, without parsing
// its data, which the mirror's publish validates and compacts anyway; any
// other shape is decoded as JSON. The data found this way is exactly the
// value json.Unmarshal would give: the timestamp key is found from the
// end, and it cannot occur inside a JSON string, so nothing inside the
// data or the originator can be mistaken for it.
func decodeEnvelope(p []byte) (bus.Event, bool) {
	if ev, ok := scanEnvelope(p); ok {
		return ev, true
	}
	var env bus.Envelope
	if err := json.Unmarshal(p, &env); err != nil {
		return bus.Event{}, false
	}
	typ, err := bus.ParseType(env.Type)
	if err != nil {
		return bus.Event{}, false
	}
	ev := bus.Event{Type: typ, Data: env.Data, Originator: env.Originator}
	if t, err := time.Parse(time.RFC3339Nano, env.Timestamp); err == nil {
		ev.Time = t
	}
	return ev, true
}

// scanEnvelope is decodeEnvelope's fast path; false when p is not laid
// out as a localbus session's envelope.
func scanEnvelope(p []byte) (bus.Event, bool) {
	const idKey, vType, sessionKey, dataKey, tsKey, origKey = `{"id":`, `,"v":1,"type":"`, `,"session":"`, `,"data":`, `,"timestamp":"`, `,"originator":`
	var ev bus.Event
	if !bytes.HasPrefix(p, []byte(idKey)) {
		return ev, false
	}
	i := len(idKey)
	for i < len(p) && p[i] >= '0' && p[i] <= '9' {
		i++
	}
	if i == len(idKey) || !bytes.HasPrefix(p[i:], []byte(vType)) {
		return ev, false
	}
	i += len(vType)
	end := bytes.IndexByte(p[i:], '"')
	if end <= 0 || bytes.IndexByte(p[i:i+end], '\\') >= 0 {
		return ev, false
	}
	typ, err := bus.ParseType(string(p[i : i+end]))
	if err != nil {
		return ev, false
	}
	ev.Type = typ
	i += end + 1
	if !bytes.HasPrefix(p[i:], []byte(sessionKey)) {
		return ev, false
	}
	i += len(sessionKey)
	if end = bytes.IndexByte(p[i:], '"'); end <= 0 || bytes.IndexByte(p[i:i+end], '\\') >= 0 {
		return ev, false
	}
	i += end + 1
	if !bytes.HasPrefix(p[i:], []byte(dataKey)) {
		return ev, false
	}
	i += len(dataKey)
	ts := bytes.LastIndex(p, []byte(tsKey))
	if ts <= i {
		return ev, false
	}
	ev.Data = json.RawMessage(p[i:ts])
	j := ts + len(tsKey)
	if end = bytes.IndexByte(p[j:], '"'); end <= 0 {
		return ev, false
	}
	t, err := time.Parse(time.RFC3339Nano, string(p[j:j+end]))
	if err != nil {
		return ev, false
	}
	ev.Time = t
	rest := p[j+end+1:]
	switch {
	case len(rest) == 1 && rest[0] == '}':
	case bytes.HasPrefix(rest, []byte(origKey)) && rest[len(rest)-1] == '}':
		var s string
		if json.Unmarshal(rest[len(origKey):len(rest)-1], &s) != nil {
			return ev, false
		}
		ev.Originator = s
	default:
		return ev, false
	}
	return ev, true
}
