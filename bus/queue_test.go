package bus_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
)

// base is the id after which queue tests publish, so that every event id
// has three digits and every frame of one event shape has one size.
const base = 100_000

// queueBus returns a bus of session "s" whose ids start at base+1.
func queueBus(tb testing.TB, maxQueuedBytes int64) *bus.Bus {
	tb.Helper()
	r := bus.NewRing(1000, 1<<30)
	r.Restore(base)
	return newBus(tb, bus.Options{Session: bustest.SessionID("s"), Store: r, MaxQueuedBytes: maxQueuedBytes})
}

// eventSize is the encoded size of e published on a queue bus.
func eventSize(tb testing.TB, e bus.Event) int64 {
	tb.Helper()
	b := queueBus(tb, 0)
	s := subscribe(tb, b, bus.SubscribeOptions{})
	s.Take(nil)
	publish(tb, b, e)
	frames, _ := s.Take(nil)
	return int64(frames[0].Size())
}

// idle subscribes and takes stream:ready, so the next live frames are
// buffered and counted (the writer is busy, not waiting).
func idle(tb testing.TB, b *bus.Bus, opts bus.SubscribeOptions) *bus.Subscription {
	tb.Helper()
	s := subscribe(tb, b, opts)
	if frames, _ := s.Take(nil); len(frames) == 0 {
		tb.Fatal("no stream:ready")
	}
	return s
}

func stats(s *bus.Subscription) bus.SubscriptionStats { return s.Stats() }

// small is the event the queue tests publish.
var small = ev("a:b", "")

// publishSmall publishes n small events.
func publishSmall(tb testing.TB, b *bus.Bus, n int) {
	tb.Helper()
	for range n {
		publish(tb, b, small)
	}
}

