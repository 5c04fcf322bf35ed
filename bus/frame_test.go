package bus_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
)

// publishedFrame publishes one event on b and returns its frame, as a
// subscriber gets it.
func publishedFrame(t *testing.T, b *bus.Bus, e bus.Event) *bus.Frame {
	t.Helper()
	s := subscribe(t, b, bus.SubscribeOptions{})
	s.Take(nil) // stream:ready
	publish(t, b, e)
	frames, _ := s.Take(nil)
	if len(frames) != 1 {
		t.Fatalf("got %d frames, want 1", len(frames))
	}
	s.Close()
	return frames[0]
}

func TestEnvelopeEncoding(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		session string // of the bus
		ev      bus.Event
		want    string
	}{
		{
			name:    "spec example",
			session: "b-17",
			ev:      bus.Event{Type: bustest.Type("build:step"), Data: json.RawMessage(`{"n":3}`), Originator: "cli-9", Time: fixedTime},
			want:    `{"id":1,"v":1,"type":"build:step","session":"b-17","data":{"n":3},"timestamp":"2026-08-22T10:00:00.123Z","originator":"cli-9"}`,
		},
		{
			name:    "no originator, no field",
			session: "s",
			ev:      bus.Event{Type: bustest.Type("a:b"), Data: json.RawMessage(`1`), Time: fixedTime},
			want:    `{"id":1,"v":1,"type":"a:b","session":"s","data":1,"timestamp":"2026-08-22T10:00:00.123Z"}`,
		},
		{
			name:    "data compacted to one line",
			session: "s",
			ev:      bus.Event{Type: bustest.Type("a:b"), Data: json.RawMessage("\n {\n\t\"k\" : [ 1 , \"x y\" ],\r\n \"z\": {} }\n"), Time: fixedTime},
			want:    `{"id":1,"v":1,"type":"a:b","session":"s","data":{"k":[1,"x y"],"z":{}},"timestamp":"2026-08-22T10:00:00.123Z"}`,
		},
		{
			name:    "nil data is null",
			session: "s",
			ev:      bus.Event{Type: bustest.Type("a:b"), Time: fixedTime},
			want:    `{"id":1,"v":1,"type":"a:b","session":"s","data":null,"timestamp":"2026-08-22T10:00:00.123Z"}`,
		},
		{
			name:    "blank data is null",
			session: "s",
			ev:      bus.Event{Type: bustest.Type("a:b"), Data: json.RawMessage(" \n\t"), Time: fixedTime},
			want:    `{"id":1,"v":1,"type":"a:b","session":"s","data":null,"timestamp":"2026-08-22T10:00:00.123Z"}`,
		},
		{
			name:    "timestamp in UTC, milliseconds truncated",
			session: "s",
			ev:      bus.Event{Type: bustest.Type("a:b"), Time: time.Date(2026, 1, 2, 3, 4, 5, 999_999_999, time.FixedZone("X", -5*3600))},
			want:    `{"id":1,"v":1,"type":"a:b","session":"s","data":null,"timestamp":"2026-01-02T08:04:05.999Z"}`,
		},
		{
			name:    "timestamp with zero milliseconds keeps three digits",
			session: "s",
			ev:      bus.Event{Type: bustest.Type("a:b"), Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)},
			want:    `{"id":1,"v":1,"type":"a:b","session":"s","data":null,"timestamp":"2026-01-02T03:04:05.000Z"}`,
		},
		{
			name: "global bus: session and seq from the event",
			ev:   bus.Event{Type: bustest.Type("a:b"), Session: bustest.SessionID("b-17"), Seq: 42, Time: fixedTime},
			want: `{"id":1,"v":1,"type":"a:b","session":"b-17","seq":42,"data":null,"timestamp":"2026-08-22T10:00:00.123Z"}`,
		},
		{
			name: "global bus: daemon event without session",
			ev:   bus.Event{Type: bustest.Type("x:y"), Time: fixedTime},
			want: `{"id":1,"v":1,"type":"x:y","data":null,"timestamp":"2026-08-22T10:00:00.123Z"}`,
		},
		{
			name:    "originator escaped",
			session: "s",
			ev:      bus.Event{Type: bustest.Type("a:b"), Originator: "q\"b\\s\n\x01\u2028</", Time: fixedTime},
			want:    `{"id":1,"v":1,"type":"a:b","session":"s","data":null,"timestamp":"2026-08-22T10:00:00.123Z","originator":"q\"b\\s\u000a\u0001\u2028</"}`,
		},
		{
			name:    "originator invalid UTF-8 replaced",
			session: "s",
			ev:      bus.Event{Type: bustest.Type("a:b"), Originator: "a\xffb", Time: fixedTime},
			want:    `{"id":1,"v":1,"type":"a:b","session":"s","data":null,"timestamp":"2026-08-22T10:00:00.123Z","originator":"a\ufffdb"}`,
		},
		{
			name:    "mirrored event carries its origin",
			session: "a.build",
			ev:      bus.Event{Type: bustest.Type("a:b"), Data: json.RawMessage(`1`), Time: fixedTime, Origin: &bus.RemoteOrigin{Node: "a", Session: "build", ID: 42, Epoch: "e\"1"}},
			want:    `{"id":1,"v":1,"type":"a:b","session":"a.build","data":1,"timestamp":"2026-08-22T10:00:00.123Z","origin":{"node":"a","session":"build","id":42,"epoch":"e\"1"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newBus(t, bus.Options{Session: bustest.SessionID(tt.session)})
			f := publishedFrame(t, b, tt.ev)
			if got := string(f.JSON()); got != tt.want {
				t.Errorf("JSON() =\n%s\nwant\n%s", got, tt.want)
			}
			if !json.Valid(f.JSON()) || !utf8.Valid(f.JSON()) {
				t.Errorf("JSON() is not valid UTF-8 JSON: %q", f.JSON())
			}
			wantSSE := fmt.Sprintf("id: 1\nevent: %s\ndata: %s\n\n", tt.ev.Type, tt.want)
			if got := string(f.SSE()); got != wantSSE {
				t.Errorf("SSE() =\n%q\nwant\n%q", got, wantSSE)
			}
		})
	}
}

func TestEnvelopeDecodes(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("b-17")})
	e := bus.Event{Type: bustest.Type("build:step"), Data: json.RawMessage(`{"n": 3}`), Originator: "ü\"", Time: fixedTime}
	got := bustest.Decode(t, publishedFrame(t, b, e))
	want := bus.Envelope{ID: 1, V: 1, Type: "build:step", Session: "b-17", Data: json.RawMessage(`{"n":3}`),
		Timestamp: "2026-08-22T10:00:00.123Z", Originator: "ü\""}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("envelope mismatch (-want +got):\n%s", diff)
	}
}

func TestEnvelopeZeroTimeIsNow(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s")})
	before := time.Now().UTC().Truncate(time.Millisecond)
	env := bustest.Decode(t, publishedFrame(t, b, bus.Event{Type: bustest.Type("a:b")}))
	after := time.Now().UTC()
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`).MatchString(env.Timestamp) {
		t.Fatalf("timestamp = %q, want YYYY-MM-DDTHH:MM:SS.mmmZ", env.Timestamp)
	}
	ts, err := time.Parse(time.RFC3339Nano, env.Timestamp)
	if err != nil {
		t.Fatal(err)
	}
	if ts.Before(before) || ts.After(after) {
		t.Errorf("timestamp = %v, want between %v and %v", ts, before, after)
	}
}

