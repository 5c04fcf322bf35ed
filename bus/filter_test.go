package bus_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/localbus/localbus/bus"
)

func TestParseFilter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		in    string
		types []string // nil: an error is expected
	}{
		{"one exact", "build:step", []string{"build:step"}},
		{"one family", "build:*", []string{"build:*"}},
		{"mixed", "build:step,test:*,a:b", []string{"build:step", "test:*", "a:b"}},
		{"duplicates dropped, first order kept", "a:x,b:*,a:x,b:*", []string{"a:x", "b:*"}},
		{"exact and family of the same family", "a:x,a:*", []string{"a:x", "a:*"}},
		{"empty string", "", nil},
		{"empty element middle", "a:x,,b:y", nil},
		{"empty element trailing", "a:x,", nil},
		{"empty element leading", ",a:x", nil},
		{"space around", "a:x, b:y", nil},
		{"no colon", "build", nil},
		{"bad family", "Build:x", nil},
		{"bad family star", "9:*", nil},
		{"bad name", "a:b c", nil},
		{"star inside name", "a:b*", nil},
		{"star family", "*:x", nil},
		{"star star", "*:*", nil},
		{"bare star", "*", nil},
		{"reserved stream exact", "stream:ready", nil},
		{"reserved stream family", "stream:*", nil},
		{"reserved localbus exact", "localbus:reloaded", nil},
		{"reserved localbus family", "localbus:*", nil},
		{"reserved among good ones", "a:x,stream:gap", nil},
		{"256 entries", entries(256), strings.Split(entries(256), ",")},
		{"257 entries", entries(257), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := bus.ParseFilter(tt.in)
			if tt.types == nil {
				if err == nil {
					t.Fatalf("ParseFilter(%q) = %v, want an error", tt.in, f.Types())
				}
				if !isInputError(err, "types") {
					t.Errorf("ParseFilter(%q) = %#v, want *InputError{Field: types}", tt.in, err)
				}
				if f != nil {
					t.Errorf("ParseFilter(%q) returned a filter with its error", tt.in)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseFilter(%q) = %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.types, f.Types()); diff != "" {
				t.Errorf("ParseFilter(%q).Types() mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

// entries returns n distinct valid filter entries, comma-separated.
func entries(n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("f:e%d", i)
	}
	return strings.Join(s, ",")
}

func TestFilterErrorsNameTheProblem(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
	}{
		{"a:x,,b:y", "empty element"},
		{"stream:*", "reserved"},
		{"localbus:x", "reserved"},
		{"Build:x", "family"},
		{"a:b c", "name"},
		{"nocolon", "family:name"},
		{entries(257), "256"},
	}
	for _, tt := range tests {
		_, err := bus.ParseFilter(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseFilter(%.40q) = %v, want an error mentioning %q", tt.in, err, tt.want)
		}
	}
	if _, err := bus.NewFilter(nil); !isInputError(err, "types") {
		t.Errorf("NewFilter(nil) = %v, want *InputError{Field: types}", err)
	}
	if _, err := bus.NewFilter([]string{}); !isInputError(err, "types") {
		t.Errorf("NewFilter([]) = %v, want *InputError{Field: types}", err)
	}
}

func TestFilterMatch(t *testing.T) {
	t.Parallel()
	f, err := bus.ParseFilter("build:step,test:*")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		typ  string
		want bool
	}{
		{"build:step", true},
		{"build:other", false},
		{"build:stepx", false},
		{"test:a", true},
		{"test:zz.9", true},
		{"tests:a", false},
		{"tes:a", false},
		{"stream:ready", false},
		{"x:y", false},
	}
	for _, tt := range tests {
		if got := f.Match(tt.typ); got != tt.want {
			t.Errorf("Match(%q) = %v, want %v", tt.typ, got, tt.want)
		}
	}
	var all *bus.Filter
	for _, typ := range []string{"a:b", "stream:ready", "localbus:x"} {
		if !all.Match(typ) {
			t.Errorf("nil filter: Match(%q) = false, want true", typ)
		}
	}
	if all.Types() != nil {
		t.Errorf("nil filter: Types() = %v, want nil", all.Types())
	}
}

func TestFilterWithinAndFamilies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in       string
		within   map[string]bool
		families []string
	}{
		{"build:*", map[string]bool{"build": true, "test": false}, []string{"build"}},
		{"build:a,build:b,build:*", map[string]bool{"build": true, "test": false}, []string{"build"}},
		{"build:a,test:*", map[string]bool{"build": false, "test": false}, []string{"build", "test"}},
		{"z:a,y:b,z:*", map[string]bool{"z": false}, []string{"z", "y"}},
	}
	for _, tt := range tests {
		f, err := bus.ParseFilter(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		for fam, want := range tt.within {
			if got := f.Within(fam); got != want {
				t.Errorf("ParseFilter(%q).Within(%q) = %v, want %v", tt.in, fam, got, want)
			}
		}
		if diff := cmp.Diff(tt.families, f.Families()); diff != "" {
			t.Errorf("ParseFilter(%q).Families() mismatch (-want +got):\n%s", tt.in, diff)
		}
	}
	var all *bus.Filter
	if !all.Within("any") || all.Families() != nil {
		t.Errorf("nil filter: Within = %v, Families = %v; want true, nil", all.Within("any"), all.Families())
	}
}

func mustFilter(tb testing.TB, s string) *bus.Filter {
	tb.Helper()
	f, err := bus.ParseFilter(s)
	if err != nil {
		tb.Fatalf("ParseFilter(%q) = %v", s, err)
	}
	return f
}

func TestFilterAdd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		f, other  string // "" is the nil filter
		want      []string
		wantAll   bool // the result is nil: everything
		wantError bool
	}{
		{name: "union keeps order and drops duplicates", f: "a:x,b:*", other: "b:*,c:y", want: []string{"a:x", "b:*", "c:y"}},
		{name: "nil receiver stays everything", f: "", other: "a:x", wantAll: true},
		{name: "adding everything is everything", f: "a:x", other: "", wantAll: true},
		{name: "256 entries in all is fine", f: entries(200), other: entriesFrom(200, 56), want: strings.Split(entries(256), ",")},
		{name: "more than 256 entries in all is an error", f: entries(200), other: entriesFrom(200, 57), wantError: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var f, other *bus.Filter
			if tt.f != "" {
				f = mustFilter(t, tt.f)
			}
			if tt.other != "" {
				other = mustFilter(t, tt.other)
			}
			before := append([]string(nil), f.Types()...)
			got, err := f.Add(other)
			if tt.wantError {
				if !isInputError(err, "types") {
					t.Fatalf("Add = %v, %v; want *InputError{Field: types}", got.Types(), err)
				}
				if got != nil {
					t.Errorf("Add returned a filter with its error")
				}
			} else if err != nil {
				t.Fatalf("Add = %v", err)
			} else if tt.wantAll {
				if got != nil {
					t.Errorf("Add = %v, want nil (everything)", got.Types())
				}
			} else if diff := cmp.Diff(tt.want, got.Types()); diff != "" {
				t.Errorf("Add mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, append([]string(nil), f.Types()...)); diff != "" {
				t.Errorf("Add modified its receiver (-before +after):\n%s", diff)
			}
		})
	}
}