func TestLiveQueueCountLimit(t *testing.T) {
	t.Parallel()
	b := queueBus(t, 1<<20)
	S := eventSize(t, small)
	s := idle(t, b, bus.SubscribeOptions{MaxQueued: 16})
	for i := 1; i <= 16; i++ {
		publish(t, b, small)
		if got, want := stats(s), (bus.SubscriptionStats{Queued: i + b2i(i >= 12), Live: i, LiveBytes: int64(i) * S, Warned: i >= 12}); got != want {
			t.Fatalf("after %d events: Stats() = %+v, want %+v", i, got, want)
		}
	}
	publish(t, b, small) // the 17th does not fit
	publish(t, b, small) // nor does anything after
	envs, ended := take(t, s)
	if !ended || s.End() != bus.EndLagged {
		t.Errorf("ended %v, End() %q; want true, lagged", ended, s.End())
	}
	var want []string
	for i := 1; i <= 16; i++ {
		want = append(want, sprintf("a:b#%d", base+i))
		if i == 12 {
			want = append(want, sprintf(`stream:slow {maxQueued:16,maxQueuedBytes:1048576,queued:12,queuedBytes:%d}`, 12*S))
		}
	}
	want = append(want, sprintf(`stream:lagged {maxQueued:16,maxQueuedBytes:1048576,queueSize:16,queuedBytes:%d,reason:"queue_overflow"}`, 16*S))
	if diff := cmp.Diff(want, summary(t, envs)); diff != "" {
		t.Errorf("frames mismatch (-want +got):\n%s", diff)
	}
	if st := b.Stats(); st.Subscribers != 0 || st.EvictedQueue != 1 || st.EvictedBytes != 0 {
		t.Errorf("bus Stats: Subscribers %d, EvictedQueue %d, EvictedBytes %d; want 0, 1, 0", st.Subscribers, st.EvictedQueue, st.EvictedBytes)
	}
	if envs, ended := take(t, s); len(envs) != 0 || !ended {
		t.Errorf("Take after the end = %v, %v; want nothing, ended", bustest.Types(envs), ended)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestLiveQueueBytesLimit(t *testing.T) {
	t.Parallel()
	S := eventSize(t, small)
	maxBytes := 10*S + S/2
	b := queueBus(t, maxBytes)
	s := idle(t, b, bus.SubscribeOptions{MaxQueued: 2048})
	publishSmall(t, b, 10)
	if got := stats(s); got.Live != 10 || got.LiveBytes != 10*S || got.End != bus.EndNone {
		t.Fatalf("after 10 events: Stats() = %+v, want 10 live, %d bytes", got, 10*S)
	}
	publish(t, b, small)
	envs, ended := take(t, s)
	if !ended {
		t.Error("stream did not end")
	}
	var want []string
	for i := 1; i <= 10; i++ {
		want = append(want, sprintf("a:b#%d", base+i))
		if i == 8 { // 8S >= 75% of 10.5S
			want = append(want, sprintf(`stream:slow {maxQueued:2048,maxQueuedBytes:%d,queued:8,queuedBytes:%d}`, maxBytes, 8*S))
		}
	}
	want = append(want, sprintf(`stream:lagged {eventBytes:%d,maxQueued:2048,maxQueuedBytes:%d,queueSize:10,queuedBytes:%d,reason:"queue_bytes_overflow"}`, S, maxBytes, 10*S))
	if diff := cmp.Diff(want, summary(t, envs)); diff != "" {
		t.Errorf("frames mismatch (-want +got):\n%s", diff)
	}
	lagged := bustest.Data[bus.LaggedData](t, envs[len(envs)-1])
	if lagged.EventBytes == nil || *lagged.EventBytes != S {
		t.Errorf("eventBytes = %v, want %d", lagged.EventBytes, S)
	}
	if st := b.Stats(); st.EvictedBytes != 1 || st.EvictedQueue != 0 {
		t.Errorf("EvictedBytes %d, EvictedQueue %d; want 1, 0", st.EvictedBytes, st.EvictedQueue)
	}
}

func TestCountOverflowHasNoEventBytes(t *testing.T) {
	t.Parallel()
	b := queueBus(t, 1<<20)
	s := idle(t, b, bus.SubscribeOptions{MaxQueued: 16})
	publishSmall(t, b, 17)
	frames, _ := s.Take(nil)
	last := frames[len(frames)-1]
	if last.Type != bus.TypeLagged || strings.Contains(string(last.JSON()), "eventBytes") {
		t.Errorf("last frame %s, want stream:lagged without eventBytes", last.JSON())
	}
}

func TestForcedFramesBypassLimits(t *testing.T) {
	t.Parallel()
	S := eventSize(t, small)
	b := queueBus(t, 2*S)
	publishSmall(t, b, 100) // far over both limits when replayed
	s := subscribe(t, b, bus.SubscribeOptions{MaxQueued: 16, Cursor: ptr[uint64](base)})
	if got, want := stats(s), (bus.SubscriptionStats{Queued: 102}); got != want {
		t.Fatalf("after replay: Stats() = %+v, want %+v (ready, 100 events, replayed; none live)", got, want)
	}
	publish(t, b, small) // live 1: fits
	publish(t, b, small) // live 2: 2S fits, reaches 75%: stream:slow (forced)
	if got, want := stats(s), (bus.SubscriptionStats{Queued: 105, Live: 2, LiveBytes: 2 * S, Warned: true}); got != want {
		t.Fatalf("after 2 live: Stats() = %+v, want %+v", got, want)
	}
	publish(t, b, small) // live 3: over the bytes limit
	envs, ended := take(t, s)
	if !ended || len(envs) != 106 {
		t.Fatalf("got %d frames, ended %v; want 106, true", len(envs), ended)
	}
	got := summary(t, envs[101:])
	want := []string{
		sprintf("a:b#%d", base+101),
		sprintf("a:b#%d", base+102),
		sprintf(`stream:slow {maxQueued:16,maxQueuedBytes:%d,queued:2,queuedBytes:%d}`, 2*S, 2*S),
		sprintf(`stream:lagged {eventBytes:%d,maxQueued:16,maxQueuedBytes:%d,queueSize:2,queuedBytes:%d,reason:"queue_bytes_overflow"}`, S, 2*S, 2*S),
	}
	if diff := cmp.Diff(want, got[1:]); diff != "" {
		t.Errorf("frames after replay mismatch (-want +got):\n%s", diff)
	}
	if got[0] != `stream:replayed {lastReplayedEventId:100100,replayedCount:100}` {
		t.Errorf("frame 101 = %s, want stream:replayed", got[0])
	}
}

func TestHandedOffFrameIsNotCounted(t *testing.T) {
	t.Parallel()
	S := eventSize(t, small)
	b := queueBus(t, 1<<20)
	s := idle(t, b, bus.SubscribeOptions{MaxQueued: 16})
	if frames, ended := s.Take(nil); len(frames) != 0 || ended {
		t.Fatalf("Take = %d frames, %v; want none: the writer now waits", len(frames), ended)
	}
	publish(t, b, small)
	if got, want := stats(s), (bus.SubscriptionStats{Queued: 1}); got != want {
		t.Errorf("after the hand-off: Stats() = %+v, want %+v", got, want)
	}
	publish(t, b, small)
	if got, want := stats(s), (bus.SubscriptionStats{Queued: 2, Live: 1, LiveBytes: S}); got != want {
		t.Errorf("after a second event: Stats() = %+v, want %+v", got, want)
	}
	publishSmall(t, b, 15) // 16 counted: full, not over
	if got := stats(s); got.End != bus.EndNone || got.Live != 16 {
		t.Fatalf("with 16 counted behind the hand-off: Stats() = %+v, want open, 16 live", got)
	}
	publish(t, b, small)
	envs, ended := take(t, s)
	if !ended || envs[len(envs)-1].Type != bus.TypeLagged {
		t.Fatalf("got %v, want the stream to end with stream:lagged", bustest.Types(envs))
	}
	lagged := bustest.Data[bus.LaggedData](t, envs[len(envs)-1])
	if lagged.QueueSize != 16 || lagged.QueuedBytes != 16*S {
		t.Errorf("lagged = %+v, want queueSize 16, queuedBytes %d: the handed-off frame counted", lagged, 16*S)
	}
	if ids := bustest.IDs(envs); len(ids) != 17 {
		t.Errorf("got %d events before lagged, want 17", len(ids))
	}
}

func TestTakeThatReturnsFramesDoesNotHandOff(t *testing.T) {
	t.Parallel()
	S := eventSize(t, small)
	b := queueBus(t, 1<<20)
	s := idle(t, b, bus.SubscribeOptions{})
	publish(t, b, small)
	take(t, s) // returns one frame: the writer is busy writing it
	publish(t, b, small)
	if got, want := stats(s), (bus.SubscriptionStats{Queued: 1, Live: 1, LiveBytes: S}); got != want {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}
}

func TestOneOversizedFrame(t *testing.T) {
	t.Parallel()
	big := ev("a:big", `"`+strings.Repeat("x", 1000)+`"`)
	B, S := eventSize(t, big), eventSize(t, small)
	maxBytes := S * 3 // a big frame alone is over the limit
	if B <= maxBytes {
		t.Fatalf("big frame %d bytes, want more than %d", B, maxBytes)
	}
	t.Run("accepted when the live queue is empty", func(t *testing.T) {
		t.Parallel()
		b := queueBus(t, maxBytes)
		s := idle(t, b, bus.SubscribeOptions{})
		publish(t, b, big)
		if got, want := stats(s), (bus.SubscriptionStats{Queued: 2, Live: 1, LiveBytes: B, Warned: true}); got != want {
			t.Fatalf("Stats() = %+v, want %+v (the big frame and stream:slow)", got, want)
		}
		publish(t, b, small) // a second live frame behind it evicts
		envs, ended := take(t, s)
		want := []string{
			sprintf("a:big#%d", base+1),
			sprintf(`stream:slow {maxQueued:256,maxQueuedBytes:%d,queued:1,queuedBytes:%d}`, maxBytes, B),
			sprintf(`stream:lagged {eventBytes:%d,maxQueued:256,maxQueuedBytes:%d,queueSize:1,queuedBytes:%d,reason:"queue_bytes_overflow"}`, S, maxBytes, B),
		}
		if diff := cmp.Diff(want, summary(t, envs)); diff != "" || !ended {
			t.Errorf("ended %v, frames mismatch (-want +got):\n%s", ended, diff)
		}
	})
	t.Run("each one accepted when taken in time", func(t *testing.T) {
		t.Parallel()
		b := queueBus(t, maxBytes)
		s := idle(t, b, bus.SubscribeOptions{})
		for i := range 5 {
			publish(t, b, big)
			envs, ended := take(t, s)
			if ended || len(bustest.IDs(envs)) != 1 {
				t.Fatalf("big frame %d: got %v, ended %v", i, bustest.Types(envs), ended)
			}
		}
	})
	t.Run("refused behind a live frame", func(t *testing.T) {
		t.Parallel()
		b := queueBus(t, maxBytes)
		s := idle(t, b, bus.SubscribeOptions{})
		publish(t, b, small)
		publish(t, b, big)
		envs, ended := take(t, s)
		want := []string{
			sprintf("a:b#%d", base+1),
			sprintf(`stream:lagged {eventBytes:%d,maxQueued:256,maxQueuedBytes:%d,queueSize:1,queuedBytes:%d,reason:"queue_bytes_overflow"}`, B, maxBytes, S),
		}
		if diff := cmp.Diff(want, summary(t, envs)); diff != "" || !ended {
			t.Errorf("ended %v, frames mismatch (-want +got):\n%s", ended, diff)
		}
	})
	t.Run("handed off, then one more accepted", func(t *testing.T) {
		t.Parallel()
		b := queueBus(t, maxBytes)
		s := idle(t, b, bus.SubscribeOptions{})
		s.Take(nil) // waiting
		publish(t, b, big)
		publish(t, b, big) // the live queue is still empty: accepted
		if got, want := stats(s), (bus.SubscriptionStats{Queued: 3, Live: 1, LiveBytes: B, Warned: true}); got != want {
			t.Errorf("Stats() = %+v, want %+v", got, want)
		}
	})
}

func TestSlowWarningOncePerEpisode(t *testing.T) {
	t.Parallel()
	b := queueBus(t, 1<<20)
	s := idle(t, b, bus.SubscribeOptions{MaxQueued: 16})
	count := func(envs []bus.Envelope) (n int) {
		for _, e := range envs {
			if e.Type == bus.TypeSlow {
				n++
			}
		}
		return n
	}
	publishSmall(t, b, 15) // past 75% (12) and on: one warning
	envs, _ := take(t, s)
	if n := count(envs); n != 1 {
		t.Errorf("first episode: %d stream:slow, want 1", n)
	}
	if stats(s).Warned {
		t.Error("still warned after the queue was drained to 0")
	}
	publishSmall(t, b, 11) // below 75%: no warning
	envs, _ = take(t, s)
	if n := count(envs); n != 0 {
		t.Errorf("below 75%%: %d stream:slow, want 0", n)
	}
	publishSmall(t, b, 12) // a new episode
	envs, _ = take(t, s)
	if n := count(envs); n != 1 {
		t.Errorf("second episode: %d stream:slow, want 1", n)
	}
	if got := b.Stats().SlowWarnings; got != 2 {
		t.Errorf("SlowWarnings = %d, want 2", got)
	}
}

func TestSlowWarningThresholds(t *testing.T) {
	t.Parallel()
	S := eventSize(t, small)
	tests := []struct {
		name      string
		maxQueued int
		maxBytes  int64
		warnAt    int // live frames when stream:slow comes
	}{
		{"count 16", 16, 1 << 20, 12},
		{"count 17 rounds up", 17, 1 << 20, 13},
		{"count 2048", 2048, 1 << 30, 1536},
		{"bytes first", 16, 4 * S, 3},
		{"bytes just under 4 frames", 2048, 4*S + 1, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := queueBus(t, tt.maxBytes)
			s := idle(t, b, bus.SubscribeOptions{MaxQueued: tt.maxQueued})
			for i := 1; i <= tt.warnAt; i++ {
				publish(t, b, small)
				if got := stats(s).Warned; got != (i == tt.warnAt) {
					t.Fatalf("after %d live frames: Warned = %v, want %v", i, got, i == tt.warnAt)
				}
			}
			envs, _ := take(t, s)
			last := envs[len(envs)-1]
			if last.Type != bus.TypeSlow {
				t.Fatalf("last frame %s, want stream:slow", last.Type)
			}
			got := bustest.Data[bus.SlowData](t, last)
			want := bus.SlowData{Queued: tt.warnAt, MaxQueued: tt.maxQueued, QueuedBytes: int64(tt.warnAt) * S, MaxQueuedBytes: tt.maxBytes}
			if got != want {
				t.Errorf("slow data = %+v, want %+v", got, want)
			}
		})
	}
}

func TestEvictedSubscriberRecoversFromRing(t *testing.T) {
	t.Parallel()
	b := queueBus(t, 1<<20)
	s := idle(t, b, bus.SubscribeOptions{MaxQueued: 16})
	publishSmall(t, b, 40)
	envs, ended := take(t, s)
	if !ended || s.End() != bus.EndLagged {
		t.Fatalf("not evicted: ended %v, End %q", ended, s.End())
	}
	ids := bustest.IDs(envs)
	last := ids[len(ids)-1]
	r := subscribe(t, b, bus.SubscribeOptions{Cursor: &last, MaxQueued: 16})
	envs, _ = take(t, r)
	var want []string
	want = append(want, sprintf(`stream:ready {cursor:%d,earliestId:%d,epoch:"e0",lastId:%d,maxQueued:16,types:null}`, last, base+1, base+40))
	for id := last + 1; id <= base+40; id++ {
		want = append(want, sprintf("a:b#%d", id))
	}
	want = append(want, sprintf(`stream:replayed {lastReplayedEventId:%d,replayedCount:%d}`, base+40, base+40-last))
	if diff := cmp.Diff(want, summary(t, envs)); diff != "" {
		t.Errorf("resume after eviction mismatch (-want +got):\n%s", diff)
	}
}

func TestEvictionDoesNotDisturbOthers(t *testing.T) {
	t.Parallel()
	b := queueBus(t, 1<<20)
	slow := idle(t, b, bus.SubscribeOptions{MaxQueued: 16})
	fast := idle(t, b, bus.SubscribeOptions{MaxQueued: 16})
	var got []uint64
	for range 100 {
		publish(t, b, small)
		envs, _ := take(t, fast)
		got = append(got, bustest.IDs(envs)...)
	}
	if len(got) != 100 || got[0] != base+1 || got[99] != base+100 {
		t.Errorf("fast subscriber got %d events (%v...), want all 100", len(got), got[:min(3, len(got))])
	}
	if slow.End() != bus.EndLagged || fast.End() != bus.EndNone {
		t.Errorf("End: slow %q, fast %q; want lagged, open", slow.End(), fast.End())
	}
}

func TestPublishNeverBlocksOnAReader(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s"), RingSize: 100})
	for range 10 {
		subscribe(t, b, bus.SubscribeOptions{}) // never read
	}
	publishN(t, b, "a:b", 10_000)
	if st := b.Stats(); st.Subscribers != 0 || st.EvictedQueue != 10 {
		t.Errorf("Subscribers %d, EvictedQueue %d; want 0, 10", st.Subscribers, st.EvictedQueue)
	}
}

func TestSubscribeRegistersSynchronously(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s")})
	s := subscribe(t, b, bus.SubscribeOptions{})
	publish(t, b, small)
	select {
	case <-s.Ready():
	default:
		t.Fatal("Ready() has no value after Subscribe and Publish")
	}
	envs, _ := take(t, s)
	if diff := cmp.Diff([]string{bus.TypeReady, "a:b"}, bustest.Types(envs)); diff != "" {
		t.Errorf("frames mismatch (-want +got):\n%s", diff)
	}
}

func TestCloseSubscriptionDropsQueuedFrames(t *testing.T) {
	t.Parallel()
	b := queueBus(t, 1<<20)
	s := idle(t, b, bus.SubscribeOptions{})
	other := idle(t, b, bus.SubscribeOptions{})
	publishSmall(t, b, 3)
	s.Close()
	if got, want := stats(s), (bus.SubscriptionStats{End: bus.EndCancelled}); got != want {
		t.Errorf("after Close: Stats() = %+v, want %+v", got, want)
	}
	frames, ended := s.Take(nil)
	if len(frames) != 0 || !ended {
		t.Errorf("Take after Close = %d frames, %v; want none, ended", len(frames), ended)
	}
	select {
	case <-s.Ready():
	default:
		t.Error("Close did not signal Ready")
	}
	s.Close() // idempotent
	if st := b.Stats(); st.Subscribers != 1 {
		t.Errorf("Subscribers = %d, want 1", st.Subscribers)
	}
	publish(t, b, small)
	envs, _ := take(t, other)
	if ids := bustest.IDs(envs); len(ids) != 4 {
		t.Errorf("other subscriber got %v, want 4 events", ids)
	}
	if s.End() != bus.EndCancelled {
		t.Errorf("End() = %q, want cancelled", s.End())
	}
}

func TestCloseAfterEndKeepsReason(t *testing.T) {
	t.Parallel()
	b := queueBus(t, 1<<20)
	s := idle(t, b, bus.SubscribeOptions{MaxQueued: 16})
	publishSmall(t, b, 17)
	s.Close()
	if got := s.End(); got != bus.EndLagged {
		t.Errorf("End() = %q, want lagged", got)
	}
	if frames, ended := s.Take(nil); len(frames) != 0 || !ended {
		t.Errorf("Take = %d frames, %v; want none, ended", len(frames), ended)
	}
}

func TestCloseWakesWaitingWriter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBus(t, bus.Options{Session: bustest.SessionID("s")})
		s := subscribe(t, b, bus.SubscribeOptions{})
		done := make(chan bus.EndReason)
		go func() {
			for {
				<-s.Ready()
				if _, ended := s.Take(nil); ended {
					done <- s.End()
					return
				}
			}
		}()
		synctest.Wait()
		s.Close()
		if got := <-done; got != bus.EndCancelled {
			t.Errorf("End() = %q, want cancelled", got)
		}
	})
}

