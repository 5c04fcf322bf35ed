package main

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParsePointReadsTheTimeFormsOfSpec(t *testing.T) {
	now := time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	tests := []struct {
		in     string
		isID   bool
		id     uint64
		t      time.Time
		errSay string
	}{
		{in: "0", isID: true, id: 0},
		{in: "0042", isID: true, id: 42},
		{in: "1764643500", isID: true, id: 1764643500},
		{in: "9007199254740991", isID: true, id: 9007199254740991},
		{in: "9007199254740992", errSay: "too large for an event id"},
		{in: "@1764643500", t: time.Unix(1764643500, 0)},
		{in: "@1764643500.25", t: time.Unix(1764643500, 250_000_000)},
		{in: "@0", t: time.Unix(0, 0)},
		{in: "10m", t: now.Add(-10 * time.Minute)},
		{in: "1h30m", t: now.Add(-90 * time.Minute)},
		{in: "2026-12-01T09:00:00+01:00", t: time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)},
		{in: "", errSay: "empty"},
		{in: "-1", errSay: "want an event id (42)"},
		{in: "0m", errSay: "a duration (10m"},
		{in: "-10m", errSay: "a duration (10m"},
		{in: "yesterday", errSay: "Unix seconds (@1764643500)"},
		{in: "@", errSay: "want @ and Unix seconds"},
		{in: "@-5", errSay: "want @ and Unix seconds"},
		{in: "@1.", errSay: "want @ and Unix seconds"},
		{in: "@1.1234567891", errSay: "want @ and Unix seconds"},
		{in: "@999999999999999", errSay: "want @ and Unix seconds"},
		{in: "42x", errSay: "want an event id"},
	}
	for _, tt := range tests {
		p, err := parsePoint(tt.in, now)
		if tt.errSay != "" {
			if err == nil || !strings.Contains(err.Error(), tt.errSay) {
				t.Errorf("parsePoint(%q) = %+v, %v; want an error saying %q", tt.in, p, err, tt.errSay)
			}
			continue
		}
		if err != nil || p.isID != tt.isID || p.id != tt.id || !p.t.Equal(tt.t) || p.text != tt.in {
			t.Errorf("parsePoint(%q) = %+v, %v; want id %v %d, time %v", tt.in, p, err, tt.isID, tt.id, tt.t)
		}
	}
}

func TestPointAfterIsInclusive(t *testing.T) {
	now := time.Now()
	id, _ := parsePoint("5", now)
	if id.after(5, "") || !id.after(6, "") || id.after(4, "") {
		t.Error("--until 5: want events up to 5 included, 6 after it")
	}
	at, _ := parsePoint("2026-12-01T20:00:00Z", now)
	for ts, want := range map[string]bool{
		"2026-12-01T19:59:59.999Z": false,
		"2026-12-01T20:00:00Z":     false,
		"2026-12-01T20:00:00.001Z": true,
		"not a time":               false,
	} {
		if got := at.after(99, ts); got != want {
			t.Errorf("--until 2026-12-01T20:00:00Z: after(%q) = %v, want %v", ts, got, want)
		}
	}
}

func FuzzParsePoint(f *testing.F) {
	for _, s := range []string{"0", "42", "@1764643500", "@1.5", "10m", "2026-12-01T20:00:00Z", "", "@", "9007199254740992"} {
		f.Add(s)
	}
	now := time.Now()
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parsePoint(s, now)
		if err != nil {
			if p != (point{}) {
				t.Fatalf("parsePoint(%q) failed (%v) but returned %+v", s, err, p)
			}
			return
		}
		if p.text != s {
			t.Fatalf("parsePoint(%q).text = %q", s, p.text)
		}
		if p.isID {
			if n, err := strconv.ParseUint(s, 10, 64); err != nil || n != p.id {
				t.Fatalf("parsePoint(%q) = id %d, want the decimal value", s, p.id)
			}
		} else if p.t.IsZero() {
			t.Fatalf("parsePoint(%q) = a zero time", s)
		}
	})
}
