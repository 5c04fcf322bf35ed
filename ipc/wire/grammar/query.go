package grammar

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// MaxCursor is the largest cursor a client may send: 2^53−1, the largest
// integer every JSON implementation represents exactly.
const MaxCursor = 1<<53 - 1

// The range a client may ask for with ?maxQueued=.
const (
	MinMaxQueued = 16
	MaxMaxQueued = 2048
)

// An Error reports a value that does not parse. Field names what was
// wrong ("cursor", "maxQueued", "sinceTime"), so that the router can turn
// it into a 400 whose message a user can act on.
type Error struct {
	Field  string
	Value  string // the offending value, shortened
	Reason string
}

func (e *Error) Error() string { return "grammar: " + e.Message() }

// Message is the error's text without the package prefix, for a client.
func (e *Error) Message() string {
	if e.Value == "" {
		return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("invalid %s %q: %s", e.Field, e.Value, e.Reason)
}

// IsError reports whether err is (or wraps) an *Error.
func IsError(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

func parseError(field, value, reason string) *Error {
	const max = 80
	if len(value) > max {
		value = value[:max] + "…"
	}
	return &Error{Field: field, Value: value, Reason: reason}
}

// ParseCursor parses a resume cursor strictly: one or more ASCII digits
// (leading zeros allowed), at most MaxCursor. Signs, spaces, hex and the empty
// string are errors.
func ParseCursor(s string) (uint64, error) {
	if s == "" {
		return 0, parseError("cursor", s, "empty")
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, parseError("cursor", s, "want decimal digits only")
		}
		n = n*10 + uint64(c-'0')
		if n > MaxCursor {
			return 0, parseError("cursor", s, "larger than 2^53-1")
		}
	}
	return n, nil
}

// ParseMaxQueued parses a client's ?maxQueued=: a plain decimal in
// [MinMaxQueued, MaxMaxQueued].
func ParseMaxQueued(s string) (int, error) {
	n, err := ParseCursor(s)
	if err != nil || n < MinMaxQueued || n > MaxMaxQueued {
		return 0, parseError("maxQueued", s, "want a decimal number from "+strconv.Itoa(MinMaxQueued)+" to "+strconv.Itoa(MaxMaxQueued))
	}
	return int(n), nil
}

// ParseSinceTime parses a resume-by-time point: an RFC 3339 time
// ("2026-12-01T20:00:00Z", fractions allowed) or a positive Go duration
// ("10m", "1h30m") that means that long before now. The result is never
// the zero time, which bus.SubscribeOptions reads as "no sinceTime": a
// time given as Go's zero time ("0001-01-01T00:00:00Z") is read as a
// nanosecond after it, which replays like any other time before the first
// event.
func ParseSinceTime(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		if t.IsZero() {
			t = t.Add(time.Nanosecond)
		}
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, parseError("sinceTime", s, "want an RFC 3339 time (2026-12-01T20:00:00Z) or a positive duration (10m)")
}

// MaxConsumerName is the longest name of a consumer (SPEC §2.4).
const MaxConsumerName = 64

// ParseConsumer parses a consumer's name (?consumer=, or the {name} of a
// consumer route): [A-Za-z0-9][A-Za-z0-9_.-]{0,63}, so that "." and ".."
// never name one.
func ParseConsumer(s string) (string, error) {
	if !ValidConsumer(s) {
		return "", parseError("consumer", s, "want a letter or digit, then up to 63 letters, digits, '_', '.' or '-'")
	}
	return s, nil
}

// ValidConsumer reports whether s is a consumer's name, as ParseConsumer
// accepts it.
func ValidConsumer(s string) bool {
	if s == "" || len(s) > MaxConsumerName || !alnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// AckMode is how a consumer's position moves (SPEC §2.4), fixed when the
// consumer is created.
type AckMode string

// The ack modes.
const (
	// AckAuto: the position follows what the stream wrote (the default
	// of a new consumer).
	AckAuto AckMode = "auto"
	// AckExplicit: the position moves only when the reader acknowledges.
	AckExplicit AckMode = "explicit"
)

// ParseAckMode parses a consumer stream's ?ack=: auto or explicit.
func ParseAckMode(s string) (AckMode, error) {
	switch m := AckMode(s); m {
	case AckAuto, AckExplicit:
		return m, nil
	}
	return "", parseError("ack", s, "want auto or explicit")
}
