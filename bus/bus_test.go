package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
)

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		opts  bus.Options
		field string
	}{
		{"ring size above 1000000", bus.Options{RingSize: bus.MaxRingSize + 1}, "ringSize"},
		{"negative ring size", bus.Options{RingSize: -1}, "ringSize"},
		{"negative ring bytes", bus.Options{RingMaxBytes: -1}, "ringMaxBytes"},
		{"negative maxQueued", bus.Options{MaxQueued: -1}, "maxQueued"},
		{"negative maxQueuedBytes", bus.Options{MaxQueuedBytes: -1}, "maxQueuedBytes"},
		{"negative maxSubscribers", bus.Options{MaxSubscribers: -1}, "maxSubscribers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := bus.New(tt.opts)
			if !isInputError(err, tt.field) {
				t.Errorf("New(%+v) = %v, want *InputError{Field: %s}", tt.opts, err, tt.field)
			}
			if b != nil {
				t.Error("New returned a bus with its error")
				b.Close()
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	b, err := bus.New(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st := b.Stats()
	want := bus.Limits{RingSize: 8000, RingMaxBytes: 64 << 20, MaxQueued: 256, MaxQueuedBytes: 2 << 20, MaxSubscribers: 64}
	if st.Limits != want {
		t.Errorf("Limits = %+v, want %+v", st.Limits, want)
	}
	if b.Epoch() == "" || b.Session() != "" || b.LastID() != 0 || b.EarliestID() != 0 {
		t.Errorf("new bus: epoch %q, session %q, lastId %d, earliest %d", b.Epoch(), b.Session(), b.LastID(), b.EarliestID())
	}
	b2, _ := bus.New(bus.Options{Session: bustest.SessionID("s"), RingSize: bus.MaxRingSize})
	defer b2.Close()
	if b2.Epoch() == b.Epoch() {
		t.Errorf("two buses share epoch %q", b.Epoch())
	}
	if got := b2.Session(); got != "s" {
		t.Errorf("Session() = %q, want s", got)
	}
	b3, _ := bus.New(bus.Options{Epoch: "given"})
	defer b3.Close()
	if got := b3.Epoch(); got != "given" {
		t.Errorf("Epoch() = %q, want given", got)
	}
}

func TestNewEpochIsFresh(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		e := bus.NewEpoch()
		if e == "" || seen[e] {
			t.Fatalf("NewEpoch() = %q, repeated or empty", e)
		}
		seen[e] = true
	}
}

func TestPublishAssignsConsecutiveIDs(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s")})
	first, last, err := b.Publish(ev("a:b", "1"))
	if first != 1 || last != 1 || err != nil {
		t.Fatalf("Publish = %d, %d, %v; want 1, 1, nil", first, last, err)
	}
	first, last, err = b.Publish(ev("a:b", "2"), ev("a:c", "3"), ev("a:d", "4"))
	if first != 2 || last != 4 || err != nil {
		t.Fatalf("Publish(batch of 3) = %d, %d, %v; want 2, 4, nil", first, last, err)
	}
	if got := b.LastID(); got != 4 {
		t.Errorf("LastID() = %d, want 4", got)
	}
	if got := b.EarliestID(); got != 1 {
		t.Errorf("EarliestID() = %d, want 1", got)
	}
}

func TestPublishRefusesBadInputAndBurnsNoID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		events []bus.Event
		field  string
	}{
		{"empty batch", nil, "events"},
		{"no type", []bus.Event{{Data: json.RawMessage("1")}}, "type"},
		{"the daemon's type", []bus.Event{ev("localbus:reloaded", "")}, "type"},
		{"invalid JSON", []bus.Event{ev("a:b", `{"x":`)}, "data"},
		{"two JSON values", []bus.Event{ev("a:b", `1 2`)}, "data"},
		{"control character in string", []bus.Event{ev("a:b", "\"a\x01\"")}, "data"},
		{"invalid UTF-8", []bus.Event{ev("a:b", "\"\xff\"")}, "data"},
		{"one bad event spoils the batch", []bus.Event{ev("a:b", "1"), ev("a:b", "{"), ev("a:b", "3")}, "data"},
		{"the daemon's type late in the batch", []bus.Event{ev("a:b", "1"), ev("localbus:session-closed", "")}, "type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newBus(t, bus.Options{Session: bustest.SessionID("s")})
			s := subscribe(t, b, bus.SubscribeOptions{})
			take(t, s)
			publish(t, b, ev("a:ok", "0"))
			if len(tt.events) > 0 {
				var verr error
				for i := range tt.events {
					if verr = bus.ValidateEvent(&tt.events[i]); verr != nil {
						break
					}
				}
				if !isInputError(verr, tt.field) {
					t.Errorf("ValidateEvent of the batch = %v, want *InputError{Field: %s} as Publish", verr, tt.field)
				}
			}
			first, last, err := b.Publish(tt.events...)
			if !isInputError(err, tt.field) {
				t.Errorf("Publish = %d, %d, %v; want *InputError{Field: %s}", first, last, err, tt.field)
			}
			if first != 0 || last != 0 {
				t.Errorf("Publish = %d, %d with its error, want 0, 0", first, last)
			}
			if got := publish(t, b, ev("a:ok", "2")); got != 2 {
				t.Errorf("next id = %d, want 2: the refused publish burned an id", got)
			}
			envs, _ := take(t, s)
			if diff := cmp.Diff([]uint64{1, 2}, bustest.IDs(envs)); diff != "" {
				t.Errorf("subscriber ids mismatch (-want +got):\n%s", diff)
			}
			if st := b.Stats(); st.Published != 2 || st.RingLen != 2 {
				t.Errorf("Published %d, RingLen %d; want 2, 2", st.Published, st.RingLen)
			}
		})
	}
}

