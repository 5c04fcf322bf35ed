package bus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
)

// drainEvery is how many events a benchmark publishes between drains of
// its subscribers: below 75% of the default maxQueued (256), so no
// subscriber is warned or evicted and every frame takes the buffered path.
const drainEvery = 64

// fanout is a bus with n subscribers that the caller drains with drain.
type fanout struct {
	b    *bus.Bus
	subs []*bus.Subscription
	dst  []*bus.Frame
}

func newFanout(tb testing.TB, n int) *fanout {
	tb.Helper()
	b, err := bus.New(bus.Options{Session: bustest.SessionID("s"), MaxSubscribers: max(n, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(b.Close)
	f := &fanout{b: b}
	for range n {
		s, err := b.Subscribe(context.Background(), bus.SubscribeOptions{})
		if err != nil {
			tb.Fatal(err)
		}
		f.subs = append(f.subs, s)
	}
	f.drain()
	return f
}

// drain empties every subscriber's queue, as connection writers would.
func (f *fanout) drain() {
	for _, s := range f.subs {
		f.dst, _ = s.Take(f.dst[:0])
	}
	clear(f.dst)
}

var benchEvent = bus.Event{Type: bustest.Type("build:step"), Data: json.RawMessage(`{"n":3,"msg":"compiling"}`)}

// BenchmarkPublish publishes one event to n subscribers that a writer drains
// every drainEvery events (the drain is part of the measured time).
// allocs/op must not grow with n: the event is encoded once and shared.
func BenchmarkPublish(b *testing.B) {
	for _, n := range []int{0, 1, 64, 1024} {
		b.Run(fmt.Sprintf("subs=%d", n), func(b *testing.B) {
			f := newFanout(b, n)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, _, err := f.b.Publish(benchEvent); err != nil {
					b.Fatal(err)
				}
				if i++; i%drainEvery == 0 {
					f.drain()
				}
			}
			b.StopTimer()
			if st := f.b.Stats(); st.Subscribers != n || st.EvictedQueue+st.EvictedBytes+st.SlowWarnings != 0 {
				b.Fatalf("subscribers %d of %d, evictions %d, warnings %d", st.Subscribers, n, st.EvictedQueue+st.EvictedBytes, st.SlowWarnings)
			}
		})
	}
}

// BenchmarkPublishParallel publishes from every P at once, with no
// subscribers, to show the cost of contention on the bus lock.
func BenchmarkPublishParallel(b *testing.B) {
	f := newFanout(b, 0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, _, err := f.b.Publish(benchEvent); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkReplay subscribes with cursor 0 to a bus whose ring holds 8000
// events, takes the whole replay and closes.
func BenchmarkReplay(b *testing.B) {
	bb, err := bus.New(bus.Options{Session: bustest.SessionID("s")})
	if err != nil {
		b.Fatal(err)
	}
	defer bb.Close()
	for range bus.DefaultRingSize {
		if _, _, err := bb.Publish(benchEvent); err != nil {
			b.Fatal(err)
		}
	}
	zero := uint64(0)
	var dst []*bus.Frame
	b.ReportAllocs()
	for b.Loop() {
		s, err := bb.Subscribe(context.Background(), bus.SubscribeOptions{Cursor: &zero})
		if err != nil {
			b.Fatal(err)
		}
		dst, _ = s.Take(dst[:0])
		if len(dst) != bus.DefaultRingSize+2 {
			b.Fatalf("took %d frames, want %d", len(dst), bus.DefaultRingSize+2)
		}
		s.Close()
	}
}

// BenchmarkSubscribeCancel is subscriber churn: subscribe, take
// stream:ready, leave; with Close, and with a context that is cancelled.
func BenchmarkSubscribeCancel(b *testing.B) {
	bb, err := bus.New(bus.Options{Session: bustest.SessionID("s")})
	if err != nil {
		b.Fatal(err)
	}
	defer bb.Close()
	var dst []*bus.Frame
	b.Run("close", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s, err := bb.Subscribe(context.Background(), bus.SubscribeOptions{})
			if err != nil {
				b.Fatal(err)
			}
			dst, _ = s.Take(dst[:0])
			s.Close()
		}
	})
	b.Run("context", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, cancel := context.WithCancel(context.Background())
			s, err := bb.Subscribe(ctx, bus.SubscribeOptions{})
			if err != nil {
				b.Fatal(err)
			}
			dst, _ = s.Take(dst[:0])
			cancel()
			s.Close() // so the next Subscribe does not race the AfterFunc for a slot
		}
	})
}

// BenchmarkRingScanNewest locates the newest frame of a full default ring:
// O(1), whatever the ring's size.
func BenchmarkRingScanNewest(b *testing.B) {
	r := bus.NewRing(bus.DefaultRingSize, 1<<40)
	for id := uint64(1); id <= bus.DefaultRingSize; id++ {
		r.Append([]*bus.Frame{frame(b, id, 0)})
	}
	last := r.LastID()
	for b.Loop() {
		r.Scan(last, func(*bus.Frame) bool { return true })
	}
}

// TestPublishAllocsDoNotGrowWithSubscribers pins what BenchmarkPublish
// shows: the allocations of a publish do not depend on the number of
// subscribers.
func TestPublishAllocsDoNotGrowWithSubscribers(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not exact under the race detector")
	}
	allocs := func(n int) float64 {
		f := newFanout(t, n)
		i := 0
		return testing.AllocsPerRun(2000, func() {
			f.b.Publish(benchEvent)
			if i++; i%drainEvery == 0 {
				f.drain()
			}
		})
	}
	one, many := allocs(1), allocs(256)
	if many > one {
		t.Errorf("allocs per publish: %v with 256 subscribers, %v with 1; want no growth", many, one)
	}
	if one > 3 {
		t.Errorf("allocs per publish with 1 subscriber = %v, want at most 3 (the frame and its bytes)", one)
	}
}
