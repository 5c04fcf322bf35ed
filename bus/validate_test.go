package bus_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/localbus/localbus/bus"
)

func TestParseType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		ok      bool // family:name, reserved or not
		publish bool // ParseType accepts it: ok, and not reserved
	}{
		{"simple", "build:step", true, true},
		{"family one letter", "a:b", true, true},
		{"family 32 chars", strings.Repeat("a", 32) + ":x", true, true},
		{"family 33 chars", strings.Repeat("a", 33) + ":x", false, false},
		{"family digits dash underscore", "a0_-9:x", true, true},
		{"family starts with digit", "0a:x", false, false},
		{"family starts with dash", "-a:x", false, false},
		{"family upper case", "Build:x", false, false},
		{"family empty", ":x", false, false},
		{"family dot", "a.b:x", false, false},
		{"name 64 chars", "a:" + strings.Repeat("N", 64), true, true},
		{"name 65 chars", "a:" + strings.Repeat("N", 65), false, false},
		{"name all allowed", "a:AZaz09_.-", true, true},
		{"name empty", "a:", false, false},
		{"name colon", "a:b:c", false, false},
		{"name star", "a:*", false, false},
		{"name space", "a:b c", false, false},
		{"name slash", "a:b/c", false, false},
		{"name quote", `a:b"c`, false, false},
		{"name non-ascii", "a:é", false, false},
		{"no colon", "build", false, false},
		{"empty", "", false, false},
		{"leading space", " a:b", false, false},
		{"trailing newline", "a:b\n", false, false},
		{"nul", "a:b\x00", false, false},
		{"reserved stream", "stream:ready", true, false},
		{"reserved localbus", "localbus:reloaded", true, false},
		{"prefix of reserved is fine", "streams:x", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			typ, err := bus.ParseType(tt.in)
			if (err == nil) != tt.publish {
				t.Fatalf("ParseType(%q) = %v, want ok %v", tt.in, err, tt.publish)
			}
			if err != nil {
				if !isInputError(err, "type") {
					t.Errorf("ParseType(%q) = %#v, want *InputError{Field: type}", tt.in, err)
				}
				if reserved := strings.Contains(err.Error(), "reserved"); reserved != tt.ok {
					t.Errorf("ParseType(%q) = %v; saying reserved %v, want %v (the syntax is fine)", tt.in, err, reserved, tt.ok)
				}
				if !typ.IsZero() {
					t.Errorf("ParseType(%q) = %q with its error, want the zero Type", tt.in, typ)
				}
				return
			}
			if typ.String() != tt.in || typ.IsZero() || typ.Family().String() != bus.FamilyOf(tt.in) {
				t.Errorf("ParseType(%q) = %q (zero %v, family %q), want it back", tt.in, typ, typ.IsZero(), typ.Family())
			}
		})
	}
}

// TestTheDaemonsTypesAreReserved: the daemon's own types are the only
// Types of a reserved family, and only a Batch with Daemon takes them.
func TestTheDaemonsTypesAreReserved(t *testing.T) {
	t.Parallel()
	for _, typ := range []bus.Type{bus.TypeSessionOpened, bus.TypeSessionClosed, bus.TypeReloaded} {
		if typ.Family().String() != bus.FamilyLocalbus || !typ.Family().Reserved() {
			t.Errorf("%q: family %q, want localbus, reserved", typ, typ.Family())
		}
		if _, err := bus.ParseType(typ.String()); err == nil || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("ParseType(%q) = %v, want an error saying reserved", typ, err)
		}
		if err := bus.ValidateEvent(&bus.Event{Type: typ}); !isInputError(err, "type") {
			t.Errorf("ValidateEvent(%q) = %v, want *InputError{Field: type}", typ, err)
		}
	}
}

func TestParseFamily(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in string
		ok bool
	}{
		{"a", true},
		{"build", true},
		{"a-b_c9", true},
		{strings.Repeat("z", 32), true},
		{strings.Repeat("z", 33), false},
		{"", false},
		{"9a", false},
		{"A", false},
		{"a:b", false},
		{"a*", false},
	}
	for _, tt := range tests {
		f, err := bus.ParseFamily(tt.in)
		if (err == nil) != tt.ok {
			t.Errorf("ParseFamily(%q) = %v, want ok %v", tt.in, err, tt.ok)
		}
		if err != nil && !isInputError(err, "family") {
			t.Errorf("ParseFamily(%q) = %#v, want *InputError{Field: family}", tt.in, err)
		}
		if want := map[bool]string{true: tt.in}[tt.ok]; f.String() != want || f.IsZero() != !tt.ok {
			t.Errorf("ParseFamily(%q) = %q (zero %v), want %q", tt.in, f, f.IsZero(), want)
		}
	}
}

