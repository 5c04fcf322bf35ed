package ipc

import (
	"bytes"
	"encoding/binary"
	"math/bits"

	"github.com/localbus/localbus/bus"
)

// The fast path of decodePublish: one pass over the body that checks the
// JSON grammar (RFC 8259) and finds each event's "type" and "data" without
// allocating or copying. It is conservative: anything it is not sure of
// (an escaped or unknown key, a duplicate key, a "type" that is not a
// plain string, deep nesting, any syntax error) sends the whole body to
// the reference decoder, which gives the same results and errors as
// encoding/json. So it may refuse what is valid, never accept what is not.

// maxScanDepth is encoding/json's nesting limit.
const maxScanDepth = 10000

func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// scanValue returns the index after the JSON value at b[i:], or -1.
func scanValue(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '"':
		return scanString(b, i)
	case c == '{':
		return scanObject(b, i, depth+1)
	case c == '[':
		return scanArray(b, i, depth+1)
	case c == 't':
		return scanLiteral(b, i, "true")
	case c == 'f':
		return scanLiteral(b, i, "false")
	case c == 'n':
		return scanLiteral(b, i, "null")
	case c == '-' || (c >= '0' && c <= '9'):
		return scanNumber(b, i)
	}
	return -1
}

func scanLiteral(b []byte, i int, lit string) int {
	if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
		return i + len(lit)
	}
	return -1
}

// scanString returns the index after the string at b[i] == '"', or -1.
// Bytes of 0x80 and above pass unchecked, as encoding/json lets them.
func scanString(b []byte, i int) int {
	i++
	for i < len(b) {
		i = plainRun(b, i)
		if i >= len(b) {
			return -1
		}
		c := b[i]
		switch {
		case c == '"':
			return i + 1
		case c == '\\':
			if i+1 >= len(b) {
				return -1
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return -1
				}
				for _, h := range b[i+2 : i+6] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return -1
					}
				}
				i += 6
			default:
				return -1
			}
		case c < 0x20:
			return -1
		default:
			i++
		}
	}
	return -1
}

// Bytes repeated over a word, for plainRun.
const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// plainRun returns the index of the first byte of b[i:] that is '"', '\\'
// or a control character, or len(b), eight bytes at a time: a byte is
// flagged when it is zero after XOR with '"' or '\\', or when subtracting
// 0x20 borrows; a borrow can only flag bytes after a flagged one, so the
// lowest flag is right.
func plainRun(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q, s := x^(lsb*'"'), x^(lsb*'\\')
		if m := ((q-lsb)&^q | (s-lsb)&^s | (x-lsb*0x20)&^x) & msb; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for i < len(b) && b[i] >= 0x20 && b[i] != '"' && b[i] != '\\' {
		i++
	}
	return i
}

func scanDigits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// scanNumber returns the index after the number at b[i:], or -1.
func scanNumber(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = scanDigits(b, i+1)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		j := scanDigits(b, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := scanDigits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func scanObject(b []byte, i, depth int) int {
	if depth > maxScanDepth {
		return -1
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return -1
		}
		if i = scanString(b, i); i < 0 {
			return -1
		}
		i = skipSpace(b, i)
		if i >= len(b) || b[i] != ':' {
			return -1
		}
		if i = scanValue(b, skipSpace(b, i+1), depth); i < 0 {
			return -1
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return i + 1
		default:
			return -1
		}
	}
}

func scanArray(b []byte, i, depth int) int {
	if depth > maxScanDepth {
		return -1
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1
	}
	for {
		if i = scanValue(b, i, depth); i < 0 {
			return -1
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case ']':
			return i + 1
		default:
			return -1
		}
	}
}

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
		j := scanValue(b, i, 1)
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

// scanEvent reads one event object, all of raw, into ev: the type and the
// data (a slice of raw, not yet compacted: the bus compacts it). ok false
// means the reference decoder must decide.
func scanEvent(raw []byte, ev *bus.Event) (ok bool) {
	if len(raw) == 0 || raw[0] != '{' {
		return false
	}
	var seenType, seenData bool
	i := skipSpace(raw, 1)
	if i < len(raw) && raw[i] == '}' {
		*ev = bus.Event{}
		return i+1 == len(raw)
	}
	*ev = bus.Event{}
	for {
		if i >= len(raw) || raw[i] != '"' {
			return false
		}
		k := scanString(raw, i)
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
			j := scanString(raw, i)
			if j < 0 || bytes.IndexByte(raw[i+1:j-1], '\\') >= 0 {
				return false
			}
			ev.Type = string(raw[i+1 : j-1])
			i = j
		case bytes.Equal(key, keyData) && !seenData:
			seenData = true
			j := scanValue(raw, i, 1)
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
			return i+1 == len(raw)
		default:
			return false
		}
	}
}
