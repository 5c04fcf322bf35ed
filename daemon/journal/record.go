package journal

import (
	"encoding/binary"
	"errors"
	"hash/crc32"

	"github.com/localbus/localbus/bus"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func checksum(p []byte) uint32 { return crc32.Checksum(p, castagnoli) }

// Log records: an 8-byte header (payload length, CRC-32C of the payload),
// then the payload: kind (1 byte), bus number (8), first id (8), count (4),
// then for kindEvents, per event: type length (2), type, envelope length
// (4), envelope; for kindRefs, runs of events that copy session events held
// by earlier records: session bus number (8), first session id (8),
// count (4); for kindKeyed (format 3), kindEvents's events followed by an
// idempotency key of the session and what the hub stores under it: key
// length (2), key, value length (4), value, so that the key is durable
// exactly when its events are (keys.go). The global bus's records are refs
// when they can be (see Journal.refsFor), which halves what a publish
// writes and syncs.
const (
	recHeaderLen   = 8
	payloadHeadLen = 1 + 8 + 8 + 4
	refRunLen      = 8 + 8 + 4
	kindEvents     = 1
	kindRefs       = 2
	kindKeyed      = 3
	maxRecordLen   = 1 << 30
)

var errBadRecord = errors.New("journal: bad record")

// appendRecord appends the log record of frames, which have consecutive
// ids, to dst.
func appendRecord(dst []byte, num uint64, frames []*bus.Frame) []byte {
	start := len(dst)
	dst = appendRecordHead(dst, kindEvents, num, frames[0].ID, len(frames))
	for _, f := range frames {
		dst = appendEvent(dst, f.Type, f.JSON())
	}
	return sealRecord(dst, start)
}

// appendKeyedRecord appends the log record of frames, which have
// consecutive ids, and of key and its value, to dst.
func appendKeyedRecord(dst []byte, num uint64, frames []*bus.Frame, key string, val []byte) []byte {
	start := len(dst)
	dst = appendRecordHead(dst, kindKeyed, num, frames[0].ID, len(frames))
	for _, f := range frames {
		dst = appendEvent(dst, f.Type, f.JSON())
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(key)))
	dst = append(dst, key...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(val)))
	dst = append(dst, val...)
	return sealRecord(dst, start)
}

// keyedLen is the length of the key section appendKeyedRecord appends.
func keyedLen(key string, val []byte) int { return 2 + len(key) + 4 + len(val) }

// refRun is a run of events that copy the events of a session's bus, ids
// consecutive from first.
type refRun struct {
	num   uint64 // the session's bus
	first uint64
	n     uint32
}

// appendRefsRecord appends the log record of count events of bus num, ids
// from firstID on, that copy the events runs name.
func appendRefsRecord(dst []byte, num, firstID uint64, count int, runs []refRun) []byte {
	start := len(dst)
	dst = appendRecordHead(dst, kindRefs, num, firstID, count)
	for _, r := range runs {
		dst = binary.BigEndian.AppendUint64(dst, r.num)
		dst = binary.BigEndian.AppendUint64(dst, r.first)
		dst = binary.BigEndian.AppendUint32(dst, r.n)
	}
	return sealRecord(dst, start)
}

func appendRecordHead(dst []byte, kind byte, num, firstID uint64, count int) []byte {
	dst = append(dst, make([]byte, recHeaderLen)...)
	dst = append(dst, kind)
	dst = binary.BigEndian.AppendUint64(dst, num)
	dst = binary.BigEndian.AppendUint64(dst, firstID)
	return binary.BigEndian.AppendUint32(dst, uint32(count))
}

// sealRecord fills in the header of the record that starts at dst[start:].
func sealRecord(dst []byte, start int) []byte {
	payload := dst[start+recHeaderLen:]
	binary.BigEndian.PutUint32(dst[start:], uint32(len(payload)))
	binary.BigEndian.PutUint32(dst[start+4:], checksum(payload))
	return dst
}

// record is a decoded log record. Its events alias the buffer it was read
// from; a refs record has refs instead, until they are resolved.
type record struct {
	num     uint64
	firstID uint64
	count   int
	events  []storedEvent
	refs    []refRun
	// key and keyVal are a kindKeyed record's key and value (keyVal
	// aliases the buffer too); key is "" for other records.
	key    string
	keyVal []byte
}

