package bus

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/localbus/localbus/ipc/wire/grammar"
)

// FuzzAppendCompact: appendCompact accepts exactly what json.Compact
// accepts, and writes the same bytes.
func FuzzAppendCompact(f *testing.F) {
	for _, s := range []string{
		`{"a": [1, 2.5e-3, -0, true, false, null, "x\"\\\/\b\f\n\r\t\u00e9"], "b" : {}}`,
		" [ ] ", `"é"`, "\"\xff\"", `01`, `1.`, `1e`, `-`, `"\x"`, `"\u12g4"`, "\"\t\"", `[1,]`, `{"a":1,}`,
		`{"a" 1}`, `{1:2}`, `tru`, `nul`, `[1] 2`, `{"a":{"b":[{"c":null}]}}`, "\u2028", `"<&>"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		got, ok := appendCompact([]byte("prefix"), src)
		var want bytes.Buffer
		want.WriteString("prefix")
		err := json.Compact(&want, src)
		if ok != (err == nil) {
			t.Fatalf("appendCompact(%q) ok = %v; json.Compact: %v", src, ok, err)
		}
		if ok && !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("appendCompact(%q) = %q, json.Compact %q", src, got, want.Bytes())
		}
		if !ok && string(got) != "prefix" {
			t.Fatalf("appendCompact(%q) failed but changed dst to %q", src, got)
		}
		// ScanValue walks the same grammar without copying: it accepts
		// src, when no white space surrounds it, exactly as json.Compact
		// does, and ends where the value ends.
		if len(src) > 0 && len(bytes.TrimSpace(src)) == len(src) {
			if end := grammar.ScanValue(src, 0, 0); (end == len(src)) != ok {
				t.Fatalf("ScanValue(%q) = %d; json.Compact: %v", src, end, err)
			}
		}
	})
}

// TestAppendCompactNestingLimit pins encoding/json's depth limit: 10000
// levels are valid, 10001 are not.
func TestAppendCompactNestingLimit(t *testing.T) {
	for _, depth := range []int{10000, 10001} {
		src := []byte(strings.Repeat("[", depth) + strings.Repeat("]", depth))
		_, ok := appendCompact(nil, src)
		if want := json.Valid(src); ok != want {
			t.Errorf("appendCompact of depth %d ok = %v, json.Valid = %v", depth, ok, want)
		}
	}
}
