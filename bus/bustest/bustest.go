package bustest

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/localbus/localbus/bus"
)

// TB is the part of testing.TB the helpers use, so that they also serve
// property tests whose T is not a testing.TB (pgregory.net/rapid).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Decode decodes a frame's JSON envelope. It fails the test if the bytes are
// not one line of JSON, or if the frame's SSE form does not carry the same
// envelope.
func Decode(tb TB, f *bus.Frame) bus.Envelope {
	tb.Helper()
	js := f.JSON()
	if strings.ContainsAny(string(js), "\r\n") {
		tb.Fatalf("frame %s: envelope is not one line: %q", f.Type, js)
	}
	var env bus.Envelope
	if err := json.Unmarshal(js, &env); err != nil {
		tb.Fatalf("frame %s: decode envelope %q: %v", f.Type, js, err)
	}
	if env.Type != f.Type || env.ID != f.ID {
		tb.Fatalf("frame (id %d, type %s) carries envelope (id %d, type %s)", f.ID, f.Type, env.ID, env.Type)
	}
	return env
}

// DecodeAll decodes frames in order with Decode.
func DecodeAll(tb TB, frames []*bus.Frame) []bus.Envelope {
	tb.Helper()
	envs := make([]bus.Envelope, 0, len(frames))
	for _, f := range frames {
		envs = append(envs, Decode(tb, f))
	}
	return envs
}

// Drain takes what s has queued now, without waiting, and decodes it. ended
// reports that the stream is over (see [bus.Subscription.Take]).
func Drain(tb TB, s *bus.Subscription) (envs []bus.Envelope, ended bool) {
	tb.Helper()
	frames, ended := s.Take(nil)
	return DecodeAll(tb, frames), ended
}

// Collect takes frames from s until it holds at least n envelopes or the
// stream ends, waiting at most timeout in all, and fails the test if the time
// runs out first. It may return more than n: each Take empties the queue.
// ended reports that the stream is over.
func Collect(tb TB, s *bus.Subscription, n int, timeout time.Duration) (envs []bus.Envelope, ended bool) {
	tb.Helper()
	return collect(tb, s, n, timeout)
}

// CollectEnd takes frames from s until the stream ends, waiting at most
// timeout in all, and fails the test if it does not end in time. The last
// envelope is the terminal frame, if the stream had one.
func CollectEnd(tb TB, s *bus.Subscription, timeout time.Duration) []bus.Envelope {
	tb.Helper()
	envs, _ := collect(tb, s, -1, timeout)
	return envs
}

// collect is Collect; n < 0 means until the stream ends.
func collect(tb TB, s *bus.Subscription, n int, timeout time.Duration) ([]bus.Envelope, bool) {
	tb.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var envs []bus.Envelope
	var frames []*bus.Frame
	for {
		var ended bool
		frames, ended = s.Take(frames[:0])
		envs = append(envs, DecodeAll(tb, frames)...)
		if ended || (n >= 0 && len(envs) >= n) {
			return envs, ended
		}
		select {
		case <-s.Ready():
		case <-timer.C:
			want := "the end of the stream"
			if n >= 0 {
				want = strconv.Itoa(n) + " frames"
			}
			tb.Fatalf("waited %v for %s; got %d: %v", timeout, want, len(envs), Types(envs))
			return envs, false
		}
	}
}

// Types returns the envelopes' types, in order.
func Types(envs []bus.Envelope) []string {
	out := make([]string, len(envs))
	for i, e := range envs {
		out[i] = e.Type
	}
	return out
}

// IDs returns the ids of the events among envs, in order, skipping reserved
// frames (which have none).
func IDs(envs []bus.Envelope) []uint64 {
	var out []uint64
	for _, e := range envs {
		if e.ID != 0 {
			out = append(out, e.ID)
		}
	}
	return out
}

// Data decodes env's data into a T, typically one of the bus's frame data
// types ([bus.ReadyData], [bus.GapData], ...). Unknown fields fail the test,
// so a frame that grows a field the test does not expect is noticed.
func Data[T any](tb TB, env bus.Envelope) T {
	tb.Helper()
	var v T
	dec := json.NewDecoder(strings.NewReader(string(env.Data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		tb.Fatalf("%s: decode data %s as %T: %v", env.Type, env.Data, v, err)
	}
	return v
}

// PublishFrames publishes events on b, as [bus.Bus.Publish] does, and
// returns their frames (what [bus.Copies] take): a Stage with KeepFrames,
// then Finish.
func PublishFrames(b *bus.Bus, events ...bus.Event) ([]*bus.Frame, error) {
	st, err := b.Stage(bus.Batch{Events: events, KeepFrames: true})
	if err != nil {
		return nil, err
	}
	if err := b.Finish(st); err != nil {
		return nil, err
	}
	return st.Frames, nil
}

// PublishCopies publishes the copies of batches on the global bus g: a
// Stage of [bus.Batch.Copies], then Finish.
func PublishCopies(g *bus.Bus, batches ...bus.Copies) (first, last uint64, err error) {
	st, err := g.Stage(bus.Batch{Copies: batches})
	if err != nil {
		return 0, 0, err
	}
	return st.First, st.Last, g.Finish(st)
}

// Family parses a family name for a test, failing it if s is not one.
func Family(tb TB, s string) bus.Family {
	tb.Helper()
	f, err := bus.ParseFamily(s)
	if err != nil {
		tb.Fatalf("bustest: %v", err)
	}
	return f
}

// Type parses the type of an event a test publishes, s, and panics if s
// is not one: for types a test spells out, in literals where no TB is at
// hand. The daemon's own types ([bus.TypeReloaded], …) it returns by
// their names.
func Type(s string) bus.Type {
	for _, t := range []bus.Type{bus.TypeSessionOpened, bus.TypeSessionClosed, bus.TypeReloaded} {
		if s == t.String() {
			return t
		}
	}
	t, err := bus.ParseType(s)
	if err != nil {
		panic("bustest: " + err.Error())
	}
	return t
}

// SessionID parses a session id a test spells out, and panics if s is not
// one; "" is the zero SessionID, the global bus's.
func SessionID(s string) bus.SessionID {
	if s == "" {
		return bus.SessionID{}
	}
	id, err := bus.ParseSessionID(s)
	if err != nil {
		panic("bustest: " + err.Error())
	}
	return id
}