func TestFrameAccessors(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s")})
	f := publishedFrame(t, b, ev("a:b", `{"x":1}`))
	if f.ID != 1 || f.Type != "a:b" || f.Reserved() {
		t.Errorf("frame = {ID %d, Type %q, Reserved %v}, want {1, a:b, false}", f.ID, f.Type, f.Reserved())
	}
	if f.Size() != len(f.SSE()) {
		t.Errorf("Size() = %d, want len(SSE()) = %d", f.Size(), len(f.SSE()))
	}
	if cap(f.SSE()) != len(f.SSE()) {
		t.Errorf("SSE() has cap %d for len %d: the size estimate is off", cap(f.SSE()), len(f.SSE()))
	}
	sse, js := f.SSE(), f.JSON()
	if !bytes.Contains(sse, js) || &sse[len(sse)-2-len(js)] != &js[0] {
		t.Error("JSON() is not a sub-slice of SSE()")
	}
}

func TestFrameSizeEstimateAcrossIDWidths(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s"), RingSize: 1})
	s := subscribe(t, b, bus.SubscribeOptions{})
	s.Take(nil)
	for i := 1; i <= 1200; i++ {
		publish(t, b, bus.Event{Type: bustest.Type("a:b"), Originator: "o", Time: fixedTime})
		frames, _ := s.Take(nil)
		for _, f := range frames {
			if cap(f.SSE()) != len(f.SSE()) {
				t.Fatalf("id %d: cap %d, len %d", f.ID, cap(f.SSE()), len(f.SSE()))
			}
		}
	}
}