type storedEvent struct {
	typ string
	env []byte
}

// readRecord decodes the record at the start of p and returns it with its
// length. errBadRecord means p does not start with a whole, intact record.
func readRecord(p []byte) (record, int, error) {
	if len(p) < recHeaderLen {
		return record{}, 0, errBadRecord
	}
	n := binary.BigEndian.Uint32(p)
	if n < payloadHeadLen || n > maxRecordLen || uint64(len(p)-recHeaderLen) < uint64(n) {
		return record{}, 0, errBadRecord
	}
	payload := p[recHeaderLen : recHeaderLen+int(n)]
	if checksum(payload) != binary.BigEndian.Uint32(p[4:]) {
		return record{}, 0, errBadRecord
	}
	r, err := decodePayload(payload, true)
	if err != nil {
		return record{}, 0, err
	}
	return r, recHeaderLen + int(n), nil
}

// decodePayload decodes a record's payload; with full false only its head
// (bus, first id, count) is read, for logging what a damaged record held.
func decodePayload(p []byte, full bool) (record, error) {
	if len(p) < payloadHeadLen || (p[0] != kindEvents && p[0] != kindRefs && p[0] != kindKeyed) {
		return record{}, errBadRecord
	}
	r := record{num: binary.BigEndian.Uint64(p[1:]), firstID: binary.BigEndian.Uint64(p[9:])}
	count := binary.BigEndian.Uint32(p[17:])
	r.count = int(count)
	if !full {
		return r, nil
	}
	if r.firstID == 0 || count == 0 {
		return record{}, errBadRecord
	}
	var err error
	switch p[0] {
	case kindRefs:
		r.refs, err = decodeRefs(p[payloadHeadLen:], count)
	case kindKeyed:
		var rest []byte
		if r.events, rest, err = decodeEventsPrefix(p[payloadHeadLen:], count); err == nil {
			r.key, r.keyVal, err = decodeKey(rest)
		}
	default:
		r.events, err = decodeEvents(p[payloadHeadLen:], count)
	}
	if err != nil {
		return record{}, err
	}
	return r, nil
}

// decodeRefs decodes the runs of a refs record, which must fill p exactly
// and add up to count events.
func decodeRefs(p []byte, count uint32) ([]refRun, error) {
	if len(p)%refRunLen != 0 {
		return nil, errBadRecord
	}
	runs := make([]refRun, 0, len(p)/refRunLen)
	var total uint64
	for ; len(p) > 0; p = p[refRunLen:] {
		r := refRun{num: binary.BigEndian.Uint64(p), first: binary.BigEndian.Uint64(p[8:]), n: binary.BigEndian.Uint32(p[16:])}
		if r.first == 0 || r.n == 0 {
			return nil, errBadRecord
		}
		total += uint64(r.n)
		runs = append(runs, r)
	}
	if total != uint64(count) {
		return nil, errBadRecord
	}
	return runs, nil
}

// decodeEvents decodes count events encoded by appendEvent, which must
// fill p exactly. The envelopes alias p.
func decodeEvents(p []byte, count uint32) ([]storedEvent, error) {
	events, rest, err := decodeEventsPrefix(p, count)
	if err != nil || len(rest) != 0 {
		return nil, errBadRecord
	}
	return events, nil
}

// decodeKey decodes the key section of a kindKeyed record, which must fill
// p exactly; the value aliases p. A key is never empty.
func decodeKey(p []byte) (string, []byte, error) {
	if len(p) < 2 {
		return "", nil, errBadRecord
	}
	kl := int(binary.BigEndian.Uint16(p))
	if kl == 0 || len(p) < 2+kl+4 {
		return "", nil, errBadRecord
	}
	key := string(p[2 : 2+kl])
	p = p[2+kl:]
	if vl := binary.BigEndian.Uint32(p); uint64(len(p)-4) != uint64(vl) {
		return "", nil, errBadRecord
	}
	return key, p[4:], nil
}

