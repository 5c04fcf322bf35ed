package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/localbus/localbus/ipc/wire"
)

// The sessions list is the one large answer a client asks for again and
// again: localbus top reads every session each second, about 250 bytes
// each, 2.5 MB at 10,000 sessions. encoding/json scans such a body twice
// and fills each field through reflection; this reader walks it once and
// stores the fields directly, in a fifth of the time. It reads what
// encoding/json reads, as it reads it (members in any order, white space,
// member names matched exactly or else under Unicode case folding,
// members it does not know skipped, a repeated member read into what the
// first left), and refuses what it refuses; strings with escapes or bytes
// outside ASCII, rare in ids and epochs, are handed to encoding/json
// itself. FuzzSessionList holds it to that.

// sessionListBody is a sessions list read by readSessionList.
type sessionListBody struct{ wire.SessionList }

func (l *sessionListBody) readBody(b []byte) (err error) {
	l.SessionList, err = readSessionList(b)
	return err
}

// readSessionList decodes the body of GET /api/v1/sessions.
func readSessionList(b []byte) (wire.SessionList, error) {
	r := jsonReader{b: b}
	var l wire.SessionList
	err := r.object(listNames, func(name string) error {
		switch name {
		case "sessions":
			return r.sessions(&l.Sessions)
		case "next":
			return r.stringInto(&l.Next)
		}
		return r.skip(0)
	})
	if err == nil {
		r.space()
		if r.i != len(r.b) {
			err = r.errorf("data after the answer")
		}
	}
	if err != nil {
		return wire.SessionList{}, err
	}
	return l, nil
}

// jsonReader reads JSON values from b at i.
type jsonReader struct {
	b []byte
	i int
}

// maxDepth bounds the nesting of skipped values, as encoding/json does.
const maxDepth = 10000

var errSyntax = errors.New("not JSON of a sessions list")

func (r *jsonReader) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s at offset %d", errSyntax, fmt.Sprintf(format, args...), r.i)
}

// space skips white space.
func (r *jsonReader) space() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// next skips white space and returns the next byte, 0 at the end.
func (r *jsonReader) next() byte {
	r.space()
	if r.i == len(r.b) {
		return 0
	}
	return r.b[r.i]
}

// null reads a null if one is next, and reports whether it did.
func (r *jsonReader) null() bool {
	if r.next() == 'n' && len(r.b)-r.i >= 4 && string(r.b[r.i:r.i+4]) == "null" {
		r.i += 4
		return true
	}
	return false
}

// The member names of a list, a session, its ring and its durability.
var (
	listNames       = []string{"sessions", "next"}
	sessionNames    = []string{"id", "epoch", "lastId", "earliestId", "subscribers", "consumers", "ring", "publishRate", "deliverRate", "durability"}
	ringNames       = []string{"count", "bytes", "maxCount", "maxBytes"}
	durabilityNames = []string{"bytesOnDisk", "lastSyncedId"}
)

// object reads an object (or null, which calls nothing), calling member
// for each member with the one of names its key is, or "" for another;
// member reads the value.
func (r *jsonReader) object(names []string, member func(name string) error) error {
	if r.null() {
		return nil
	}
	if r.next() != '{' {
		return r.errorf("want an object")
	}
	r.i++
	if r.next() == '}' {
		r.i++
		return nil
	}
	for {
		raw, plain, err := r.stringToken()
		if err != nil {
			return err
		}
		if r.next() != ':' {
			return r.errorf("want ':'")
		}
		r.i++
		if err := member(memberName(raw, plain, names)); err != nil {
			return err
		}
		switch r.next() {
		case ',':
			r.i++
		case '}':
			r.i++
			return nil
		default:
			return r.errorf("want ',' or '}'")
		}
	}
}

// memberName returns the one of names that the key raw (a string token)
// names, as encoding/json matches them: exactly, else under Unicode case
// folding; "" for none.
func memberName(raw []byte, plain bool, names []string) string {
	key := raw[1 : len(raw)-1]
	if !plain {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return ""
		}
		key = []byte(s)
	}
	for _, n := range names {
		if string(key) == n {
			return n
		}
	}
	for _, n := range names {
		if bytes.EqualFold(key, []byte(n)) {
			return n
		}
	}
	return ""
}

