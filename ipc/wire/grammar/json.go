package grammar

import (
	"encoding/binary"
	"math/bits"
)

// ScanValue returns the index just past the JSON value that starts at
// b[i] (no white space before it), or -1 if b[i:] does not start with a
// valid one. It checks the grammar as the bus compacts event data (RFC 8259;
// bytes of 0x80 and above in strings pass unchecked, as encoding/json lets
// them), with encoding/json's nesting limit: depth counts the arrays and
// objects the value sits in. It neither allocates nor copies, and is safe
// for concurrent use.
func ScanValue(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '"':
		return ScanString(b, i)
	case c == '{':
		return scanContainer(b, i, depth+1, '}')
	case c == '[':
		return scanContainer(b, i, depth+1, ']')
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

// scanContainer returns the index after the object or array at b[i],
// whose closing bracket is end ('}' for an object, whose members have
// keys), or -1.
func scanContainer(b []byte, i, depth int, end byte) int {
	if depth > MaxDepth {
		return -1
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == end {
		return i + 1
	}
	for {
		if end == '}' {
			if i >= len(b) || b[i] != '"' {
				return -1
			}
			if i = ScanString(b, i); i < 0 {
				return -1
			}
			i = SkipSpace(b, i)
			if i >= len(b) || b[i] != ':' {
				return -1
			}
			i = SkipSpace(b, i+1)
		}
		if i = ScanValue(b, i, depth); i < 0 {
			return -1
		}
		i = SkipSpace(b, i)
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case ',':
			i = SkipSpace(b, i+1)
		case end:
			return i + 1
		default:
			return -1
		}
	}
}

// SkipSpace returns the index of the first byte of b[i:] that is not JSON
// white space (space, tab, newline, carriage return), or len(b).
func SkipSpace(b []byte, i int) int {
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

func scanLiteral(b []byte, i int, lit string) int {
	if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
		return i + len(lit)
	}
	return -1
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

// ScanString returns the index just past the JSON string that starts at
// b[i] == '"', or -1 if it is not a valid one, as [ScanValue] checks it.
func ScanString(b []byte, i int) int {
	i++
	for {
		i = plainRun(b, i)
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
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
		default: // a control character
			return -1
		}
	}
}

// MaxDepth is encoding/json's nesting limit, which ScanValue applies.
const MaxDepth = 10000

// plain marks the bytes a string may hold as they are: not '"', not '\\',
// not a control character.
var plain = func() (t [256]bool) {
	for b := 0x20; b < 256; b++ {
		t[b] = b != '"' && b != '\\'
	}
	return t
}()

// Bytes repeated over a word, for plainRun.
const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// plainRun returns the index of the first byte of s[i:] that a string may
// not hold as it is ('"', '\\' or a control character), or len(s). It
// looks at eight bytes at a time: a byte is flagged when it is zero after
// XOR with '"' or '\\', or when subtracting 0x20 borrows; a borrow can
// only flag bytes after a flagged one, so the lowest flag is right.
func plainRun(s []byte, i int) int {
	for ; i+8 <= len(s); i += 8 {
		x := binary.LittleEndian.Uint64(s[i:])
		q, b := x^(lsb*'"'), x^(lsb*'\\')
		if m := ((q-lsb)&^q | (b-lsb)&^b | (x-lsb*0x20)&^x) & msb; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for i < len(s) && plain[s[i]] {
		i++
	}
	return i
}
