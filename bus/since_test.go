package bus_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
)

// TestResumeBySinceTime pins SubscribeOptions.Since: events 1..10 are
// published one minute apart from t0 (event i at t0 + (i-1) minutes).
func TestResumeBySinceTime(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	at := func(i int) time.Time { return t0.Add(time.Duration(i-1) * time.Minute) }
	ready := func(cursor, earliest string) string {
		return `stream:ready {cursor:` + cursor + `,earliestId:` + earliest + `,epoch:"e0",lastId:10,maxQueued:256,types:null}`
	}
	events := func(from, to int) []string {
		var out []string
		for i := from; i <= to; i++ {
			out = append(out, "a:x#"+itoa(i))
		}
		return out
	}
	replayed := func(n, last int) string {
		if n == 0 {
			return `stream:replayed {lastReplayedEventId:null,replayedCount:0}`
		}
		return `stream:replayed {lastReplayedEventId:` + itoa(last) + `,replayedCount:` + itoa(n) + `}`
	}
	tests := []struct {
		name     string
		ringSize int
		since    time.Time
		epoch    string
		cursor   *uint64
		want     []string
	}{
		{"exactly at an event: from it", 20, at(4), "", nil,
			append(append([]string{ready("3", "1")}, events(4, 10)...), replayed(7, 10))},
		{"between events: from the next", 20, at(4).Add(30 * time.Second), "", nil,
			append(append([]string{ready("4", "1")}, events(5, 10)...), replayed(6, 10))},
		{"within the millisecond of an event: from it", 20, at(4).Add(400 * time.Microsecond), "", nil,
			append(append([]string{ready("3", "1")}, events(4, 10)...), replayed(7, 10))},
		{"before everything, nothing evicted: the whole ring, no gap", 20, t0.Add(-time.Hour), "", nil,
			append(append([]string{ready("0", "1")}, events(1, 10)...), replayed(10, 10))},
		{"after everything: live only", 20, at(10).Add(time.Second), "", nil,
			[]string{ready("10", "1"), replayed(0, 0)}},
		{"the ring does not reach back so far: gap", 5, at(2), "", nil,
			append(append([]string{ready("0", "6"), `stream:gap {earliestAvailableId:6,lastDeliveredId:0,lastId:10,reason:"ring_evicted"}`}, events(6, 10)...), replayed(5, 10))},
		{"the ring reaches back: no gap", 5, at(7), "", nil,
			append(append([]string{ready("6", "6")}, events(7, 10)...), replayed(4, 10))},
		{"an epoch is ignored", 20, at(9), "other", nil,
			append(append([]string{ready("8", "1")}, events(9, 10)...), replayed(2, 10))},
		{"a cursor wins", 20, at(2), "", ptr[uint64](8),
			append(append([]string{ready("8", "1")}, events(9, 10)...), replayed(2, 10))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newBus(t, bus.Options{Session: bustest.SessionID("s"), RingSize: tt.ringSize})
			for i := 1; i <= 10; i++ {
				publish(t, b, bus.Event{Type: bustest.Type("a:x"), Data: json.RawMessage(`{"timestamp":"1999-01-01T00:00:00Z"}`), Time: at(i)})
			}
			s := subscribe(t, b, bus.SubscribeOptions{Since: tt.since, Epoch: tt.epoch, Cursor: tt.cursor})
			envs, _ := take(t, s)
			if diff := cmp.Diff(tt.want, summary(t, envs)); diff != "" {
				t.Errorf("frames mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFrameTimeIsTheEnvelopesTimestamp(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s")})
	when := time.Date(2026, 12, 1, 20, 0, 0, 123_000_000, time.UTC)
	// Data and originator that mention "timestamp" do not fool it.
	_, _, err := b.Publish(bus.Event{Type: bustest.Type("a:x"), Data: json.RawMessage(`{"timestamp":"2000-01-01T00:00:00Z"}`), Originator: "timestamp", Time: when})
	if err != nil {
		t.Fatal(err)
	}
	s := subscribe(t, b, bus.SubscribeOptions{Cursor: ptr[uint64](0)})
	frames, _ := s.Take(nil)
	for _, f := range frames {
		if f.ID == 1 && !f.Time().Equal(when) {
			t.Errorf("Time() = %v, want %v", f.Time(), when)
		}
	}
}
