package bus

import "strings"

// Filter selects events by type: a set of exact types ("build:step") and
// whole families ("build:*"). A nil *Filter matches everything. Filters are
// immutable once built, so one may be shared between goroutines.
type Filter struct {
	exact    []string
	families []string
	list     []string // as given, deduplicated, for stream:ready and subscribed replies
}

// maxFilterEntries bounds a filter, so a client cannot make every publish
// scan a huge list.
const maxFilterEntries = 256

// NewFilter builds a filter from exact types and family:* patterns. An empty
// element, a malformed type, a reserved family (stream, localbus) or more than
// 256 entries is an *InputError. An empty list is an error too: a filter that
// matches nothing is never what a client meant; use a nil filter for
// everything.
func NewFilter(types []string) (*Filter, error) {
	if len(types) == 0 {
		return nil, inputError("types", "", "empty list")
	}
	if len(types) > maxFilterEntries {
		return nil, inputError("types", "", "more than 256 entries")
	}
	f := &Filter{}
	seen := make(map[string]bool, len(types))
	for _, t := range types {
		if t == "" {
			return nil, inputError("types", strings.Join(types, ","), "empty element")
		}
		fam, name, ok := splitType(t)
		if !ok {
			return nil, inputError("types", t, "want family:name or family:*")
		}
		if name == "*" {
			if !validFamily(fam) {
				return nil, inputError("types", t, "family must match [a-z][a-z0-9_-]{0,31}")
			}
		} else if err := validateType(t); err != nil {
			return nil, inputError("types", t, err.(*InputError).Reason)
		}
		if IsReservedFamily(fam) {
			return nil, inputError("types", t, "family "+fam+" is reserved")
		}
		if seen[t] {
			continue
		}
		seen[t] = true
		f.list = append(f.list, t)
		if name == "*" {
			f.families = append(f.families, fam)
		} else {
			f.exact = append(f.exact, t)
		}
	}
	return f, nil
}

// ParseFilter parses the ?types= form: a comma-separated list.
func ParseFilter(s string) (*Filter, error) {
	return NewFilter(strings.Split(s, ","))
}

// Match reports whether an event of type t passes the filter. A nil filter
// matches everything.
func (f *Filter) Match(t string) bool {
	if f == nil {
		return true
	}
	for _, e := range f.exact {
		if e == t {
			return true
		}
	}
	if len(f.families) > 0 {
		fam := FamilyOf(t)
		for _, e := range f.families {
			if e == fam {
				return true
			}
		}
	}
	return false
}

// Types returns the filter's entries in the order first given, or nil for a
// nil filter. The caller must not modify the slice.
func (f *Filter) Types() []string {
	if f == nil {
		return nil
	}
	return f.list
}

// Within reports whether every entry of the filter lies inside family fam.
// A nil filter is within every family.
func (f *Filter) Within(fam string) bool {
	if f == nil {
		return true
	}
	for _, t := range f.list {
		if FamilyOf(t) != fam {
			return false
		}
	}
	return true
}

// Families returns the distinct families the filter names, in order.
func (f *Filter) Families() []string {
	if f == nil {
		return nil
	}
	var out []string
	for _, t := range f.list {
		fam := FamilyOf(t)
		dup := false
		for _, o := range out {
			if o == fam {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, fam)
		}
	}
	return out
}

// Add returns a filter with the entries of other added; f is unchanged. A nil
// receiver (no filter: everything) stays nil, since it already matches all of
// them, and adding nil (everything) gives nil. A union of more than 256
// distinct entries is an *InputError, as in NewFilter: the filter the caller
// holds stays as it was.
func (f *Filter) Add(other *Filter) (*Filter, error) {
	if f == nil || other == nil {
		return nil, nil
	}
	union := append([]string(nil), f.list...)
	for _, t := range other.list {
		if !f.has(t) {
			union = append(union, t)
		}
	}
	return NewFilter(union)
}

func (f *Filter) has(t string) bool {
	for _, e := range f.list {
		if e == t {
			return true
		}
	}
	return false
}

// Remove returns the filter without the entries of other; ok is false when
// nothing would remain (a filter never becomes empty: the caller decides what
// that means).
func (f *Filter) Remove(other *Filter) (g *Filter, ok bool) {
	if f == nil || other == nil {
		return f, true
	}
	drop := make(map[string]bool, len(other.list))
	for _, t := range other.list {
		drop[t] = true
	}
	var keep []string
	for _, t := range f.list {
		if !drop[t] {
			keep = append(keep, t)
		}
	}
	if len(keep) == 0 {
		return nil, false
	}
	g, _ = NewFilter(keep)
	return g, true
}