// array reads an array (or null, which calls nothing), calling elem for
// each element; elem reads it.
func (r *jsonReader) array(elem func() error) error {
	if r.null() {
		return nil
	}
	if r.next() != '[' {
		return r.errorf("want an array")
	}
	r.i++
	if r.next() == ']' {
		r.i++
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		switch r.next() {
		case ',':
			r.i++
		case ']':
			r.i++
			return nil
		default:
			return r.errorf("want ',' or ']'")
		}
	}
}

// stringToken reads a string and returns it with its quotes; plain
// reports that it has no escape and only ASCII. A string that is not
// plain is checked by encoding/json.
func (r *jsonReader) stringToken() (raw []byte, plain bool, err error) {
	if r.next() != '"' {
		return nil, false, r.errorf("want a string")
	}
	start := r.i
	plain = true
	for r.i++; r.i < len(r.b) && r.b[r.i] != '"'; r.i++ {
		switch c := r.b[r.i]; {
		case c == '\\':
			plain = false
			r.i++ // the escaped byte: a quote that does not end the string
		case c < 0x20:
			return nil, false, r.errorf("control character in a string")
		case c >= 0x80:
			plain = false
		}
	}
	if r.i >= len(r.b) {
		return nil, false, r.errorf("unterminated string")
	}
	r.i++
	raw = r.b[start:r.i]
	if !plain && !json.Valid(raw) {
		return nil, false, r.errorf("malformed string")
	}
	return raw, plain, nil
}

// stringInto reads a string (or null, which leaves s) into s.
func (r *jsonReader) stringInto(s *string) error {
	if r.null() {
		return nil
	}
	raw, plain, err := r.stringToken()
	if err != nil {
		return err
	}
	if plain {
		*s = string(raw[1 : len(raw)-1])
		return nil
	}
	return json.Unmarshal(raw, s)
}

// number reads a number and returns its text.
func (r *jsonReader) number() ([]byte, error) {
	r.space()
	start := r.i
	digits := func() int {
		n := 0
		for r.i < len(r.b) && r.b[r.i] >= '0' && r.b[r.i] <= '9' {
			r.i++
			n++
		}
		return n
	}
	if r.i < len(r.b) && r.b[r.i] == '-' {
		r.i++
	}
	switch n := digits(); {
	case n == 0:
		return nil, r.errorf("want a number")
	case n > 1 && r.b[r.i-n] == '0':
		return nil, r.errorf("a number with a leading zero")
	}
	if r.i < len(r.b) && r.b[r.i] == '.' {
		r.i++
		if digits() == 0 {
			return nil, r.errorf("want digits after '.'")
		}
	}
	if r.i < len(r.b) && (r.b[r.i] == 'e' || r.b[r.i] == 'E') {
		r.i++
		if r.i < len(r.b) && (r.b[r.i] == '+' || r.b[r.i] == '-') {
			r.i++
		}
		if digits() == 0 {
			return nil, r.errorf("want digits in an exponent")
		}
	}
	return r.b[start:r.i], nil
}

// uintInto reads an unsigned integer (or null, which leaves n) into n.
func (r *jsonReader) uintInto(n *uint64) error {
	if r.null() {
		return nil
	}
	text, err := r.number()
	if err != nil {
		return err
	}
	v, err := strconv.ParseUint(string(text), 10, 64)
	if err != nil {
		return r.errorf("want an unsigned integer, got %s", text)
	}
	*n = v
	return nil
}

// intInto reads an integer (or null, which leaves n) into n.
func (r *jsonReader) intInto(n *int64) error {
	if r.null() {
		return nil
	}
	text, err := r.number()
	if err != nil {
		return err
	}
	v, err := strconv.ParseInt(string(text), 10, 64)
	if err != nil {
		return r.errorf("want an integer, got %s", text)
	}
	*n = v
	return nil
}

