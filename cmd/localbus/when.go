package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/localbus/localbus/ipc/wire/grammar"
)

// A point is where --since or --until puts a stream's edge: an event id,
// or a moment. Only parsePoint builds one.
type point struct {
	text string    // as the user wrote it
	id   uint64    // the event id, when isID
	isID bool      // the point is an event id, else a moment
	t    time.Time // the moment, when !isID
}

// timeForms names the forms --since and --until take, for errors and hints.
const timeForms = "an event id (42), a duration (10m: ten minutes ago), an RFC 3339 time (2026-12-01T20:00:00Z) or Unix seconds (@1764643500)"

// parsePoint parses the value of --since or --until: digits are an event
// id; "@" and digits (a fraction allowed) are Unix seconds; otherwise a
// positive Go duration back from now or an RFC 3339 time.
func parsePoint(s string, now time.Time) (point, error) {
	p := point{text: s}
	switch {
	case s == "":
		return point{}, errors.New("empty; want " + timeForms)
	case s[0] >= '0' && s[0] <= '9' && strings.Trim(s, "0123456789") == "":
		id, err := grammar.ParseCursor(s)
		if err != nil {
			return point{}, fmt.Errorf("%q is too large for an event id; want %s", s, timeForms)
		}
		p.id, p.isID = id, true
		return p, nil
	case s[0] == '@':
		t, ok := parseUnix(s[1:])
		if !ok {
			return point{}, fmt.Errorf("%q: want @ and Unix seconds (@1764643500, @1764643500.25)", s)
		}
		p.t = t
		return p, nil
	}
	t, err := grammar.ParseSinceTime(s, now)
	if err != nil {
		return point{}, fmt.Errorf("%q: want %s", s, timeForms)
	}
	p.t = t
	return p, nil
}

// parseUnix parses decimal Unix seconds with an optional fraction of at
// most nine digits, from 0 to the year 9999.
func parseUnix(s string) (time.Time, bool) {
	whole, frac, hasFrac := strings.Cut(s, ".")
	if whole == "" || strings.Trim(whole, "0123456789") != "" || len(whole) > 12 {
		return time.Time{}, false
	}
	if hasFrac && (frac == "" || len(frac) > 9 || strings.Trim(frac, "0123456789") != "") {
		return time.Time{}, false
	}
	sec, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || sec > 253402300799 { // 9999-12-31T23:59:59Z
		return time.Time{}, false
	}
	var nsec int64
	if hasFrac {
		nsec, _ = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
	}
	return time.Unix(sec, nsec), true
}

// after reports whether the event with id and RFC 3339 timestamp ts lies
// after p, which --until includes: an id above p's, or a time later than
// p's. An event whose timestamp does not parse is not after a moment.
func (p point) after(id uint64, ts string) bool {
	if p.isID {
		return id > p.id
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	return err == nil && t.After(p.t)
}

// idHint is the refusal of an id above the bus's lastID: most likely a
// time meant as Unix seconds.
func (p point) idHint(flag string, lastID uint64, bus string) error {
	return fmt.Errorf("%s %s is an event id, and %s's last event id is %d; for a time, give @%s (Unix seconds), a duration (10m) or an RFC 3339 time (2026-12-01T20:00:00Z)",
		flag, p.text, bus, lastID, p.text)
}