func TestContextCancelRemovesSubscriber(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBus(t, bus.Options{Session: bustest.SessionID("s")})
		ctx, cancel := context.WithCancel(context.Background())
		s, err := b.Subscribe(ctx, bus.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		publishSmall(t, b, 3)
		cancel()
		synctest.Wait()
		if st := b.Stats(); st.Subscribers != 0 {
			t.Errorf("Subscribers = %d after cancel, want 0", st.Subscribers)
		}
		if got, want := stats(s), (bus.SubscriptionStats{End: bus.EndCancelled}); got != want {
			t.Errorf("Stats() = %+v, want %+v", got, want)
		}
		if frames, ended := s.Take(nil); len(frames) != 0 || !ended {
			t.Errorf("Take = %d frames, %v; want none, ended", len(frames), ended)
		}
		s.Close() // idempotent after the context did it
	})
}

func TestSubscribeWithCancelledContext(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBus(t, bus.Options{Session: bustest.SessionID("s")})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		s, err := b.Subscribe(ctx, bus.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Close() // races with the context's Close
		synctest.Wait()
		if st := b.Stats(); st.Subscribers != 0 {
			t.Errorf("Subscribers = %d, want 0", st.Subscribers)
		}
	})
}

func TestSubscribeWithCancelledContextAlone(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newBus(t, bus.Options{Session: bustest.SessionID("s")})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		s, err := b.Subscribe(ctx, bus.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if st := b.Stats(); st.Subscribers != 0 || s.End() != bus.EndCancelled {
			t.Errorf("Subscribers = %d, End %q; want 0, cancelled", st.Subscribers, s.End())
		}
	})
}