// sseLine matches one line of an SSE frame as the bus writes it.
var sseLine = regexp.MustCompile(`^(id: [1-9][0-9]*|event: [a-z][a-z0-9_-]*:[A-Za-z0-9_.-]+|data: \{.*\})$`)

func TestReservedFramesSSE(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s"), RingSize: 2})
	publishN(t, b, "a:b", 5)
	s := subscribe(t, b, bus.SubscribeOptions{Cursor: ptr[uint64](1)})
	b.Close()
	frames, ended := s.Take(nil)
	if !ended {
		t.Fatal("stream did not end after Close")
	}
	var got []string
	for _, f := range frames {
		got = append(got, f.Type)
		sse := string(f.SSE())
		if !strings.HasSuffix(sse, "\n\n") || strings.Count(sse, "\n") != strings.Count(strings.TrimSuffix(sse, "\n\n"), "\n")+2 {
			t.Errorf("%s: SSE does not end in one blank line: %q", f.Type, sse)
		}
		lines := strings.Split(strings.TrimSuffix(sse, "\n\n"), "\n")
		for _, l := range lines {
			if !sseLine.MatchString(l) {
				t.Errorf("%s: bad SSE line %q", f.Type, l)
			}
		}
		hasID := strings.HasPrefix(sse, "id: ")
		if f.Reserved() {
			if hasID || len(lines) != 2 {
				t.Errorf("%s: reserved frame SSE = %q, want event: and data: lines only", f.Type, sse)
			}
			if f.ID != 0 || bus.FamilyOf(f.Type) != bus.FamilyStream {
				t.Errorf("reserved frame {ID %d, Type %q}", f.ID, f.Type)
			}
		} else if !hasID || len(lines) != 3 || lines[0] != fmt.Sprintf("id: %d", f.ID) {
			t.Errorf("event %d: SSE = %q, want id:, event: and data: lines", f.ID, sse)
		}
		if want := "event: " + f.Type; lines[len(lines)-2] != want {
			t.Errorf("%s: event line %q, want %q", f.Type, lines[len(lines)-2], want)
		}
		if want := "data: " + string(f.JSON()); lines[len(lines)-1] != want {
			t.Errorf("%s: data line %q, want %q", f.Type, lines[len(lines)-1], want)
		}
		env := bustest.Decode(t, f)
		if env.V != 1 || env.Session != "s" || env.Originator != "" {
			t.Errorf("%s: envelope %+v, want v 1, session s, no originator", f.Type, env)
		}
		if f.Reserved() {
			var raw map[string]json.RawMessage
			if err := json.Unmarshal(f.JSON(), &raw); err != nil {
				t.Fatal(err)
			}
			if _, ok := raw["id"]; ok {
				t.Errorf("%s: reserved envelope has an id: %s", f.Type, f.JSON())
			}
			if _, err := time.Parse("2006-01-02T15:04:05.000Z", env.Timestamp); err != nil {
				t.Errorf("%s: timestamp %q: %v", f.Type, env.Timestamp, err)
			}
		}
	}
	want := []string{bus.TypeReady, bus.TypeGap, "a:b", "a:b", bus.TypeReplayed, bus.TypeClosed}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("frames mismatch (-want +got):\n%s", diff)
	}
}