// entriesFrom returns n distinct valid filter entries starting at index i.
func entriesFrom(i, n int) string {
	s := make([]string, n)
	for j := range s {
		s[j] = fmt.Sprintf("f:e%d", i+j)
	}
	return strings.Join(s, ",")
}

func TestFilterRemove(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		f, other string
		want     []string
		ok       bool
	}{
		{"removes exact entries", "a:x,b:*,c:y", "b:*", []string{"a:x", "c:y"}, true},
		{"entries not present are ignored", "a:x", "z:z", []string{"a:x"}, true},
		{"family entry is not removed by an exact one", "a:*", "a:x", []string{"a:*"}, true},
		{"removing all is not ok", "a:x,b:y", "b:y,a:x", nil, false},
	}
	for _, tt := range tests {
		got, ok := mustFilter(t, tt.f).Remove(mustFilter(t, tt.other))
		if ok != tt.ok || !cmp.Equal(tt.want, got.Types()) {
			t.Errorf("%s: Remove = %v, %v; want %v, %v", tt.name, got.Types(), ok, tt.want, tt.ok)
		}
	}
	var all *bus.Filter
	if got, ok := all.Remove(mustFilter(t, "a:x")); got != nil || !ok {
		t.Errorf("nil.Remove = %v, %v; want nil, true", got.Types(), ok)
	}
}

func TestFilterIsImmutable(t *testing.T) {
	t.Parallel()
	in := []string{"a:x", "b:*"}
	f, err := bus.NewFilter(in)
	if err != nil {
		t.Fatal(err)
	}
	in[0] = "z:z"
	if !f.Match("a:x") || f.Match("z:z") {
		t.Error("changing the slice given to NewFilter changed the filter")
	}
}

func TestFilterAddCountsDistinctEntries(t *testing.T) {
	t.Parallel()
	f := mustFilter(t, entries(200))
	got, err := f.Add(mustFilter(t, entries(200)))
	if err != nil {
		t.Fatalf("Add(same 200 entries) = %v, want the same filter", err)
	}
	if n := len(got.Types()); n != 200 {
		t.Errorf("len(Add(same).Types()) = %d, want 200", n)
	}
}
