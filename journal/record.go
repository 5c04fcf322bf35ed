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
// and per event: type length (2), type, envelope length (4), envelope.
const (
	recHeaderLen   = 8
	payloadHeadLen = 1 + 8 + 8 + 4
	kindEvents     = 1
	maxRecordLen   = 1 << 30
)

var errBadRecord = errors.New("journal: bad record")

// appendRecord appends the log record of frames, which have consecutive
// ids, to dst.
func appendRecord(dst []byte, num uint64, frames []*bus.Frame) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, recHeaderLen)...)
	dst = append(dst, kindEvents)
	dst = binary.BigEndian.AppendUint64(dst, num)
	dst = binary.BigEndian.AppendUint64(dst, frames[0].ID)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(frames)))
	for _, f := range frames {
		env := f.JSON()
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(f.Type)))
		dst = append(dst, f.Type...)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(env)))
		dst = append(dst, env...)
	}
	payload := dst[start+recHeaderLen:]
	binary.BigEndian.PutUint32(dst[start:], uint32(len(payload)))
	binary.BigEndian.PutUint32(dst[start+4:], checksum(payload))
	return dst
}

// record is a decoded log record. Its events alias the buffer it was read
// from.
type record struct {
	num     uint64
	firstID uint64
	events  []storedEvent
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
// (bus, first id, count as len(events) of nil events) is read, for logging
// what a damaged record held.
func decodePayload(p []byte, full bool) (record, error) {
	if len(p) < payloadHeadLen || p[0] != kindEvents {
		return record{}, errBadRecord
	}
	r := record{num: binary.BigEndian.Uint64(p[1:]), firstID: binary.BigEndian.Uint64(p[9:])}
	count := binary.BigEndian.Uint32(p[17:])
	if !full {
		r.events = make([]storedEvent, min(count, 1<<20))
		return r, nil
	}
	if r.firstID == 0 || uint64(count) > uint64(len(p)) {
		return record{}, errBadRecord
	}
	r.events = make([]storedEvent, 0, count)
	p = p[payloadHeadLen:]
	for range count {
		if len(p) < 2 {
			return record{}, errBadRecord
		}
		tl := int(binary.BigEndian.Uint16(p))
		if len(p) < 2+tl+4 {
			return record{}, errBadRecord
		}
		typ := string(p[2 : 2+tl])
		p = p[2+tl:]
		el := binary.BigEndian.Uint32(p)
		if uint64(len(p)-4) < uint64(el) {
			return record{}, errBadRecord
		}
		r.events = append(r.events, storedEvent{typ: typ, env: p[4 : 4+el]})
		p = p[4+el:]
	}
	if len(p) != 0 {
		return record{}, errBadRecord
	}
	return r, nil
}

// Database values: CRC-32C of the rest (4 bytes), type length (2), type,
// envelope. Keys are ids, 8 bytes big-endian.

func appendValue(dst []byte, typ string, env []byte) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(typ)))
	dst = append(dst, typ...)
	dst = append(dst, env...)
	binary.BigEndian.PutUint32(dst[start:], checksum(dst[start+4:]))
	return dst
}

// valueLen is the length of the value appendValue makes.
func valueLen(typ string, envLen int) int { return 4 + 2 + len(typ) + envLen }

// parseValue checks a value's checksum and returns its type and envelope,
// which alias v.
func parseValue(v []byte) (typ []byte, env []byte, err error) {
	if len(v) < 6 || checksum(v[4:]) != binary.BigEndian.Uint32(v) {
		return nil, nil, errBadRecord
	}
	tl := int(binary.BigEndian.Uint16(v[4:]))
	if len(v) < 6+tl {
		return nil, nil, errBadRecord
	}
	return v[6 : 6+tl], v[6+tl:], nil
}

func idKey(id uint64) []byte { return binary.BigEndian.AppendUint64(nil, id) }

func keyID(k []byte) uint64 {
	if len(k) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(k)
}
