package access

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/localbus/localbus/bus"
)

// Scope is one grant a caller holds. Valid scopes are [Admin], [Read],
// [Publish], "read:{family}" and "publish:{family}", where family matches
// [a-z][a-z0-9_-]{0,31}. Use [ParseScope] to turn input into a Scope.
type Scope string

// The unqualified scopes.
const (
	// Admin includes every other scope.
	Admin Scope = "admin"
	// Read allows every session stream, the session list and every family
	// stream: it includes every "read:{family}".
	Read Scope = "read"
	// Publish allows publishing events of any family to any session: it
	// includes every "publish:{family}".
	Publish Scope = "publish"
)

// ErrInvalidScope is wrapped by every error [ParseScope] and [ParseScopes]
// return.
var ErrInvalidScope = errors.New("access: invalid scope")

// ParseScope parses one scope. It accepts exactly "admin", "read",
// "publish", "read:{family}" and "publish:{family}", lowercase and without
// surrounding space; family matches [a-z][a-z0-9_-]{0,31}. The reserved
// families "stream" and "localbus" may be named with read but not with
// publish. The error wraps [ErrInvalidScope] and quotes the input.
func ParseScope(s string) (Scope, error) {
	switch Scope(s) {
	case Admin, Read, Publish:
		return Scope(s), nil
	}
	kind, fam, ok := strings.Cut(s, ":")
	if !ok || (kind != string(Read) && kind != string(Publish)) {
		return "", fmt.Errorf("%w %q: want admin, read, publish, read:FAMILY or publish:FAMILY", ErrInvalidScope, shorten(s))
	}
	if !validFamily(fam) {
		return "", fmt.Errorf("%w %q: family must match [a-z][a-z0-9_-]{0,31}", ErrInvalidScope, shorten(s))
	}
	if kind == string(Publish) && reservedFamily(fam) {
		return "", fmt.Errorf("%w %q: family %s is reserved to the daemon", ErrInvalidScope, s, fam)
	}
	return Scope(s), nil
}

// Valid reports whether s is a scope [ParseScope] accepts.
func (s Scope) Valid() bool {
	_, err := ParseScope(string(s))
	return err == nil
}

// Family returns the family of a "read:{family}" or "publish:{family}" scope
// and "" for the unqualified ones.
func (s Scope) Family() string {
	_, fam, _ := strings.Cut(string(s), ":")
	return fam
}

// String returns s as written in the keys file and on the command line.
func (s Scope) String() string { return string(s) }

// Scopes is a small immutable set of valid scopes: what one caller may do.
// The zero value is the empty set, which allows nothing. A Scopes value is
// safe for concurrent use; every method returns a new value and never
// changes its receiver.
//
// The set keeps what was granted, not a reduced form: {read, read:build}
// stays two scopes even though read includes read:build. The checks apply
// the implications:
//
//   - admin includes every scope;
//   - read includes every read:{family};
//   - publish includes every publish:{family};
//   - nothing else implies anything (read:x does not include read,
//     publish does not include read, and so on).
type Scopes struct {
	admin, read, publish bool
	// readFams and pubFams are sorted and deduplicated. They are never
	// modified after construction, so values may share them.
	readFams, pubFams []string
}

// NewScopes returns the set of the given scopes. It panics if one is not
// valid: it is meant for constants; use [ParseScopes] for input.
func NewScopes(ss ...Scope) Scopes {
	var b Scopes
	for _, s := range ss {
		if !s.Valid() {
			panic(fmt.Sprintf("access: NewScopes: invalid scope %q", string(s)))
		}
		b = b.with(s)
	}
	return b
}

// ParseScopes parses each string with [ParseScope] and returns their set.
// An empty list gives the empty set; the first invalid scope is an error.
func ParseScopes(ss []string) (Scopes, error) {
	var b Scopes
	for _, s := range ss {
		sc, err := ParseScope(s)
		if err != nil {
			return Scopes{}, err
		}
		b = b.with(sc)
	}
	return b, nil
}

// with returns s plus the valid scope sc.
func (s Scopes) with(sc Scope) Scopes {
	switch sc {
	case Admin:
		s.admin = true
		return s
	case Read:
		s.read = true
		return s
	case Publish:
		s.publish = true
		return s
	}
	kind, fam, _ := strings.Cut(string(sc), ":")
	if kind == string(Read) {
		s.readFams = insertSorted(s.readFams, fam)
	} else {
		s.pubFams = insertSorted(s.pubFams, fam)
	}
	return s
}

// insertSorted returns a new sorted slice holding list and v, or list itself
// when v is already there. It never writes to list's backing array.
func insertSorted(list []string, v string) []string {
	i, found := slices.BinarySearch(list, v)
	if found {
		return list
	}
	out := make([]string, 0, len(list)+1)
	out = append(out, list[:i]...)
	out = append(out, v)
	return append(out, list[i:]...)
}

// CanAdmin reports whether s holds admin: the global bus, session creation
// and deletion, reload and metrics.
func (s Scopes) CanAdmin() bool { return s.admin }

// CanRead reports whether s may read a stream. With family "" it is the
// session-stream check (SPEC §6 scope "read"): true for admin and read only;
// no read:{family} scope satisfies it. With a family it is the family-stream
// check: true for admin, read and read:{family}. A family that is not a
// valid family name is never readable, so a caller that forgot to validate
// fails closed.
func (s Scopes) CanRead(family string) bool {
	if s.admin || s.read {
		return family == "" || validFamily(family)
	}
	return family != "" && contains(s.readFams, family)
}

