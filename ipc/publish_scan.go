package ipc

import (
	"bytes"
	"sync"
	"sync/atomic"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/ipc/wire/grammar"
)

// The fast path of decodePublish: one pass over the body that checks the
// JSON grammar (RFC 8259) and finds each event's "type" and "data" without
// allocating or copying. It is conservative: anything it is not sure of
// (an escaped or unknown key, a duplicate key, a "type" that is not a
// plain string, deep nesting, any syntax error) sends the whole body to
// the reference decoder, which gives the same results and errors as
// encoding/json. So it may refuse what is valid, never accept what is not.
// The JSON grammar itself is grammar.ScanValue's, the one the bus compacts with.

// skipSpace is grammar.SkipSpace: JSON white space, as the scanner skips it.
func skipSpace(b []byte, i int) int { return grammar.SkipSpace(b, i) }

// splitArray returns the elements of the JSON array that is all of b
// (white space around it allowed), or ok false.
func splitArray(b []byte, dst [][]byte) (elems [][]byte, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return dst, skipSpace(b, i+1) == len(b)
	}
	for {
		j := grammar.ScanValue(b, i, 1)
		if j < 0 {
			return nil, false
		}
		dst = append(dst, b[i:j])
		i = skipSpace(b, j)
		if i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case ']':
			return dst, skipSpace(b, i+1) == len(b)
		default:
			return nil, false
		}
	}
}

var (
	keyType = []byte(`"type"`)
	keyData = []byte(`"data"`)
)

// scanEvent reads one event object, all of raw, into ev: the type, parsed,
// and the data (a slice of raw, not yet compacted: the bus compacts it).
// ok false means the reference decoder must decide: it does for an object
// without a type, or with one ParseType refuses.
func scanEvent(raw []byte, ev *bus.Event) (ok bool) {
	if len(raw) == 0 || raw[0] != '{' {
		return false
	}
	var seenType, seenData bool
	i := skipSpace(raw, 1)
	if i < len(raw) && raw[i] == '}' {
		return false // no type
	}
	*ev = bus.Event{}
	for {
		if i >= len(raw) || raw[i] != '"' {
			return false
		}
		k := grammar.ScanString(raw, i)
		if k < 0 {
			return false
		}
		key := raw[i:k]
		i = skipSpace(raw, k)
		if i >= len(raw) || raw[i] != ':' {
			return false
		}
		i = skipSpace(raw, i+1)
		switch {
		case bytes.Equal(key, keyType) && !seenType:
			seenType = true
			if i >= len(raw) || raw[i] != '"' {
				return false
			}
			j := grammar.ScanString(raw, i)
			if j < 0 || bytes.IndexByte(raw[i+1:j-1], '\\') >= 0 {
				return false
			}
			typ, err := parseTypeBytes(raw[i+1 : j-1])
			if err != nil {
				return false
			}
			ev.Type = typ
			i = j
		case bytes.Equal(key, keyData) && !seenData:
			seenData = true
			j := grammar.ScanValue(raw, i, 1)
			if j < 0 {
				return false
			}
			ev.Data = raw[i:j]
			i = j
		default:
			return false
		}
		i = skipSpace(raw, i)
		if i >= len(raw) {
			return false
		}
		switch raw[i] {
		case ',':
			i = skipSpace(raw, i+1)
		case '}':
			return i+1 == len(raw) && seenType
		default:
			return false
		}
	}
}

// typeCache holds the event types that publishes named, parsed: a type
// seen before costs one map lookup (which converts the bytes without
// allocating) instead of a string and a parse. The map is never changed
// once stored; an addition stores a copy (under typeCacheMu), up to
// maxCachedTypes, past which a type is parsed each time.
var (
	typeCache   atomic.Pointer[map[string]bus.Type]
	typeCacheMu sync.Mutex
)

const maxCachedTypes = 256

// parseTypeBytes is bus.ParseType of b, through typeCache.
func parseTypeBytes(b []byte) (bus.Type, error) {
	m := typeCache.Load()
	if m != nil {
		if t, ok := (*m)[string(b)]; ok {
			return t, nil
		}
	}
	t, err := bus.ParseType(string(b))
	if err != nil || (m != nil && len(*m) >= maxCachedTypes) {
		return t, err
	}
	typeCacheMu.Lock()
	defer typeCacheMu.Unlock()
	cur := typeCache.Load()
	n := 0
	if cur != nil {
		n = len(*cur)
	}
	if n < maxCachedTypes {
		next := make(map[string]bus.Type, n+1)
		if cur != nil {
			for k, v := range *cur {
				next[k] = v
			}
		}
		next[t.String()] = t
		typeCache.Store(&next)
	}
	return t, nil
}
