package grammar

import (
	"errors"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// isError reports whether err is an *Error about field.
func isError(err error, field string) bool {
	var e *Error
	return errors.As(err, &e) && e.Field == field
}

// The seed corpora live in testdata/fuzz/FuzzXxx/.

func FuzzParseCursor(f *testing.F) {
	maxCursor := big.NewInt(MaxCursor)
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseCursor(s)
		digits := s != "" && strings.Trim(s, "0123456789") == ""
		if err != nil {
			if !isError(err, "cursor") {
				t.Fatalf("ParseCursor(%q) = %#v, want *Error{Field: cursor}", s, err)
			}
			if n != 0 {
				t.Fatalf("ParseCursor(%q) = %d with its error", s, n)
			}
			if digits {
				v, _ := new(big.Int).SetString(s, 10)
				if v.Cmp(maxCursor) <= 0 {
					t.Fatalf("ParseCursor(%q) = %v, want %v", s, err, v)
				}
			}
		} else {
			if !digits {
				t.Fatalf("ParseCursor(%q) = %d, want an error: not decimal digits", s, n)
			}
			v, _ := new(big.Int).SetString(s, 10)
			if !v.IsUint64() || v.Uint64() != n || n > MaxCursor {
				t.Fatalf("ParseCursor(%q) = %d, want %v", s, n, v)
			}
		}
		m, err2 := ParseMaxQueued(s)
		if ok := err == nil && n >= MinMaxQueued && n <= MaxMaxQueued; ok != (err2 == nil) || (ok && uint64(m) != n) {
			t.Fatalf("ParseMaxQueued(%q) = %d, %v; ParseCursor gave %d, %v", s, m, err2, n, err)
		}
		if err2 != nil && !isError(err2, "maxQueued") {
			t.Fatalf("ParseMaxQueued(%q) = %#v, want *Error{Field: maxQueued}", s, err2)
		}
	})
}

func TestParseSinceTime(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"10m":                       now.Add(-10 * time.Minute),
		"1h30m":                     now.Add(-90 * time.Minute),
		"2026-12-01T19:00:00Z":      now.Add(-time.Hour),
		"2026-12-01T20:00:00+01:00": now.Add(-time.Hour),
		"2026-12-01T19:00:00.5Z":    now.Add(-time.Hour + 500*time.Millisecond),
	} {
		if got, err := ParseSinceTime(in, now); err != nil || !got.Equal(want) {
			t.Errorf("ParseSinceTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0", "-10m", "0s", "yesterday", "2026-12-01", "17"} {
		if _, err := ParseSinceTime(bad, now); err == nil {
			t.Errorf("ParseSinceTime(%q) accepted", bad)
		}
	}
}

func TestParseCursor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want uint64
		ok   bool
	}{
		{"zero", "0", 0, true},
		{"one", "1", 1, true},
		{"leading zeros", "007", 7, true},
		{"many zeros", "0000000000000000000000000000", 0, true},
		{"leading zeros to max", "000" + "9007199254740991", MaxCursor, true},
		{"2^53-1", "9007199254740991", 1<<53 - 1, true},
		{"2^53", "9007199254740992", 0, false},
		{"2^64", "18446744073709551616", 0, false},
		{"huge", strings.Repeat("9", 400), 0, false},
		{"empty", "", 0, false},
		{"plus", "+1", 0, false},
		{"minus", "-1", 0, false},
		{"space before", " 1", 0, false},
		{"space after", "1 ", 0, false},
		{"hex", "0x10", 0, false},
		{"float", "1.0", 0, false},
		{"exponent", "1e3", 0, false},
		{"underscore", "1_000", 0, false},
		{"arabic-indic digit", "١", 0, false},
		{"fullwidth digit", "１", 0, false},
		{"nul", "1\x00", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseCursor(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Errorf("ParseCursor(%q) = %d, %v; want %d, ok %v", tt.in, got, err, tt.want, tt.ok)
			}
			if err != nil && !isError(err, "cursor") {
				t.Errorf("ParseCursor(%q) = %#v, want *Error{Field: cursor}", tt.in, err)
			}
		})
	}
}

func TestParseMaxQueued(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want int
		ok   bool
	}{
		{"16", 16, true},
		{"256", 256, true},
		{"2048", 2048, true},
		{"0016", 16, true},
		{"15", 0, false},
		{"2049", 0, false},
		{"0", 0, false},
		{"", 0, false},
		{"-16", 0, false},
		{"+16", 0, false},
		{"16.0", 0, false},
		{" 16", 0, false},
		{"1e2", 0, false},
		{"9007199254740992", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseMaxQueued(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseMaxQueued(%q) = %d, %v; want %d, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
		if err != nil {
			if !isError(err, "maxQueued") {
				t.Errorf("ParseMaxQueued(%q) = %#v, want *Error{Field: maxQueued}", tt.in, err)
			}
			if msg := err.Error(); !strings.Contains(msg, "16") || !strings.Contains(msg, "2048") {
				t.Errorf("ParseMaxQueued(%q) error %q does not state the range", tt.in, msg)
			}
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

func TestConsumerNamesAndAckModes(t *testing.T) {
	for _, ok := range []string{"a", "A9", "backup", "x.y-z_1", "0", "a..", strings.Repeat("n", 64)} {
		if got, err := ParseConsumer(ok); err != nil || got != ok {
			t.Errorf("ParseConsumer(%q) = %q, %v", ok, got, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "-a", "_a", ".a", strings.Repeat("n", 65), "a b", "a/b", "é", "a\n", "a%2F"} {
		if _, err := ParseConsumer(bad); !isError(err, "consumer") {
			t.Errorf("ParseConsumer(%q) = %v, want *Error{Field: consumer}", bad, err)
		}
	}
	for in, want := range map[string]AckMode{"auto": AckAuto, "explicit": AckExplicit} {
		if got, err := ParseAckMode(in); err != nil || got != want {
			t.Errorf("ParseAckMode(%q) = %q, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "Explicit", "none", "auto "} {
		if _, err := ParseAckMode(bad); !isError(err, "ack") {
			t.Errorf("ParseAckMode(%q) = %v, want *Error{Field: ack}", bad, err)
		}
	}
}