func TestCloseAndCancelConcurrently(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s"), MaxSubscribers: 1000})
	done := make(chan struct{})
	for range 200 {
		ctx, cancel := context.WithCancel(context.Background())
		s, err := b.Subscribe(ctx, bus.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		go func() { s.Close(); done <- struct{}{} }()
		go func() { cancel(); done <- struct{}{} }()
		go func() { b.Publish(small); done <- struct{}{} }()
	}
	for range 600 {
		<-done
	}
	eventually(t, "every subscriber to leave", func() bool { return b.Stats().Subscribers == 0 })
}

func TestBusCloseEndsStreamsAfterQueuedFrames(t *testing.T) {
	t.Parallel()
	b := queueBus(t, 1<<20)
	s := idle(t, b, bus.SubscribeOptions{})
	publishSmall(t, b, 2)
	b.Close()
	envs, ended := take(t, s)
	want := []string{sprintf("a:b#%d", base+1), sprintf("a:b#%d", base+2), `stream:closed {reason:"session_deleted",retryMs:"R"}`}
	if diff := cmp.Diff(want, summary(t, envs)); diff != "" || !ended {
		t.Errorf("ended %v, frames mismatch (-want +got):\n%s", ended, diff)
	}
	if got := s.End(); got != bus.EndSessionDeleted {
		t.Errorf("End() = %q, want session_deleted", got)
	}
	if st := b.Stats(); st.Subscribers != 0 {
		t.Errorf("Subscribers = %d, want 0", st.Subscribers)
	}
	if _, _, err := b.Publish(small); !errors.Is(err, bus.ErrClosed) {
		t.Errorf("Publish = %v, want ErrClosed", err)
	}
	if _, err := b.Subscribe(context.Background(), bus.SubscribeOptions{}); !errors.Is(err, bus.ErrClosed) {
		t.Errorf("Subscribe = %v, want ErrClosed", err)
	}
	b.Close()
	s.Close()
	if envs, ended := take(t, s); len(envs) != 0 || !ended {
		t.Errorf("after a second Close: %v, %v", bustest.Types(envs), ended)
	}
}

func TestEndStreamsKeepsTheBus(t *testing.T) {
	t.Parallel()
	for _, reason := range []bus.EndReason{bus.EndShutdown, bus.EndReload} {
		t.Run(string(reason), func(t *testing.T) {
			t.Parallel()
			b := queueBus(t, 1<<20)
			s := idle(t, b, bus.SubscribeOptions{})
			publishSmall(t, b, 2)
			epoch := b.Epoch()
			b.EndStreams(reason)
			envs, ended := take(t, s)
			want := []string{sprintf("a:b#%d", base+1), sprintf("a:b#%d", base+2), sprintf(`stream:closed {reason:%q,retryMs:"R"}`, reason)}
			if diff := cmp.Diff(want, summary(t, envs)); diff != "" || !ended {
				t.Errorf("ended %v, frames mismatch (-want +got):\n%s", ended, diff)
			}
			if got := s.End(); got != reason {
				t.Errorf("End() = %q, want %q", got, reason)
			}
			if st := b.Stats(); st.Subscribers != 0 {
				t.Errorf("Subscribers = %d, want 0", st.Subscribers)
			}
			publish(t, b, small) // nobody hears it, the ring keeps it
			last := uint64(base + 2)
			r := subscribe(t, b, bus.SubscribeOptions{Cursor: &last, Epoch: epoch})
			envs, _ = take(t, r)
			want = []string{
				sprintf(`stream:ready {cursor:%d,earliestId:%d,epoch:"e0",lastId:%d,maxQueued:256,types:null}`, last, base+1, base+3),
				sprintf("a:b#%d", base+3),
				sprintf(`stream:replayed {lastReplayedEventId:%d,replayedCount:1}`, base+3),
			}
			if diff := cmp.Diff(want, summary(t, envs)); diff != "" {
				t.Errorf("resume after %s mismatch (-want +got):\n%s", reason, diff)
			}
		})
	}
}

func TestRetryHintIsJittered(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s"), MaxSubscribers: 200})
	var subs []*bus.Subscription
	for range 200 {
		subs = append(subs, idle(t, b, bus.SubscribeOptions{}))
	}
	b.EndStreams(bus.EndShutdown)
	seen := map[int]bool{}
	for _, s := range subs {
		envs, _ := take(t, s)
		d := bustest.Data[bus.ClosedData](t, envs[len(envs)-1])
		if d.RetryMs < 500 || d.RetryMs >= 1500 {
			t.Errorf("retryMs = %d, want in [500, 1500)", d.RetryMs)
		}
		seen[d.RetryMs] = true
	}
	if len(seen) < 50 {
		t.Errorf("200 streams got only %d distinct retryMs values", len(seen))
	}
}

func TestSubscriberLimit(t *testing.T) {
	t.Parallel()
	b := queueBus(t, 1<<20)
	if err := b.SetLimits(bus.Limits{MaxSubscribers: 2, MaxQueuedBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	s1 := idle(t, b, bus.SubscribeOptions{MaxQueued: 16})
	s2 := idle(t, b, bus.SubscribeOptions{})
	_, err := b.Subscribe(context.Background(), bus.SubscribeOptions{})
	if !errors.Is(err, bus.ErrSubscriberLimit) {
		t.Fatalf("third Subscribe = %v, want ErrSubscriberLimit", err)
	}
	if bus.IsInputError(err) {
		t.Error("ErrSubscriberLimit is an *InputError: the router would answer 400")
	}
	publishSmall(t, b, 17) // evicts s1: its place is free
	s3 := idle(t, b, bus.SubscribeOptions{})
	s2.Close() // frees another
	idle(t, b, bus.SubscribeOptions{})
	if _, err := b.Subscribe(context.Background(), bus.SubscribeOptions{}); !errors.Is(err, bus.ErrSubscriberLimit) {
		t.Errorf("Subscribe at the limit again = %v, want ErrSubscriberLimit", err)
	}
	if s1.End() != bus.EndLagged || s3.End() != bus.EndNone {
		t.Errorf("End: s1 %q, s3 %q", s1.End(), s3.End())
	}
	b.EndStreams(bus.EndReload) // frees them all
	for range 2 {
		idle(t, b, bus.SubscribeOptions{})
	}
}

func TestSetFilter(t *testing.T) {
	t.Parallel()
	b := queueBus(t, 1<<20)
	s := idle(t, b, bus.SubscribeOptions{Filter: mustFilter(t, "a:*")})
	publish(t, b, ev("a:1", ""), ev("b:1", ""))
	if err := s.SetFilter(mustFilter(t, "b:*")); err != nil {
		t.Fatal(err)
	}
	publish(t, b, ev("a:2", ""), ev("b:2", ""))
	if err := s.SetFilter(nil); err != nil {
		t.Fatal(err)
	}
	if s.Filter() != nil {
		t.Errorf("Filter() = %v after SetFilter(nil), want nil", s.Filter().Types())
	}
	publish(t, b, ev("a:3", ""), ev("b:3", ""))
	envs, _ := take(t, s)
	want := []string{"a:1#100001", "b:2#100004", "a:3#100005", "b:3#100006"}
	if diff := cmp.Diff(want, summary(t, envs)); diff != "" {
		t.Errorf("frames mismatch (-want +got):\n%s (a filter change replays nothing)", diff)
	}
}

func TestSetFilterOnFamilyStream(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{})
	s := idle(t, b, bus.SubscribeOptions{Family: bustest.Family(t, "build")})
	f := mustFilter(t, "build:x")
	if err := s.SetFilter(f); err != nil {
		t.Fatalf("SetFilter(build:x) = %v", err)
	}
	if err := s.SetFilter(mustFilter(t, "build:y,test:*")); !isInputError(err, "types") {
		t.Errorf("SetFilter(outside the family) = %v, want *InputError{Field: types}", err)
	}
	if s.Filter() != f {
		t.Errorf("Filter() = %v, want the filter before the refused change", s.Filter().Types())
	}
	if err := s.SetFilter(nil); err != nil {
		t.Errorf("SetFilter(nil) = %v, want the whole family", err)
	}
	publish(t, b, ev("test:x", ""), ev("build:x", ""), ev("build:y", ""))
	envs, _ := take(t, s)
	if diff := cmp.Diff([]string{"build:x#2", "build:y#3"}, summary(t, envs)); diff != "" {
		t.Errorf("frames mismatch (-want +got):\n%s", diff)
	}
}

func TestSetLimits(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s"), RingSize: 100, MaxQueued: 100})
	publishSmall(t, b, 50)
	old := idle(t, b, bus.SubscribeOptions{})
	if err := b.SetLimits(bus.Limits{RingSize: 10, MaxQueued: 32}); err != nil {
		t.Fatal(err)
	}
	st := b.Stats()
	if st.RingLen != 10 || st.EarliestID != 41 || st.LastID != 50 {
		t.Errorf("after shrinking the ring: RingLen %d, EarliestID %d, LastID %d; want 10, 41, 50", st.RingLen, st.EarliestID, st.LastID)
	}
	want := bus.Limits{RingSize: 10, RingMaxBytes: 64 << 20, MaxQueued: 32, MaxQueuedBytes: 2 << 20, MaxSubscribers: 64}
	if st.Limits != want {
		t.Errorf("Limits = %+v, want %+v (zero fields are defaults)", st.Limits, want)
	}
	if got := old.MaxQueued(); got != 100 {
		t.Errorf("existing subscriber MaxQueued() = %d, want 100 (unchanged)", got)
	}
	if got := idle(t, b, bus.SubscribeOptions{}).MaxQueued(); got != 32 {
		t.Errorf("new subscriber MaxQueued() = %d, want 32", got)
	}
	oneBytes := st.RingBytes / 10
	if err := b.SetLimits(bus.Limits{RingSize: 10, RingMaxBytes: 3 * oneBytes}); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.RingLen != 3 || st.EarliestID != 48 {
		t.Errorf("after shrinking the ring bytes: RingLen %d, EarliestID %d; want 3, 48", st.RingLen, st.EarliestID)
	}

	for _, bad := range []bus.Limits{{RingSize: bus.MaxRingSize + 1}, {RingSize: -1}, {MaxQueuedBytes: -5}} {
		if err := b.SetLimits(bad); !bus.IsInputError(err) {
			t.Errorf("SetLimits(%+v) = %v, want an *InputError", bad, err)
		}
	}
	if st := b.Stats(); st.Limits.RingSize != 10 || st.RingLen != 3 {
		t.Errorf("a refused SetLimits changed the bus: %+v, RingLen %d", st.Limits, st.RingLen)
	}
}

func TestBadInputDoesNotDisturbOthers(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s")})
	s := idle(t, b, bus.SubscribeOptions{Filter: mustFilter(t, "a:*")})
	b.Publish(ev("localbus:reloaded", ""))
	b.Publish(ev("a:x", "{"))
	b.Publish()
	b.Subscribe(context.Background(), bus.SubscribeOptions{MaxQueued: 1})
	b.Subscribe(context.Background(), bus.SubscribeOptions{Family: bustest.Family(t, "stream")})
	b.SetLimits(bus.Limits{RingSize: -1})
	s.SetFilter(nil) // allowed: everything
	publish(t, b, ev("a:x", ""), ev("b:x", ""))
	envs, ended := take(t, s)
	if diff := cmp.Diff([]string{"a:x#1", "b:x#2"}, summary(t, envs)); diff != "" || ended {
		t.Errorf("ended %v, frames mismatch (-want +got):\n%s", ended, diff)
	}
}

func TestEndStreamsWithAnOddReasonStillEndsThem(t *testing.T) {
	t.Parallel()
	for _, reason := range []bus.EndReason{bus.EndNone, bus.EndLagged, bus.EndCancelled, "bogus"} {
		b := newBus(t, bus.Options{Session: bustest.SessionID("s")})
		s := idle(t, b, bus.SubscribeOptions{})
		b.EndStreams(reason)
		envs, ended := take(t, s)
		if !ended || len(envs) != 1 || s.End() != bus.EndShutdown {
			t.Errorf("EndStreams(%q): got %v, ended %v, End %q; want stream:closed, ended, shutdown", reason, bustest.Types(envs), ended, s.End())
			continue
		}
		if d := bustest.Data[bus.ClosedData](t, envs[0]); d.Reason != "shutdown" {
			t.Errorf("EndStreams(%q): reason %q, want shutdown", reason, d.Reason)
		}
	}
}

// TestCancelledSubscriberHoldsNoGoroutine cancels many subscribers' contexts
// and checks that nothing of theirs keeps running. Not parallel: it looks at
// every goroutine.
func TestCancelledSubscriberHoldsNoGoroutine(t *testing.T) {
	before := goleak.IgnoreCurrent()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s"), MaxSubscribers: 100})
	var cancels []context.CancelFunc
	for range 100 {
		ctx, cancel := context.WithCancel(context.Background())
		cancels = append(cancels, cancel)
		if _, err := b.Subscribe(ctx, bus.SubscribeOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	publishSmall(t, b, 10)
	for _, cancel := range cancels {
		cancel()
	}
	eventually(t, "every cancelled subscriber to leave", func() bool { return b.Stats().Subscribers == 0 })
	goleak.VerifyNone(t, before)

	// Subscriptions never cancelled but closed hold nothing either.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 100 {
		s, err := b.Subscribe(ctx, bus.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	goleak.VerifyNone(t, before)
}

// TestSlowWarningsAndEvictionsReportTheirReason pins what the daemon's
// metrics and log read: a warning set off by the byte figure is counted in
// Stats.SlowBytes as well as SlowWarnings, one set off by the frame count
// only in SlowWarnings; the subscription counts the warnings it was sent
// and, once evicted, reports stream:lagged's reason.
func TestSlowWarningsAndEvictionsReportTheirReason(t *testing.T) {
	data := `"` + strings.Repeat("x", 1000) + `"`
	byBytes := newBus(t, bus.Options{Session: bustest.SessionID("s"), MaxQueued: 256, MaxQueuedBytes: 4096})
	sb := subscribe(t, byBytes, bus.SubscribeOptions{})
	for range 6 {
		byBytes.Publish(ev("a:b", data))
	}
	if st := byBytes.Stats(); st.SlowWarnings != 1 || st.SlowBytes != 1 || st.EvictedBytes != 1 {
		t.Errorf("bytes: SlowWarnings %d, SlowBytes %d, EvictedBytes %d; want 1, 1, 1", st.SlowWarnings, st.SlowBytes, st.EvictedBytes)
	}
	if n, r := sb.SlowWarnings(), sb.LagReason(); n != 1 || r != bus.LagQueueBytesOverflow {
		t.Errorf("bytes: subscription SlowWarnings() %d, LagReason() %q; want 1, %q", n, r, bus.LagQueueBytesOverflow)
	}

	byCount := newBus(t, bus.Options{Session: bustest.SessionID("s"), MaxQueued: 16})
	sc := subscribe(t, byCount, bus.SubscribeOptions{})
	if r := sc.LagReason(); r != "" {
		t.Errorf("LagReason() of an open subscription = %q, want empty", r)
	}
	for range 17 {
		byCount.Publish(ev("a:b", ""))
	}
	if st := byCount.Stats(); st.SlowWarnings != 1 || st.SlowBytes != 0 || st.EvictedQueue != 1 {
		t.Errorf("count: SlowWarnings %d, SlowBytes %d, EvictedQueue %d; want 1, 0, 1", st.SlowWarnings, st.SlowBytes, st.EvictedQueue)
	}
	if n, r := sc.SlowWarnings(), sc.LagReason(); n != 1 || r != bus.LagQueueOverflow {
		t.Errorf("count: subscription SlowWarnings() %d, LagReason() %q; want 1, %q", n, r, bus.LagQueueOverflow)
	}
}