func TestPublishDaemon(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{})
	if _, _, err := b.PublishDaemon(ev("localbus:session-opened", `{"session":"s"}`)); err != nil {
		t.Errorf("PublishDaemon(localbus:session-opened) = %v", err)
	}
	if _, _, err := b.PublishDaemon(ev("build:x", "")); err != nil {
		t.Errorf("PublishDaemon(build:x) = %v", err)
	}
	if _, _, err := b.PublishDaemon(bus.Event{}); !isInputError(err, "type") {
		t.Errorf("PublishDaemon(no type) = %v, want *InputError{Field: type}", err)
	}
	if _, _, err := b.Publish(ev("localbus:reloaded", "")); !isInputError(err, "type") {
		t.Errorf("Publish(localbus:reloaded) = %v, want *InputError{Field: type}", err)
	}
	if got := b.LastID(); got != 2 {
		t.Errorf("LastID() = %d, want 2", got)
	}
}

func TestPublishDoesNotPanicOnOddInput(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s")})
	odd := []bus.Event{
		{},
		{Type: bustest.Type("a:b"), Data: json.RawMessage{0}},
		{Type: bustest.Type("a:b"), Data: json.RawMessage("\x00")},
		{Type: bustest.Type("a:b"), Originator: strings.Repeat("\xff\x00\"", 1000)},
		{Type: bustest.Type("a:b"), Data: json.RawMessage(strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000))},
	}
	for _, e := range odd {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("Publish(%.40q) panicked: %v", e.Type, r)
				}
			}()
			b.Publish(e)
		}()
	}
}

func TestPublishAfterCloseIsErrClosed(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s")})
	publish(t, b, ev("a:b", ""))
	b.Close()
	if _, _, err := b.Publish(ev("a:b", "")); !errors.Is(err, bus.ErrClosed) {
		t.Errorf("Publish after Close = %v, want ErrClosed", err)
	}
	if _, err := b.Subscribe(context.Background(), bus.SubscribeOptions{}); !errors.Is(err, bus.ErrClosed) {
		t.Errorf("Subscribe after Close = %v, want ErrClosed", err)
	}
	if got := b.LastID(); got != 1 {
		t.Errorf("LastID() = %d, want 1", got)
	}
	b.Close() // idempotent
}

func TestStatsCounters(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s"), RingSize: 4, MaxQueued: 16, MaxQueuedBytes: 1 << 20})
	slow := subscribe(t, b, bus.SubscribeOptions{})
	take(t, slow)
	fast := subscribe(t, b, bus.SubscribeOptions{Filter: mustFilter(t, "a:*")})
	take(t, fast)

	// 12 events: slow gets a warning at 12; fast takes as it goes.
	for range 12 {
		publish(t, b, ev("a:x", ""))
		take(t, fast)
	}
	publish(t, b, ev("b:x", ""))                                   // slow only: 13 live
	publishN(t, b, "b:x", 4)                                       // slow: 14, 15, 16, then evicted
	b.Publish(ev("localbus:reloaded", ""))                         // refused: not counted anywhere
	subscribe(t, b, bus.SubscribeOptions{Cursor: ptr[uint64](14)}) // replays 15..17: 3
	subscribe(t, b, bus.SubscribeOptions{Cursor: ptr[uint64](2)})  // gap ring_evicted, replays 14..17: 4
	subscribe(t, b, bus.SubscribeOptions{Cursor: ptr[uint64](99)}) // gap epoch_reset, replays 14..17: 4

	st := b.Stats()
	want := bus.Stats{
		Session: "s", Epoch: testEpoch, LastID: 17, EarliestID: 14, RingLen: 4, RingBytes: st.RingBytes,
		Subscribers:    4, // fast and the three resumers
		Published:      17,
		Delivered:      12 + 16, // fast 12; slow 16 (the 17th evicted it)
		SlowWarnings:   1,
		EvictedQueue:   1,
		GapRingEvicted: 1,
		GapEpochReset:  1,
		Replayed:       3 + 4 + 4,
		Limits:         bus.Limits{RingSize: 4, RingMaxBytes: 64 << 20, MaxQueued: 16, MaxQueuedBytes: 1 << 20, MaxSubscribers: 64},
	}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("Stats mismatch (-want +got):\n%s", diff)
	}
	if st.RingBytes <= 0 {
		t.Errorf("RingBytes = %d, want > 0", st.RingBytes)
	}
	if got := slow.End(); got != bus.EndLagged {
		t.Errorf("slow.End() = %q, want lagged", got)
	}
}
