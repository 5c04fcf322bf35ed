package access

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/localbus/localbus/bus"
)

func TestParseScope(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in string
		ok bool
	}{
		{"admin", true},
		{"read", true},
		{"publish", true},
		{"read:build", true},
		{"publish:build", true},
		{"read:a", true},
		{"read:a0_-", true},
		{"read:" + strings.Repeat("a", 32), true},
		{"read:localbus", true},
		{"read:stream", true},
		{"publish:localbus", false},
		{"publish:stream", false},
		{"read:" + strings.Repeat("a", 33), false},
		{"", false},
		{"Admin", false},
		{"READ", false},
		{" read", false},
		{"read ", false},
		{"read:", false},
		{"read:Build", false},
		{"read:0build", false},
		{"read:-x", false},
		{"read:a.b", false},
		{"read:a:b", false},
		{"read:*", false},
		{"admin:build", false},
		{"write", false},
		{"write:build", false},
		{"publish:", false},
		{":build", false},
	}
	for _, tt := range tests {
		got, err := ParseScope(tt.in)
		if tt.ok {
			if err != nil || string(got) != tt.in {
				t.Errorf("ParseScope(%q) = %q, %v; want %q, nil", tt.in, got, err, tt.in)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidScope) {
			t.Errorf("ParseScope(%q) = %q, %v; want error wrapping ErrInvalidScope", tt.in, got, err)
		}
		if got != "" {
			t.Errorf("ParseScope(%q) returned scope %q with an error", tt.in, got)
		}
	}
}

func TestScopeFamily(t *testing.T) {
	t.Parallel()
	for in, want := range map[Scope]string{Admin: "", Read: "", Publish: "", "read:ci": "ci", "publish:x-1": "x-1"} {
		if got := in.Family(); got != want {
			t.Errorf("Scope(%q).Family() = %q, want %q", in, got, want)
		}
	}
}

func TestScopesChecks(t *testing.T) {
	t.Parallel()
	type checks struct {
		admin                             bool
		readAny, readBuild, readCI        bool
		famBuild, famEmpty                bool
		pubAny, pubBuild, pubCI, pubLocal bool
	}
	tests := []struct {
		name   string
		scopes Scopes
		want   checks
	}{
		{"empty", Scopes{}, checks{}},
		{"admin", NewScopes(Admin), checks{
			admin: true, readAny: true, readBuild: true, readCI: true, famBuild: true,
			pubAny: true, pubBuild: true, pubCI: true, pubLocal: true}},
		{"read", NewScopes(Read), checks{readAny: true, readBuild: true, readCI: true, famBuild: true}},
		{"read:build", NewScopes("read:build"), checks{readBuild: true, famBuild: true}},
		{"publish", NewScopes(Publish), checks{pubAny: true, pubBuild: true, pubCI: true, pubLocal: true}},
		{"publish:build", NewScopes("publish:build"), checks{pubBuild: true}},
		{"read:ci,publish:build", NewScopes("read:ci", "publish:build"), checks{readCI: true, pubBuild: true}},
		{"read,publish", DefaultPeerScopes(), checks{
			readAny: true, readBuild: true, readCI: true, famBuild: true,
			pubAny: true, pubBuild: true, pubCI: true, pubLocal: true}},
	}
	for _, tt := range tests {
		s := tt.scopes
		got := checks{
			admin:     s.CanAdmin(),
			readAny:   s.CanRead(""),
			readBuild: s.CanRead("build"),
			readCI:    s.CanRead("ci"),
			famBuild:  s.CanReadFamily(mustFamily(t, "build")),
			famEmpty:  s.CanReadFamily(bus.Family{}),
			pubAny:    s.CanPublish(""),
			pubBuild:  s.CanPublish("build"),
			pubCI:     s.CanPublish("ci"),
			pubLocal:  s.CanPublish("localbus"),
		}
		if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(checks{})); diff != "" {
			t.Errorf("%s: checks mismatch (-want +got):\n%s", tt.name, diff)
		}
	}
}

