package bus

import (
	"bytes"
	"encoding/json"

	"github.com/localbus/localbus/ipc/wire/grammar"
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

// compactor copies src to dst in runs: src[start:i] is pending, and white
// space between tokens ends a run. It walks arrays and objects itself and
// leaves everything else, which holds no white space to drop, to grammar.ScanValue.
type compactor struct {
	src, dst []byte
	i, start int
}

func (c *compactor) flush(end int) {
	c.dst = append(c.dst, c.src[c.start:end]...)
}

// space skips white space, leaving it out of the copy.
func (c *compactor) space() {
	if i := grammar.SkipSpace(c.src, c.i); i != c.i {
		c.flush(c.i)
		c.i, c.start = i, i
	}
}

func (c *compactor) value(depth int) bool {
	if c.i < len(c.src) {
		switch c.src[c.i] {
		case '"': // the commonest token: skip ScanValue's dispatch
			return c.to(grammar.ScanString(c.src, c.i))
		case '{':
			return c.container(depth+1, '}')
		case '[':
			return c.container(depth+1, ']')
		}
	}
	return c.to(grammar.ScanValue(c.src, c.i, depth))
}

// to moves past a token that ends at j, or reports false if j is -1.
func (c *compactor) to(j int) bool {
	if j < 0 {
		return false
	}
	c.i = j
	return true
}

// container reads the object or array at src[i], whose closing bracket
// is end: '}' for an object, whose members have keys, or ']'.
func (c *compactor) container(depth int, end byte) bool {
	if depth > grammar.MaxDepth {
		return false
	}
	c.i++
	c.space()
	if c.i < len(c.src) && c.src[c.i] == end {
		c.i++
		return true
	}
	for {
		if end == '}' {
			if c.i >= len(c.src) || c.src[c.i] != '"' || !c.to(grammar.ScanString(c.src, c.i)) {
				return false
			}
			c.space()
			if c.i >= len(c.src) || c.src[c.i] != ':' {
				return false
			}
			c.i++
			c.space()
		}
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
		case end:
			c.i++
			return true
		default:
			return false
		}
	}
}