// smallIntInto is intInto for an int.
func (r *jsonReader) smallIntInto(n *int) error {
	v := int64(*n)
	err := r.intInto(&v)
	*n = int(v)
	return err
}

// floatInto reads a number (or null, which leaves f) into f.
func (r *jsonReader) floatInto(f *float64) error {
	if r.null() {
		return nil
	}
	text, err := r.number()
	if err != nil {
		return err
	}
	v, err := strconv.ParseFloat(string(text), 64)
	if err != nil {
		return r.errorf("want a number, got %s", text)
	}
	*f = v
	return nil
}

// skip reads any value, depth levels deep already, and drops it.
func (r *jsonReader) skip(depth int) error {
	if depth >= maxDepth {
		return r.errorf("nested too deep")
	}
	switch c := r.next(); c {
	case '{':
		return r.object(nil, func(string) error { return r.skip(depth + 1) })
	case '[':
		return r.array(func() error { return r.skip(depth + 1) })
	case '"':
		_, _, err := r.stringToken()
		return err
	case 't', 'f', 'n':
		for _, lit := range []string{"true", "false", "null"} {
			if len(r.b)-r.i >= len(lit) && string(r.b[r.i:r.i+len(lit)]) == lit {
				r.i += len(lit)
				return nil
			}
		}
		return r.errorf("want a value")
	}
	_, err := r.number()
	return err
}

// sessions reads the list's sessions into ss. Like encoding/json, it
// reads them into the elements ss has room for, from a repeated member.
func (r *jsonReader) sessions(ss *[]wire.SessionInfo) error {
	if r.null() {
		*ss = nil
		return nil
	}
	if *ss == nil {
		// About 250 bytes a session: one allocation for most pages.
		*ss = make([]wire.SessionInfo, 0, (len(r.b)-r.i)/200+1)
	}
	l := (*ss)[:0]
	err := r.array(func() error {
		if len(l) < cap(l) {
			l = l[:len(l)+1]
		} else {
			l = append(l, wire.SessionInfo{})
		}
		return r.session(&l[len(l)-1])
	})
	*ss = l
	return err
}

// session reads one session into s.
func (r *jsonReader) session(s *wire.SessionInfo) error {
	return r.object(sessionNames, func(name string) error {
		switch name {
		case "id":
			return r.stringInto(&s.ID)
		case "epoch":
			return r.stringInto(&s.Epoch)
		case "lastId":
			return r.uintInto(&s.LastID)
		case "earliestId":
			if r.null() {
				s.EarliestID = nil
				return nil
			}
			var n uint64
			if err := r.uintInto(&n); err != nil {
				return err
			}
			s.EarliestID = &n
			return nil
		case "subscribers":
			return r.smallIntInto(&s.Subscribers)
		case "consumers":
			return r.smallIntInto(&s.Consumers)
		case "ring":
			return r.object(ringNames, func(name string) error {
				switch name {
				case "count":
					return r.smallIntInto(&s.Ring.Count)
				case "bytes":
					return r.intInto(&s.Ring.Bytes)
				case "maxCount":
					return r.smallIntInto(&s.Ring.MaxCount)
				case "maxBytes":
					return r.intInto(&s.Ring.MaxBytes)
				}
				return r.skip(2)
			})
		case "publishRate":
			return r.floatInto(&s.PublishRate)
		case "deliverRate":
			return r.floatInto(&s.DeliverRate)
		case "durability":
			if r.null() {
				s.Durability = nil
				return nil
			}
			if s.Durability == nil {
				s.Durability = &wire.DurabilityInfo{}
			}
			d := s.Durability
			return r.object(durabilityNames, func(name string) error {
				switch name {
				case "bytesOnDisk":
					return r.intInto(&d.BytesOnDisk)
				case "lastSyncedId":
					return r.uintInto(&d.LastSyncedID)
				}
				return r.skip(2)
			})
		}
		return r.skip(1)
	})
}