// decodeEventsPrefix decodes count events encoded by appendEvent at the
// start of p, and returns what follows them.
func decodeEventsPrefix(p []byte, count uint32) ([]storedEvent, []byte, error) {
	if uint64(count)*6 > uint64(len(p)) { // an event takes 6 bytes at least
		return nil, nil, errBadRecord
	}
	events := make([]storedEvent, 0, count)
	for range count {
		if len(p) < 2 {
			return nil, nil, errBadRecord
		}
		tl := int(binary.BigEndian.Uint16(p))
		if len(p) < 2+tl+4 {
			return nil, nil, errBadRecord
		}
		typ := string(p[2 : 2+tl])
		p = p[2+tl:]
		el := binary.BigEndian.Uint32(p)
		if uint64(len(p)-4) < uint64(el) {
			return nil, nil, errBadRecord
		}
		events = append(events, storedEvent{typ: typ, env: p[4 : 4+el]})
		p = p[4+el:]
	}
	return events, p, nil
}

// appendEvent appends one event as log records and chunks hold it.
func appendEvent(dst []byte, typ string, env []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(typ)))
	dst = append(dst, typ...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(env)))
	return append(dst, env...)
}

// eventLen is the length of what appendEvent appends.
func eventLen(typ string, envLen int) int { return 2 + len(typ) + 4 + envLen }

// Database values are chunks of events with consecutive ids, keyed by the
// first id (8 bytes, big-endian): CRC-32C of the rest (4 bytes), the count
// (4), then the events as appendEvent encodes them. Chunks keep the
// database's work per checkpoint to a few keys per bus, however many events
// it copies.
const (
	chunkHeadLen   = 8
	chunkMaxBytes  = 64 << 10
	chunkMaxEvents = 1024
)

// appendChunks appends the chunks of events, whose first id is first, to
// dst and calls put with each chunk's first id and value (which aliases
// dst's array: the caller must not modify it before bbolt is done with it).
func appendChunks(dst []byte, first uint64, n int, event func(i int) (string, []byte), put func(id uint64, v []byte) error) ([]byte, error) {
	for i := 0; i < n; {
		start := len(dst)
		dst = append(dst, make([]byte, chunkHeadLen)...)
		k := i
		for ; k < n && k-i < chunkMaxEvents; k++ {
			typ, env := event(k)
			if k > i && len(dst)-start+eventLen(typ, len(env)) > chunkMaxBytes {
				break
			}
			dst = appendEvent(dst, typ, env)
		}
		binary.BigEndian.PutUint32(dst[start+4:], uint32(k-i))
		binary.BigEndian.PutUint32(dst[start:], checksum(dst[start+4:]))
		if err := put(first+uint64(i), dst[start:len(dst):len(dst)]); err != nil {
			return dst, err
		}
		i = k
	}
	return dst, nil
}

// parseChunk checks a chunk's checksum and decodes its events, whose
// envelopes alias v.
func parseChunk(v []byte) ([]storedEvent, error) {
	if len(v) < chunkHeadLen || checksum(v[4:]) != binary.BigEndian.Uint32(v) {
		return nil, errBadRecord
	}
	evs, err := decodeEvents(v[chunkHeadLen:], binary.BigEndian.Uint32(v[4:]))
	if err != nil || len(evs) == 0 {
		return nil, errBadRecord
	}
	return evs, nil
}

// chunkSizes checks a chunk's checksum and calls fn with the type and
// envelope lengths of each of its events, in order, without decoding them.
// It returns the number of events.
func chunkSizes(v []byte, fn func(typLen, envLen int)) (int, error) {
	if len(v) < chunkHeadLen || checksum(v[4:]) != binary.BigEndian.Uint32(v) {
		return 0, errBadRecord
	}
	count := binary.BigEndian.Uint32(v[4:])
	p := v[chunkHeadLen:]
	for range count {
		if len(p) < 2 {
			return 0, errBadRecord
		}
		tl := int(binary.BigEndian.Uint16(p))
		if len(p) < 2+tl+4 {
			return 0, errBadRecord
		}
		el := binary.BigEndian.Uint32(p[2+tl:])
		p = p[2+tl+4:]
		if uint64(len(p)) < uint64(el) {
			return 0, errBadRecord
		}
		p = p[el:]
		fn(tl, int(el))
	}
	if len(p) != 0 || count == 0 {
		return 0, errBadRecord
	}
	return int(count), nil
}

func idKey(id uint64) []byte { return binary.BigEndian.AppendUint64(nil, id) }

func keyID(k []byte) uint64 {
	if len(k) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(k)
}