// CanReadFamily reports whether s may read the family stream of family: true
// for admin, read and read:{family}, and false for the zero Family (so an
// empty path segment never turns into the broader session check). The
// family was parsed where it entered, so nothing is validated again.
func (s Scopes) CanReadFamily(family bus.Family) bool {
	if family.IsZero() {
		return false
	}
	return s.admin || s.read || contains(s.readFams, family.String())
}

// CanPublish reports whether s may publish events of family. With family ""
// it asks for unrestricted publishing: true for admin and publish only. With
// a family it is true for admin, publish and publish:{family}; a family that
// is not a valid name gives false. The router checks every family of a batch
// and refuses the whole batch if one is not allowed.
//
// CanPublish is authorization only: it does not refuse the reserved families
// "stream" and "localbus" (an admin is allowed them here). Publishing one is
// a 400 that the router's validation of the batch answers, before asking
// CanPublish.
func (s Scopes) CanPublish(family string) bool {
	if s.admin || s.publish {
		return family == "" || validFamily(family)
	}
	return family != "" && contains(s.pubFams, family)
}

// Includes reports whether s grants sc, directly or by implication (see
// [Scopes]). An invalid sc is never included.
func (s Scopes) Includes(sc Scope) bool {
	if !sc.Valid() {
		return false
	}
	switch sc {
	case Admin:
		return s.admin
	case Read:
		return s.admin || s.read
	case Publish:
		return s.admin || s.publish
	}
	kind, fam, _ := strings.Cut(string(sc), ":")
	if kind == string(Read) {
		return s.CanRead(fam)
	}
	return s.CanPublish(fam)
}

// Union returns the set holding the scopes of s and other. A peer's scopes
// joined with a bearer key's on the Unix socket are such a union.
func (s Scopes) Union(other Scopes) Scopes {
	u := s
	u.admin = s.admin || other.admin
	u.read = s.read || other.read
	u.publish = s.publish || other.publish
	for _, f := range other.readFams {
		u.readFams = insertSorted(u.readFams, f)
	}
	for _, f := range other.pubFams {
		u.pubFams = insertSorted(u.pubFams, f)
	}
	return u
}

// IsEmpty reports whether s holds no scope.
func (s Scopes) IsEmpty() bool {
	return !s.admin && !s.read && !s.publish && len(s.readFams) == 0 && len(s.pubFams) == 0
}

// Equal reports whether s and other hold the same scopes (as granted, not
// as implied: {admin} and {admin, read} differ).
func (s Scopes) Equal(other Scopes) bool {
	return s.admin == other.admin && s.read == other.read && s.publish == other.publish &&
		slices.Equal(s.readFams, other.readFams) && slices.Equal(s.pubFams, other.pubFams)
}

// List returns the scopes of s in canonical order: admin, read, the
// read:{family} scopes by family, publish, the publish:{family} scopes by
// family. The slice is new; the caller may keep it.
func (s Scopes) List() []Scope {
	out := make([]Scope, 0, 3+len(s.readFams)+len(s.pubFams))
	if s.admin {
		out = append(out, Admin)
	}
	if s.read {
		out = append(out, Read)
	}
	for _, f := range s.readFams {
		out = append(out, Scope("read:"+f))
	}
	if s.publish {
		out = append(out, Publish)
	}
	for _, f := range s.pubFams {
		out = append(out, Scope("publish:"+f))
	}
	return out
}

// String returns the scopes of s in [Scopes.List] order, joined by commas,
// e.g. "read,publish:build"; "" for the empty set.
func (s Scopes) String() string {
	var b strings.Builder
	for i, sc := range s.List() {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(string(sc))
	}
	return b.String()
}

// MarshalJSON encodes s as a JSON array of strings in [Scopes.List] order.
func (s Scopes) MarshalJSON() ([]byte, error) {
	list := s.List()
	strs := make([]string, len(list))
	for i, sc := range list {
		strs[i] = string(sc)
	}
	return json.Marshal(strs)
}

// UnmarshalJSON decodes a JSON array of scope strings, each checked by
// [ParseScope].
func (s *Scopes) UnmarshalJSON(b []byte) error {
	var strs []string
	if err := json.Unmarshal(b, &strs); err != nil {
		return fmt.Errorf("%w: want an array of strings", ErrInvalidScope)
	}
	parsed, err := ParseScopes(strs)
	if err != nil {
		return err
	}
	*s = parsed
	return nil
}

// DefaultPeerScopes returns the scopes of a Unix socket peer that is neither
// root nor the daemon's user when unix_peer_scopes is not configured
// (SPEC §10): read and publish.
func DefaultPeerScopes() Scopes { return NewScopes(Read, Publish) }

func contains(sorted []string, v string) bool {
	_, found := slices.BinarySearch(sorted, v)
	return found
}

// validFamily reports whether f matches [a-z][a-z0-9_-]{0,31}.
func validFamily(f string) bool { _, err := bus.ParseFamily(f); return err == nil }

func reservedFamily(f string) bool { return bus.IsReservedFamily(f) }

// shorten keeps error text bounded when the input is long.
func shorten(s string) string {
	const max = 80
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
