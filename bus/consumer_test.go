package bus_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
)

// TestThroughPassesWhatTheFilterSkips: a consumer's position under ack
// mode auto follows Through, which covers the events the filter kept from
// the stream, on replay and live, but never an event still queued.
func TestThroughPassesWhatTheFilterSkips(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s")})
	publish(t, b, ev("a:x", ""), ev("b:y", ""), ev("b:y", "")) // 1..3
	f, err := bus.ParseFilter("a:*")
	if err != nil {
		t.Fatal(err)
	}
	s := subscribe(t, b, bus.SubscribeOptions{Cursor: ptr(uint64(0)), Filter: f})
	if got := s.Through(); got != 0 {
		t.Errorf("Through before any Take = %d, want 0", got)
	}
	envs, _ := take(t, s)
	if got := s.Through(); got != 3 {
		t.Errorf("Through after the replay (a:x#1, two skipped) = %d, want 3; took %v", got, summary(t, envs))
	}
	publish(t, b, ev("b:y", "")) // 4, skipped
	take(t, s)
	if got := s.Through(); got != 4 {
		t.Errorf("Through after a skipped live event = %d, want 4", got)
	}
	// A matching event queued, then one skipped: until Take hands the
	// first to the writer, Through stays where the last Take left it.
	publish(t, b, ev("a:x", ""), ev("b:y", "")) // 5, 6
	if got := s.Through(); got != 4 {
		t.Errorf("Through with a:x#5 still queued = %d, want 4", got)
	}
	envs, _ = take(t, s)
	if got, want := summary(t, envs), []string{"a:x#5"}; !cmp.Equal(got, want) {
		t.Errorf("took %v, want %v", got, want)
	}
	if got := s.Through(); got != 6 {
		t.Errorf("Through after a:x#5 and a skipped b:y#6 = %d, want 6", got)
	}
}

// TestEndReplacedIsFinal: a stream whose consumer was taken over ends
// after what it had queued with stream:closed replaced, without retryMs,
// and leaves the bus.
func TestEndReplacedIsFinal(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s")})
	s := subscribe(t, b, bus.SubscribeOptions{})
	take(t, s) // stream:ready
	publish(t, b, ev("a:x", ""))
	s.EndReplaced()
	s.EndReplaced() // idempotent
	frames, ended := s.Take(nil)
	if !ended || len(frames) != 2 {
		t.Fatalf("Take = %d frames, ended %v; want a:x#1 and stream:closed, ended", len(frames), ended)
	}
	if frames[0].ID != 1 || frames[1].Type != bus.TypeClosed {
		t.Fatalf("frames %s#%d, %s", frames[0].Type, frames[0].ID, frames[1].Type)
	}
	var data map[string]any
	if err := json.Unmarshal(frameData(t, frames[1]), &data); err != nil {
		t.Fatal(err)
	}
	if want := map[string]any{"reason": "replaced"}; !cmp.Equal(data, want) {
		t.Errorf("stream:closed data = %v, want %v (no retryMs)", data, want)
	}
	if s.End() != bus.EndReplaced {
		t.Errorf("End = %q, want replaced", s.End())
	}
	if n := b.Stats().Subscribers; n != 0 {
		t.Errorf("subscribers after EndReplaced = %d, want 0", n)
	}
}

// frameData returns the data of f's envelope.
func frameData(t *testing.T, f *bus.Frame) json.RawMessage {
	t.Helper()
	var env bus.Envelope
	if err := json.Unmarshal(f.JSON(), &env); err != nil {
		t.Fatal(err)
	}
	return env.Data
}
