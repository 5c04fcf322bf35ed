package bus

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/bits"
)

// compactInto appends the JSON value data to b without insignificant
// white space; invalid JSON is json.Compact's error, and b is then left
// as json.Compact leaves it.
func compactInto(b *bytes.Buffer, data []byte) error {
	b.Grow(len(data))
	if out, ok := appendCompact(b.AvailableBuffer(), data); ok {
		b.Write(out)
		return nil
	}
	return json.Compact(b, data)
}

// appendCompact appends src, a JSON value, to dst without its
// insignificant white space, as json.Compact does, in one pass that does
// not go through encoding/json's byte-at-a-time state machine: strings,
// the bulk of most events, are copied in runs. It reports false for
// anything that is not valid JSON (RFC 8259; bytes of 0x80 and above in
// strings pass unchecked, as encoding/json lets them), and the caller then
// asks json.Compact for its error.
func appendCompact(dst, src []byte) ([]byte, bool) {
	c := compactor{src: src, dst: dst}
	c.space()
	if !c.value(0) {
		return dst, false
	}
	c.space()
	if c.i != len(src) {
		return dst, false
	}
	c.flush(c.i)
	return c.dst, true
}

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

// compactor copies src to dst in runs: src[start:i] is pending, and white
// space between tokens ends a run.
type compactor struct {
	src, dst []byte
	i, start int
}

func (c *compactor) flush(end int) {
	c.dst = append(c.dst, c.src[c.start:end]...)
}

// space skips white space, leaving it out of the copy.
func (c *compactor) space() {
	i := c.i
	for i < len(c.src) {
		switch c.src[i] {
		case ' ', '\t', '\n', '\r':
			i++
			continue
		}
		break
	}
	if i != c.i {
		c.flush(c.i)
		c.i, c.start = i, i
	}
}

func (c *compactor) value(depth int) bool {
	if c.i >= len(c.src) {
		return false
	}
	switch b := c.src[c.i]; {
	case b == '"':
		return c.str()
	case b == '{':
		return c.object(depth + 1)
	case b == '[':
		return c.array(depth + 1)
	case b == 't':
		return c.literal("true")
	case b == 'f':
		return c.literal("false")
	case b == 'n':
		return c.literal("null")
	case b == '-' || (b >= '0' && b <= '9'):
		return c.number()
	}
	return false
}

func (c *compactor) literal(lit string) bool {
	if len(c.src)-c.i < len(lit) || string(c.src[c.i:c.i+len(lit)]) != lit {
		return false
	}
	c.i += len(lit)
	return true
}

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

func (c *compactor) str() bool {
	s, i := c.src, c.i+1
	for {
		i = plainRun(s, i)
		if i >= len(s) {
			return false
		}
		switch s[i] {
		case '"':
			c.i = i + 1
			return true
		case '\\':
			if i+1 >= len(s) {
				return false
			}
			switch s[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(s) {
					return false
				}
				for _, h := range s[i+2 : i+6] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return false
					}
				}
				i += 6
			default:
				return false
			}
		default: // a control character
			return false
		}
	}
}

func (c *compactor) digits() int {
	start := c.i
	for c.i < len(c.src) && c.src[c.i] >= '0' && c.src[c.i] <= '9' {
		c.i++
	}
	return c.i - start
}

func (c *compactor) number() bool {
	s := c.src
	if s[c.i] == '-' {
		c.i++
	}
	switch {
	case c.i < len(s) && s[c.i] == '0':
		c.i++
	case c.i < len(s) && s[c.i] >= '1' && s[c.i] <= '9':
		c.digits()
	default:
		return false
	}
	if c.i < len(s) && s[c.i] == '.' {
		c.i++
		if c.digits() == 0 {
			return false
		}
	}
	if c.i < len(s) && (s[c.i] == 'e' || s[c.i] == 'E') {
		c.i++
		if c.i < len(s) && (s[c.i] == '+' || s[c.i] == '-') {
			c.i++
		}
		if c.digits() == 0 {
			return false
		}
	}
	return true
}

func (c *compactor) object(depth int) bool {
	if depth > maxDepth {
		return false
	}
	c.i++
	c.space()
	if c.i < len(c.src) && c.src[c.i] == '}' {
		c.i++
		return true
	}
	for {
		if c.i >= len(c.src) || c.src[c.i] != '"' || !c.str() {
			return false
		}
		c.space()
		if c.i >= len(c.src) || c.src[c.i] != ':' {
			return false
		}
		c.i++
		c.space()
		if !c.value(depth) {
			return false
		}
		c.space()
		if c.i >= len(c.src) {
			return false
		}
		switch c.src[c.i] {
		case ',':
			c.i++
			c.space()
		case '}':
			c.i++
			return true
		default:
			return false
		}
	}
}

func (c *compactor) array(depth int) bool {
	if depth > maxDepth {
		return false
	}
	c.i++
	c.space()
	if c.i < len(c.src) && c.src[c.i] == ']' {
		c.i++
		return true
	}
	for {
		if !c.value(depth) {
			return false
		}
		c.space()
		if c.i >= len(c.src) {
			return false
		}
		switch c.src[c.i] {
		case ',':
			c.i++
			c.space()
		case ']':
			c.i++
			return true
		default:
			return false
		}
	}
}