func mustFamily(t *testing.T, s string) bus.Family {
	t.Helper()
	f, err := bus.ParseFamily(s)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestScopesInvalidFamilyFailsClosed(t *testing.T) {
	t.Parallel()
	s := NewScopes(Admin, Read, Publish)
	for _, fam := range []string{"Build", "0x", "a b", "a:b", strings.Repeat("a", 33), "*"} {
		if s.CanRead(fam) || s.CanPublish(fam) {
			t.Errorf("scopes %v allow invalid family %q", s, fam)
		}
		if _, err := bus.ParseFamily(fam); err == nil {
			t.Errorf("ParseFamily(%q) accepted it, so CanReadFamily could be asked", fam)
		}
	}
}

func TestScopesIncludes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		have Scopes
		sc   Scope
		want bool
	}{
		{NewScopes(Admin), Admin, true},
		{NewScopes(Admin), Read, true},
		{NewScopes(Admin), "read:x", true},
		{NewScopes(Admin), Publish, true},
		{NewScopes(Admin), "publish:x", true},
		{NewScopes(Read), Admin, false},
		{NewScopes(Read), Read, true},
		{NewScopes(Read), "read:x", true},
		{NewScopes(Read), Publish, false},
		{NewScopes(Read), "publish:x", false},
		{NewScopes("read:x"), "read:x", true},
		{NewScopes("read:x"), "read:y", false},
		{NewScopes("read:x"), Read, false},
		{NewScopes(Publish), "publish:x", true},
		{NewScopes(Publish), Read, false},
		{NewScopes("publish:x"), Publish, false},
		{NewScopes("publish:x"), "publish:x", true},
		{NewScopes("publish:x"), "read:x", false},
		{NewScopes(Admin), "bogus", false},
		{NewScopes(Admin), "publish:stream", false},
		{Scopes{}, Read, false},
	}
	for _, tt := range tests {
		if got := tt.have.Includes(tt.sc); got != tt.want {
			t.Errorf("Scopes{%v}.Includes(%q) = %v, want %v", tt.have, tt.sc, got, tt.want)
		}
	}
}

func TestScopesStringIsCanonical(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{"read"}, "read"},
		{[]string{"publish:b", "read:z", "publish", "read:a", "admin", "read", "publish:a"},
			"admin,read,read:a,read:z,publish,publish:a,publish:b"},
		{[]string{"read:x", "read:x", "read"}, "read,read:x"},
	}
	for _, tt := range tests {
		s, err := ParseScopes(tt.in)
		if err != nil {
			t.Fatalf("ParseScopes(%q) error: %v", tt.in, err)
		}
		if got := s.String(); got != tt.want {
			t.Errorf("ParseScopes(%q).String() = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestParseScopesRejectsInvalid(t *testing.T) {
	t.Parallel()
	s, err := ParseScopes([]string{"read", "nope"})
	if !errors.Is(err, ErrInvalidScope) || !s.IsEmpty() {
		t.Errorf("ParseScopes with an invalid scope = %v, %v; want empty, ErrInvalidScope", s, err)
	}
}

func TestNewScopesPanicsOnInvalid(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Error("NewScopes(\"nope\") did not panic")
		}
	}()
	NewScopes("nope")
}

func TestScopesUnion(t *testing.T) {
	t.Parallel()
	a := NewScopes("read:a", "publish:x")
	b := NewScopes("read:b", Publish)
	u := a.Union(b)
	if got, want := u.String(), "read:a,read:b,publish,publish:x"; got != want {
		t.Errorf("Union = %q, want %q", got, want)
	}
	// Neither operand changes.
	if a.String() != "read:a,publish:x" || b.String() != "read:b,publish" {
		t.Errorf("Union changed its operands: a=%q b=%q", a, b)
	}
	if !u.Equal(b.Union(a)) {
		t.Errorf("Union is not commutative: %v vs %v", u, b.Union(a))
	}
	if !a.Union(Scopes{}).Equal(a) {
		t.Errorf("a ∪ ∅ = %v, want %v", a.Union(Scopes{}), a)
	}
}

func TestScopesUnionDoesNotAlias(t *testing.T) {
	t.Parallel()
	// A base with spare capacity must not be shared between two unions.
	base := NewScopes("read:a", "read:c")
	x := base.Union(NewScopes("read:b"))
	y := base.Union(NewScopes("read:bb"))
	if x.String() != "read:a,read:b,read:c" || y.String() != "read:a,read:bb,read:c" {
		t.Errorf("unions alias: x=%q y=%q", x, y)
	}
}

func TestScopesJSONRoundTrip(t *testing.T) {
	t.Parallel()
	s := NewScopes(Publish, "read:ci", Admin)
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `["admin","read:ci","publish"]`; got != want {
		t.Errorf("json.Marshal = %s, want %s", got, want)
	}
	var back Scopes
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !back.Equal(s) {
		t.Errorf("round trip = %v, want %v", back, s)
	}
	for _, bad := range []string{`["admin","root"]`, `"admin"`, `[1]`} {
		if err := json.Unmarshal([]byte(bad), &back); !errors.Is(err, ErrInvalidScope) {
			t.Errorf("json.Unmarshal(%s) error = %v, want ErrInvalidScope", bad, err)
		}
	}
}

func TestPeerScopes(t *testing.T) {
	t.Parallel()
	const daemon = 1000
	peer := NewScopes(Read)
	tests := []struct {
		uid  uint32
		want string
	}{
		{0, "admin"},
		{daemon, "admin"},
		{1001, "read"},
		{65534, "read"},
	}
	for _, tt := range tests {
		if got := PeerScopes(Peer{UID: tt.uid}, daemon, peer).String(); got != tt.want {
			t.Errorf("PeerScopes(uid %d) = %q, want %q", tt.uid, got, tt.want)
		}
	}
}
