package bus

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
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
			if end := ScanValue(src, 0, 0); (end == len(src)) != ok {
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

// TestPlainRunMatchesAByteLoop: the word-at-a-time scan stops where a
// byte-at-a-time loop does, for special bytes at every offset among bytes
// of every kind.
func TestPlainRunMatchesAByteLoop(t *testing.T) {
	naive := func(s []byte, i int) int {
		for i < len(s) && s[i] >= 0x20 && s[i] != '"' && s[i] != '\\' {
			i++
		}
		return i
	}
	alphabet := []byte{'a', ' ', '!', '"', '#', '\\', ']', 0x00, 0x1f, 0x7f, 0x80, 0xa2, 0xdc, 0xff}
	// Two independent streams of random cases.
	for _, seed := range [][2]uint64{{1, 2}, {3, 4}} {
		r := rand.New(rand.NewPCG(seed[0], seed[1]))
		for range 200000 {
			s := make([]byte, r.IntN(40))
			for i := range s {
				if r.IntN(8) == 0 {
					s[i] = alphabet[r.IntN(len(alphabet))]
				} else {
					s[i] = byte(0x20 + r.IntN(0xe0))
				}
			}
			start := 0
			if len(s) > 0 {
				start = r.IntN(len(s))
			}
			if got, want := plainRun(s, start), naive(s, start); got != want {
				t.Fatalf("plainRun(%q, %d) = %d, want %d", s, start, got, want)
			}
		}
	}
}