func TestFamilyOfAndReserved(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, family string
		reserved   bool
	}{
		{"build:step", "build", false},
		{"a:b:c", "a", false},
		{"stream:ready", "stream", true},
		{"localbus:x", "localbus", true},
		{"nocolon", "", false},
		{"", "", false},
		{":x", "", false},
	}
	for _, tt := range tests {
		if got := bus.FamilyOf(tt.in); got != tt.family {
			t.Errorf("FamilyOf(%q) = %q, want %q", tt.in, got, tt.family)
		}
		if got := bus.IsReservedFamily(bus.FamilyOf(tt.in)); got != tt.reserved {
			t.Errorf("IsReservedFamily(%q) = %v, want %v", bus.FamilyOf(tt.in), got, tt.reserved)
		}
	}
}

func TestParseSessionID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"simple", "b-17", true},
		{"one char", "a", true},
		{"digit first", "7", true},
		{"all allowed", "aZ09._-", true},
		{"128 chars", strings.Repeat("x", 128), true},
		{"129 chars", strings.Repeat("x", 129), false},
		{"empty", "", false},
		{"dot", ".", false},
		{"dot dot", "..", false},
		{"dot first", ".hidden", false},
		{"dash first", "-x", false},
		{"underscore first", "_x", false},
		{"slash", "a/b", false},
		{"backslash", `a\b`, false},
		{"space", "a b", false},
		{"quote", `a"b`, false},
		{"percent", "a%2fb", false},
		{"colon", "a:b", false},
		{"nul", "a\x00", false},
		{"non-ascii", "sé", false},
		{"newline", "a\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id, err := bus.ParseSessionID(tt.in)
			if (err == nil) != tt.ok {
				t.Errorf("ParseSessionID(%q) = %v, want ok %v", tt.in, err, tt.ok)
			}
			if err != nil && !isInputError(err, "session") {
				t.Errorf("ParseSessionID(%q) = %#v, want *InputError{Field: session}", tt.in, err)
			}
			want := ""
			if tt.ok {
				want = tt.in
			}
			if id.String() != want || id.IsZero() == tt.ok {
				t.Errorf("ParseSessionID(%q) = %q (zero %v), want %q", tt.in, id, id.IsZero(), want)
			}
		})
	}
}

func TestInputErrorMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"type", parseTypeErr("nope"), `bus: invalid type "nope": want family:name`},
		{"no value", parseTypeErr(""), `bus: invalid type: want family:name`},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("%s: Error() = %q, want %q", tt.name, got, tt.want)
		}
		if !bus.IsInputError(tt.err) {
			t.Errorf("%s: IsInputError(%v) = false", tt.name, tt.err)
		}
	}
	if bus.IsInputError(errors.New("other")) || bus.IsInputError(nil) || bus.IsInputError(bus.ErrClosed) {
		t.Error("IsInputError is true for an error that is not an *InputError")
	}
	wrapped := errors.Join(errors.New("ctx"), parseTypeErr(""))
	if !bus.IsInputError(wrapped) {
		t.Error("IsInputError(wrapped) = false, want true")
	}
}

func TestInputErrorShortensLongValues(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 10_000)
	err := parseTypeErr(long)
	if err == nil {
		t.Fatal("ParseType(10000 x) = nil")
	}
	if n := len(err.Error()); n > 200 {
		t.Errorf("len(Error()) = %d, want a short message", n)
	}
	var ie *bus.InputError
	if !errors.As(err, &ie) || !strings.HasPrefix(long, strings.TrimSuffix(ie.Value, "…")) {
		t.Errorf("Value = %q, want a prefix of the input", ie.Value)
	}
}

// parseTypeErr is ParseType's error for s.
func parseTypeErr(s string) error {
	_, err := bus.ParseType(s)
	return err
}
