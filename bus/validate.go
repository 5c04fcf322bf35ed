package bus

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// The families only the daemon emits. Publishing an event of either is refused.
const (
	FamilyStream   = "stream"
	FamilyLocalbus = "localbus"
)

// InputError reports bad input: an invalid event type, session id, cursor,
// filter or limit. Field names what was wrong, so the router can turn it into
// a 400 whose message a user can act on.
type InputError struct {
	Field  string // "type", "session", "cursor", "types", "maxQueued", "data", ...
	Value  string // the offending value, shortened
	Reason string
}

func (e *InputError) Error() string { return "bus: " + e.Message() }

// Message is the error's text without the package prefix, for a client.
func (e *InputError) Message() string {
	if e.Value == "" {
		return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("invalid %s %q: %s", e.Field, e.Value, e.Reason)
}

func inputError(field, value, reason string) *InputError {
	const max = 80
	if len(value) > max {
		value = value[:max] + "…"
	}
	return &InputError{Field: field, Value: value, Reason: reason}
}

// IsInputError reports whether err is (or wraps) an *InputError.
func IsInputError(err error) bool {
	var ie *InputError
	return errors.As(err, &ie)
}

// A Family is a valid family name, [a-z][a-z0-9_-]{0,31}: only
// ParseFamily builds one, so code that takes a Family checks nothing
// again. The zero Family is no family.
type Family struct{ name string }

// ParseFamily parses a family name; a bad one is an *InputError of the
// field "family".
func ParseFamily(s string) (Family, error) {
	if !validFamily(s) {
		return Family{}, inputError("family", s, "want [a-z][a-z0-9_-]{0,31}")
	}
	return Family{s}, nil
}

// String returns the family's name, "" for the zero Family.
func (f Family) String() string { return f.name }

// IsZero reports whether f is the zero Family, no family.
func (f Family) IsZero() bool { return f.name == "" }

// Reserved reports whether only the daemon emits events of f.
func (f Family) Reserved() bool { return IsReservedFamily(f.name) }

func validFamily(f string) bool {
	if len(f) < 1 || len(f) > 32 || f[0] < 'a' || f[0] > 'z' {
		return false
	}
	for i := 1; i < len(f); i++ {
		c := f[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func validName(n string) bool {
	if len(n) < 1 || len(n) > 64 {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// splitType splits "family:name" at its first colon.
func splitType(t string) (family, name string, ok bool) {
	for i := 0; i < len(t); i++ {
		if t[i] == ':' {
			return t[:i], t[i+1:], true
		}
	}
	return "", "", false
}

// FamilyOf returns the family of an event type ("build" for "build:step"),
// or "" when t has no colon.
func FamilyOf(t string) string {
	f, _, _ := splitType(t)
	return f
}

// IsReservedFamily reports whether only the daemon may emit events of family f.
func IsReservedFamily(f string) bool {
	return f == FamilyStream || f == FamilyLocalbus
}

// validateType checks the syntax of an event type, family:name, where
// family matches [a-z][a-z0-9_-]{0,31} and name [A-Za-z0-9_.-]{1,64}. It
// does not refuse reserved families.
func validateType(t string) error {
	f, n, ok := splitType(t)
	if !ok {
		return inputError("type", t, "want family:name")
	}
	if !validFamily(f) {
		return inputError("type", t, "family must match [a-z][a-z0-9_-]{0,31}")
	}
	if !validName(n) {
		return inputError("type", t, "name must match [A-Za-z0-9_.-]{1,64}")
	}
	return nil
}

// A Type is the type of an event a client may publish: family:name, where
// family matches [a-z][a-z0-9_-]{0,31} and is not reserved, and name
// matches [A-Za-z0-9_.-]{1,64}. Only ParseType builds one (the daemon's own
// types, of the reserved family localbus, are the Type variables below), so
// code that takes a Type checks nothing again. The zero Type is no type.
type Type struct{ name string }

// The daemon's own event types (SPEC §4), of the reserved family localbus:
// a publish takes them only in a Batch with Daemon set.
var (
	TypeSessionOpened = Type{"localbus:session-opened"}
	TypeSessionClosed = Type{"localbus:session-closed"}
	TypeReloaded      = Type{"localbus:reloaded"}
)

// ParseType parses the type of an event to publish; a bad one, or one of a
// reserved family, is an *InputError of the field "type".
func ParseType(s string) (Type, error) {
	if err := validateType(s); err != nil {
		return Type{}, err
	}
	if f := FamilyOf(s); IsReservedFamily(f) {
		return Type{}, inputError("type", s, "family "+f+" is reserved for the daemon")
	}
	return Type{s}, nil
}

// String returns the type, "" for the zero Type.
func (t Type) String() string { return t.name }

// IsZero reports whether t is the zero Type, no type.
func (t Type) IsZero() bool { return t.name == "" }

// Family returns the type's family; the zero Family for the zero Type.
func (t Type) Family() Family { return Family{FamilyOf(t.name)} }

// A SessionID is a valid session id, [A-Za-z0-9][A-Za-z0-9._-]{0,127}:
// safe as a path component (never "." or "..", no slash) and written into
// an envelope unescaped. Only ParseSessionID builds one, so code that
// takes a SessionID checks nothing again. The zero SessionID is no
// session.
type SessionID struct{ id string }

// ParseSessionID parses a session id; a bad one is an *InputError of the
// field "session".
func ParseSessionID(s string) (SessionID, error) {
	if !validSessionID(s) {
		return SessionID{}, inputError("session", s, "want 1 to 128 characters of [A-Za-z0-9._-], starting with a letter or digit")
	}
	return SessionID{s}, nil
}

// String returns the id, "" for the zero SessionID.
func (id SessionID) String() string { return id.id }

// IsZero reports whether id is the zero SessionID, no session.
func (id SessionID) IsZero() bool { return id.id == "" }

func validSessionID(id string) bool {
	if len(id) < 1 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || !(c == '.' || c == '_' || c == '-')) {
			return false
		}
	}
	return true
}

// ValidateEvent checks what Publish would check of ev, without encoding
// it: a type (not one of the daemon's) and JSON data; its Type and Session
// were parsed where they came in. It lets a caller refuse a batch before it acts on
// it (say, before creating a session for it).
func ValidateEvent(ev *Event) error {
	if err := checkDaemonType(ev.Type, false /* as Publish: not the daemon */); err != nil {
		return err
	}
	if !utf8.Valid(ev.Data) {
		// As prepare: json.Valid accepts invalid UTF-8 that Publish refuses.
		return inputError("data", "", "not valid UTF-8")
	}
	if len(bytes.TrimSpace(ev.Data)) > 0 && !json.Valid(ev.Data) {
		return inputError("data", "", "not valid JSON")
	}
	return nil
}

// checkDaemonType refuses the zero Type, in the words ParseType("") would
// use, and, unless daemon, the daemon's own types (the only Types of a
// reserved family), in the words ParseType would use for them.
func checkDaemonType(t Type, daemon bool) error {
	if t.name == "" {
		return inputError("type", "", "want family:name")
	}
	if !daemon && FamilyOf(t.name) == FamilyLocalbus {
		return inputError("type", t.name, "family "+FamilyLocalbus+" is reserved for the daemon")
	}
	return nil
}
