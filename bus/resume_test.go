package bus_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/ipc/wire/grammar"
)

// TestResumeTable pins every row of SPEC §2.3 and the exact data of
// stream:ready, stream:gap and stream:replayed (§4). The bus holds ids 1..10;
// a ring of 5 keeps 6..10, a ring of 20 keeps them all.
func TestResumeTable(t *testing.T) {
	t.Parallel()
	const (
		ready10all  = `stream:ready {cursor:%s,earliestId:1,epoch:"e0",lastId:10,maxQueued:256,types:null}`
		ready10ring = `stream:ready {cursor:%s,earliestId:6,epoch:"e0",lastId:10,maxQueued:256,types:null}`
	)
	events := func(from, to int) []string {
		var out []string
		for i := from; i <= to; i++ {
			out = append(out, "a:x#"+itoa(i))
		}
		return out
	}
	cat := func(parts ...any) []string {
		var out []string
		for _, p := range parts {
			switch p := p.(type) {
			case string:
				out = append(out, p)
			case []string:
				out = append(out, p...)
			}
		}
		return out
	}
	tests := []struct {
		name     string
		ringSize int
		opts     bus.SubscribeOptions
		want     []string // before the live event 11
	}{
		{
			name: "no cursor: ready then live only", ringSize: 20,
			want: []string{sprintf(ready10all, "10")},
		},
		{
			name: "no cursor, ignored Last-Event-ID: cursor null", ringSize: 20,
			opts: bus.SubscribeOptions{CursorIgnored: true},
			want: []string{sprintf(ready10all, "null")},
		},
		{
			name: "no cursor: an epoch alone changes nothing", ringSize: 20,
			opts: bus.SubscribeOptions{Epoch: "other"},
			want: []string{sprintf(ready10all, "10")},
		},
		{
			name: "cursor 0: whole ring then replayed", ringSize: 20,
			opts: bus.SubscribeOptions{Cursor: ptr[uint64](0)},
			want: cat(sprintf(ready10all, "0"), events(1, 10), `stream:replayed {lastReplayedEventId:10,replayedCount:10}`),
		},
		{
			name: "cursor 0 with the ignored flag still has cursor 0", ringSize: 20,
			opts: bus.SubscribeOptions{Cursor: ptr[uint64](0), CursorIgnored: true},
			want: cat(sprintf(ready10all, "0"), events(1, 10), `stream:replayed {lastReplayedEventId:10,replayedCount:10}`),
		},
		{
			name: "cursor N inside the ring: every id after N", ringSize: 20,
			opts: bus.SubscribeOptions{Cursor: ptr[uint64](7)},
			want: cat(sprintf(ready10all, "7"), events(8, 10), `stream:replayed {lastReplayedEventId:10,replayedCount:3}`),
		},
		{
			name: "cursor N, oldest is N+1: no gap", ringSize: 5,
			opts: bus.SubscribeOptions{Cursor: ptr[uint64](5)},
			want: cat(sprintf(ready10ring, "5"), events(6, 10), `stream:replayed {lastReplayedEventId:10,replayedCount:5}`),
		},
		{
			name: "cursor lastId: nothing to replay", ringSize: 20,
			opts: bus.SubscribeOptions{Cursor: ptr[uint64](10)},
			want: cat(sprintf(ready10all, "10"), `stream:replayed {lastReplayedEventId:null,replayedCount:0}`),
		},
		{
			name: "cursor N, oldest > N+1: ring_evicted then the suffix", ringSize: 5,
			opts: bus.SubscribeOptions{Cursor: ptr[uint64](3)},
			want: cat(sprintf(ready10ring, "3"),
				`stream:gap {earliestAvailableId:6,lastDeliveredId:3,lastId:10,reason:"ring_evicted"}`,
				events(6, 10), `stream:replayed {lastReplayedEventId:10,replayedCount:5}`),
		},
		{
			name: "cursor 0 with id 1 evicted: ring_evicted", ringSize: 5,
			opts: bus.SubscribeOptions{Cursor: ptr[uint64](0)},
			want: cat(sprintf(ready10ring, "0"),
				`stream:gap {earliestAvailableId:6,lastDeliveredId:0,lastId:10,reason:"ring_evicted"}`,
				events(6, 10), `stream:replayed {lastReplayedEventId:10,replayedCount:5}`),
		},
		{
			name: "cursor > lastId: epoch_reset then the whole ring", ringSize: 5,
			opts: bus.SubscribeOptions{Cursor: ptr[uint64](11)},
			want: cat(sprintf(ready10ring, "11"),
				`stream:gap {earliestAvailableId:6,lastDeliveredId:11,lastId:10,reason:"epoch_reset"}`,
				events(6, 10), `stream:replayed {lastReplayedEventId:10,replayedCount:5}`),
		},
		{
			name: "cursor 2^53-1: epoch_reset", ringSize: 20,
			opts: bus.SubscribeOptions{Cursor: ptr[uint64](grammar.MaxCursor)},
			want: cat(sprintf(ready10all, "9007199254740991"),
				`stream:gap {earliestAvailableId:1,lastDeliveredId:9007199254740991,lastId:10,reason:"epoch_reset"}`,
				events(1, 10), `stream:replayed {lastReplayedEventId:10,replayedCount:10}`),
		},
		{
			name: "epoch differs: epoch_reset then the whole ring", ringSize: 20,
			opts: bus.SubscribeOptions{Cursor: ptr[uint64](7), Epoch: "other"},
			want: cat(sprintf(ready10all, "7"),
				`stream:gap {earliestAvailableId:1,lastDeliveredId:7,lastId:10,reason:"epoch_reset"}`,
				events(1, 10), `stream:replayed {lastReplayedEventId:10,replayedCount:10}`),
		},
		{
			name: "same epoch: no gap", ringSize: 20,
			opts: bus.SubscribeOptions{Cursor: ptr[uint64](7), Epoch: testEpoch},
			want: cat(sprintf(ready10all, "7"), events(8, 10), `stream:replayed {lastReplayedEventId:10,replayedCount:3}`),
		},
		{
			name: "epoch reset is checked before ring evicted", ringSize: 5,
			opts: bus.SubscribeOptions{Cursor: ptr[uint64](2), Epoch: "other"},
			want: cat(sprintf(ready10ring, "2"),
				`stream:gap {earliestAvailableId:6,lastDeliveredId:2,lastId:10,reason:"epoch_reset"}`,
				events(6, 10), `stream:replayed {lastReplayedEventId:10,replayedCount:5}`),
		},
		{
			name: "filter applies to replay", ringSize: 20,
			opts: bus.SubscribeOptions{Cursor: ptr[uint64](0), Filter: mustFilter(t, "b:*")},
			want: []string{
				`stream:ready {cursor:0,earliestId:1,epoch:"e0",lastId:10,maxQueued:256,types:["b:*"]}`,
				`stream:replayed {lastReplayedEventId:null,replayedCount:0}`,
			},
		},
		{
			name: "maxQueued shows in ready", ringSize: 20,
			opts: bus.SubscribeOptions{MaxQueued: 16},
			want: []string{`stream:ready {cursor:10,earliestId:1,epoch:"e0",lastId:10,maxQueued:16,types:null}`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newBus(t, bus.Options{Session: bustest.SessionID("s"), RingSize: tt.ringSize})
			publishN(t, b, "a:x", 10)
			s := subscribe(t, b, tt.opts)
			publish(t, b, ev("a:x", "")) // live: after everything queued at Subscribe
			envs, _ := take(t, s)
			want := tt.want
			if tt.opts.Filter == nil {
				want = append(append([]string(nil), want...), "a:x#11")
			}
			if diff := cmp.Diff(want, summary(t, envs)); diff != "" {
				t.Errorf("frames mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestResumeEmptyRing covers a bus whose ring is empty: before any event,
// and a store that continues an id sequence but retains nothing (a journal
// that lost its tail). earliestId and earliestAvailableId are then null.
func TestResumeEmptyRing(t *testing.T) {
	t.Parallel()
	restored := func() bus.Store {
		r := bus.NewRing(10, 1<<20)
		r.Restore(10)
		return r
	}
	tests := []struct {
		name  string
		store func() bus.Store
		opts  bus.SubscribeOptions
		want  []string
	}{
		{
			name: "new bus, no cursor",
			want: []string{`stream:ready {cursor:0,earliestId:null,epoch:"e0",lastId:0,maxQueued:256,types:null}`},
		},
		{
			name: "new bus, cursor 0",
			opts: bus.SubscribeOptions{Cursor: ptr[uint64](0)},
			want: []string{
				`stream:ready {cursor:0,earliestId:null,epoch:"e0",lastId:0,maxQueued:256,types:null}`,
				`stream:replayed {lastReplayedEventId:null,replayedCount:0}`,
			},
		},
		{
			name: "new bus, cursor 5: epoch_reset",
			opts: bus.SubscribeOptions{Cursor: ptr[uint64](5)},
			want: []string{
				`stream:ready {cursor:5,earliestId:null,epoch:"e0",lastId:0,maxQueued:256,types:null}`,
				`stream:gap {earliestAvailableId:null,lastDeliveredId:5,lastId:0,reason:"epoch_reset"}`,
				`stream:replayed {lastReplayedEventId:null,replayedCount:0}`,
			},
		},
		{
			name:  "restored store, cursor lastId: no gap",
			store: restored,
			opts:  bus.SubscribeOptions{Cursor: ptr[uint64](10)},
			want: []string{
				`stream:ready {cursor:10,earliestId:null,epoch:"e0",lastId:10,maxQueued:256,types:null}`,
				`stream:replayed {lastReplayedEventId:null,replayedCount:0}`,
			},
		},
		{
			name:  "restored store, cursor below lastId: ring_evicted",
			store: restored,
			opts:  bus.SubscribeOptions{Cursor: ptr[uint64](4)},
			want: []string{
				`stream:ready {cursor:4,earliestId:null,epoch:"e0",lastId:10,maxQueued:256,types:null}`,
				`stream:gap {earliestAvailableId:null,lastDeliveredId:4,lastId:10,reason:"ring_evicted"}`,
				`stream:replayed {lastReplayedEventId:null,replayedCount:0}`,
			},
		},
		{
			name:  "restored store, cursor 0: ring_evicted",
			store: restored,
			opts:  bus.SubscribeOptions{Cursor: ptr[uint64](0)},
			want: []string{
				`stream:ready {cursor:0,earliestId:null,epoch:"e0",lastId:10,maxQueued:256,types:null}`,
				`stream:gap {earliestAvailableId:null,lastDeliveredId:0,lastId:10,reason:"ring_evicted"}`,
				`stream:replayed {lastReplayedEventId:null,replayedCount:0}`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := bus.Options{Session: bustest.SessionID("s")}
			if tt.store != nil {
				opts.Store = tt.store()
			}
			b := newBus(t, opts)
			s := subscribe(t, b, tt.opts)
			envs, _ := take(t, s)
			if diff := cmp.Diff(tt.want, summary(t, envs)); diff != "" {
				t.Errorf("frames mismatch (-want +got):\n%s", diff)
			}
			next := publish(t, b, ev("a:x", ""))
			if want := b.Stats().LastID; next != want {
				t.Errorf("next id = %d, want %d", next, want)
			}
			envs, _ = take(t, s)
			if diff := cmp.Diff([]string{"a:x#" + itoa(int(next))}, summary(t, envs)); diff != "" {
				t.Errorf("live mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRestoredStoreContinuesIDs(t *testing.T) {
	t.Parallel()
	r := bus.NewRing(10, 1<<20)
	r.Restore(41)
	b := newBus(t, bus.Options{Session: bustest.SessionID("s"), Store: r})
	if got := b.LastID(); got != 41 {
		t.Errorf("LastID() = %d, want 41", got)
	}
	if got := publish(t, b, ev("a:b", "")); got != 42 {
		t.Errorf("first id = %d, want 42", got)
	}
}

func TestSubscribeRejectsBadOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		opts  bus.SubscribeOptions
		field string
	}{
		{"maxQueued below 16", bus.SubscribeOptions{MaxQueued: 15}, "maxQueued"},
		{"maxQueued above 2048", bus.SubscribeOptions{MaxQueued: 2049}, "maxQueued"},
		{"negative maxQueued", bus.SubscribeOptions{MaxQueued: -1}, "maxQueued"},
		{"cursor 2^53", bus.SubscribeOptions{Cursor: ptr[uint64](grammar.MaxCursor + 1)}, "cursor"},
		{"family stream", bus.SubscribeOptions{Family: bustest.Family(t, "stream")}, "family"},
		{"filter outside family", bus.SubscribeOptions{Family: bustest.Family(t, "build"), Filter: mustFilter(t, "build:x,test:y")}, "types"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newBus(t, bus.Options{Session: bustest.SessionID("s")})
			other := subscribe(t, b, bus.SubscribeOptions{})
			take(t, other)
			s, err := b.Subscribe(context.Background(), tt.opts)
			if !isInputError(err, tt.field) {
				t.Errorf("Subscribe(%+v) = %v, want *InputError{Field: %s}", tt.opts, err, tt.field)
			}
			if s != nil {
				t.Error("Subscribe returned a subscription with its error")
				s.Close()
			}
			if st := b.Stats(); st.Subscribers != 1 {
				t.Errorf("Subscribers = %d, want 1", st.Subscribers)
			}
			publish(t, b, ev("a:b", ""))
			envs, _ := take(t, other)
			if diff := cmp.Diff([]string{"a:b#1"}, summary(t, envs)); diff != "" {
				t.Errorf("the other subscriber was disturbed (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSubscribeMaxQueuedBounds(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s"), MaxQueued: 100})
	for _, tt := range []struct{ ask, want int }{{0, 100}, {16, 16}, {2048, 2048}} {
		s := subscribe(t, b, bus.SubscribeOptions{MaxQueued: tt.ask})
		if got := s.MaxQueued(); got != tt.want {
			t.Errorf("MaxQueued %d: MaxQueued() = %d, want %d", tt.ask, got, tt.want)
		}
	}
}

func TestSubscribeWithFamily(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{}) // the global bus
	publish(t, b, bus.Event{Type: bustest.Type("build:a"), Session: bustest.SessionID("x"), Seq: 1, Time: fixedTime})
	publish(t, b, bus.Event{Type: bustest.Type("test:a"), Session: bustest.SessionID("x"), Seq: 2, Time: fixedTime})
	if _, _, err := b.PublishDaemon(ev("localbus:session-opened", "")); err != nil {
		t.Fatal(err)
	}
	publish(t, b, bus.Event{Type: bustest.Type("build:b"), Session: bustest.SessionID("y"), Seq: 1, Time: fixedTime})

	tests := []struct {
		name string
		opts bus.SubscribeOptions
		want []string
	}{
		{
			name: "family build, replay and live",
			opts: bus.SubscribeOptions{Family: bustest.Family(t, "build"), Cursor: ptr[uint64](0)},
			want: []string{
				`stream:ready {cursor:0,earliestId:1,epoch:"e0",lastId:4,maxQueued:256,types:["build:*"]}`,
				"build:a#1", "build:b#4",
				`stream:replayed {lastReplayedEventId:4,replayedCount:2}`,
				"build:c#6",
			},
		},
		{
			name: "family build narrowed by a filter",
			opts: bus.SubscribeOptions{Family: bustest.Family(t, "build"), Filter: mustFilter(t, "build:b,build:c"), Cursor: ptr[uint64](0)},
			want: []string{
				`stream:ready {cursor:0,earliestId:1,epoch:"e0",lastId:4,maxQueued:256,types:["build:b","build:c"]}`,
				"build:b#4",
				`stream:replayed {lastReplayedEventId:4,replayedCount:1}`,
				"build:c#6",
			},
		},
		{
			name: "family localbus carries the daemon's events",
			opts: bus.SubscribeOptions{Family: bustest.Family(t, "localbus"), Cursor: ptr[uint64](0)},
			want: []string{
				`stream:ready {cursor:0,earliestId:1,epoch:"e0",lastId:4,maxQueued:256,types:["localbus:*"]}`,
				"localbus:session-opened#3",
				`stream:replayed {lastReplayedEventId:3,replayedCount:1}`,
			},
		},
		{
			name: "gap announced on a family stream counts no foreign event",
			opts: bus.SubscribeOptions{Family: bustest.Family(t, "test"), Cursor: ptr[uint64](9)},
			want: []string{
				`stream:ready {cursor:9,earliestId:1,epoch:"e0",lastId:4,maxQueued:256,types:["test:*"]}`,
				`stream:gap {earliestAvailableId:1,lastDeliveredId:9,lastId:4,reason:"epoch_reset"}`,
				"test:a#2",
				`stream:replayed {lastReplayedEventId:2,replayedCount:1}`,
				"test:b#5",
			},
		},
	}
	for _, tt := range tests {
		s := subscribe(t, b, tt.opts)
		t.Cleanup(s.Close)
		defer func(name string, want []string) {
			envs, _ := take(t, s)
			if diff := cmp.Diff(want, summary(t, envs)); diff != "" {
				t.Errorf("%s: frames mismatch (-want +got):\n%s", name, diff)
			}
			if got := s.Family(); got != tt.opts.Family {
				t.Errorf("%s: Family() = %q, want %q", name, got, tt.opts.Family)
			}
		}(tt.name, tt.want)
	}
	publish(t, b, bus.Event{Type: bustest.Type("test:b"), Session: bustest.SessionID("x"), Seq: 3, Time: fixedTime})
	publish(t, b, bus.Event{Type: bustest.Type("build:c"), Session: bustest.SessionID("x"), Seq: 4, Time: fixedTime})
}

func itoa(i int) string { return sprintf("%d", i) }