func TestReservedFramesOnGlobalBusHaveNoSession(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{})
	s := subscribe(t, b, bus.SubscribeOptions{})
	envs, _ := take(t, s)
	if len(envs) != 1 || envs[0].Type != bus.TypeReady {
		t.Fatalf("got %v, want stream:ready", bustest.Types(envs))
	}
	if strings.Contains(string(envs[0].Data), "session") || envs[0].Session != "" {
		t.Errorf("global bus stream:ready has a session: %+v", envs[0])
	}
}

func TestErrorFrame(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, session, code, message string
	}{
		{"session", "b-17", "subscriber_limit", "bus: subscriber limit reached"},
		{"global", "", "subscriber_limit", "too many"},
		{"needs escaping", `we"ird\`, "x", "line\nbreak <b> \"q\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := bus.ErrorFrame(tt.session, tt.code, tt.message)
			if !f.Reserved() || f.Type != bus.TypeError || strings.HasPrefix(string(f.SSE()), "id:") {
				t.Errorf("ErrorFrame = {ID %d, Type %q}, SSE %q; want a reserved stream:error", f.ID, f.Type, f.SSE())
			}
			env := bustest.Decode(t, f)
			if env.Session != tt.session {
				t.Errorf("session = %q, want %q", env.Session, tt.session)
			}
			got := bustest.Data[bus.ErrorData](t, env)
			if want := (bus.ErrorData{Code: tt.code, Message: tt.message}); got != want {
				t.Errorf("data = %+v, want %+v", got, want)
			}
			if n := strings.Count(string(f.SSE()), "\n"); n != 3 {
				t.Errorf("SSE has %d newlines, want 3: %q", n, f.SSE())
			}
		})
	}
}

func TestParseFrameRoundTrip(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s")})
	orig := publishedFrame(t, b, bus.Event{Type: bustest.Type("a:b"), Data: json.RawMessage(`{"x":[1,2]}`), Originator: "o", Time: fixedTime})
	got, err := bus.ParseFrame(orig.JSON())
	if err != nil {
		t.Fatalf("ParseFrame = %v", err)
	}
	if got.ID != orig.ID || got.Type != orig.Type || !bytes.Equal(got.SSE(), orig.SSE()) || !bytes.Equal(got.JSON(), orig.JSON()) {
		t.Errorf("ParseFrame = {%d %q %q}, want {%d %q %q}", got.ID, got.Type, got.SSE(), orig.ID, orig.Type, orig.SSE())
	}
}

func TestParseFrameRejectsBadEnvelopes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
	}{
		{"not json", `nope`},
		{"empty", ``},
		{"bad type", `{"id":1,"type":"nope"}`},
		{"missing type", `{"id":1}`},
		{"negative id", `{"id":-1,"type":"a:b"}`},
		{"fractional id", `{"id":1.5,"type":"a:b"}`},
		{"array", `[1]`},
	}
	for _, tt := range tests {
		if f, err := bus.ParseFrame([]byte(tt.in)); err == nil {
			t.Errorf("%s: ParseFrame(%q) = %q, want an error", tt.name, tt.in, f.SSE())
		} else if !bus.IsInputError(err) {
			t.Errorf("%s: ParseFrame(%q) = %v, want an *InputError", tt.name, tt.in, err)
		}
	}
}

func TestParseFrameRejectsEventWithoutID(t *testing.T) {
	t.Parallel()
	for _, in := range []string{`{"type":"a:b"}`, `{"id":0,"type":"a:b"}`} {
		if f, err := bus.ParseFrame([]byte(in)); err == nil {
			t.Errorf("ParseFrame(%q) = {ID %d, Reserved %v}, want an error: a stored event has an id", in, f.ID, f.Reserved())
		}
	}
}

func TestParseFrameKeepsSSEOneLine(t *testing.T) {
	t.Parallel()
	in := "{\"id\":7,\n\"type\":\"a:b\",\r\n\"data\":{ \"k\" : 1 }}\n"
	f, err := bus.ParseFrame([]byte(in))
	if err != nil {
		t.Fatalf("ParseFrame(%q) = %v", in, err)
	}
	want := "id: 7\nevent: a:b\ndata: {\"id\":7,\"type\":\"a:b\",\"data\":{\"k\":1}}\n\n"
	if got := string(f.SSE()); got != want {
		t.Errorf("SSE() = %q, want %q", got, want)
	}
}
