package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/ipc/client"

	"github.com/localbus/localbus/bus/bustest"
)

var transports = []client.Transport{client.SSE, client.WebSocket}

func TestStreamReplaysThenDeliversLive(t *testing.T) {
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			t.Parallel()
			_, c := startDaemonClient(t, bus.Limits{})
			publishN(t, c, "s1", "build:step", 3)

			st := openStream(t, c, client.StreamOptions{Session: "s1", Since: ptr[uint64](0), Transport: tr})
			ready := next(t, st)
			if ready.Type != bus.TypeReady || !ready.Reserved() {
				t.Fatalf("first frame = %s, want %s", ready.Raw, bus.TypeReady)
			}
			for want := uint64(1); want <= 3; want++ {
				if f := next(t, st); f.ID != want || f.Type != "build:step" || f.Session != "s1" {
					t.Fatalf("replayed frame = %s, want id %d of build:step in s1", f.Raw, want)
				}
			}
			if f := next(t, st); f.Type != bus.TypeReplayed {
				t.Fatalf("after the replay: %s, want %s", f.Raw, bus.TypeReplayed)
			}
			publishN(t, c, "s1", "build:done", 1)
			f := next(t, st)
			if f.ID != 4 || f.Type != "build:done" {
				t.Fatalf("live frame = %s, want id 4 of build:done", f.Raw)
			}
			var env bus.Envelope
			if err := json.Unmarshal(f.Raw, &env); err != nil || env.ID != f.ID || !bytes.Equal(env.Data, f.Data) {
				t.Errorf("Raw %s does not decode to the frame's envelope (err %v)", f.Raw, err)
			}
			var n int
			if err := f.DecodeData(&n); err != nil || n != 0 {
				t.Errorf("DecodeData = %d, %v; want 0, nil", n, err)
			}
			id, epoch, ok := st.Cursor()
			if !ok || id != 4 || epoch == "" {
				t.Errorf("Cursor() = %d, %q, %v; want 4, the bus's epoch, true", id, epoch, ok)
			}
		})
	}
}

func TestStreamFiltersByType(t *testing.T) {
	t.Parallel()
	_, c := startDaemonClient(t, bus.Limits{})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for _, typ := range []string{"a:x", "b:y", "a:z"} {
		if _, err := c.Publish(ctx, "s", typ, nil); err != nil {
			t.Fatal(err)
		}
	}
	st := openStream(t, c, client.StreamOptions{Session: "s", Since: ptr[uint64](0), Types: []string{"a:*"}})
	var got []string
	for f := next(t, st); f.Type != bus.TypeReplayed; f = next(t, st) {
		if !f.Reserved() {
			got = append(got, fmt.Sprintf("%d %s", f.ID, f.Type))
		}
	}
	if want := "1 a:x,3 a:z"; strings.Join(got, ",") != want {
		t.Errorf("filtered replay = %q, want %q", strings.Join(got, ","), want)
	}
}

// collect reads frames until it has n events, failing after wait. It
// returns the events and the reserved frames' types in order.
func collect(t testing.TB, st *client.Stream, n int) (events []client.Frame, reserved []client.Frame) {
	t.Helper()
	for len(events) < n {
		f := next(t, st)
		if f.Reserved() {
			reserved = append(reserved, f)
		} else {
			events = append(events, f)
		}
	}
	return events, reserved
}

func types(frames []client.Frame) []string {
	var out []string
	for _, f := range frames {
		out = append(out, f.Type)
	}
	return out
}

// checkExactlyOnce fails unless events have ids first..last, each once, in
// order.
func checkExactlyOnce(t testing.TB, events []client.Frame, first, last uint64) {
	t.Helper()
	if len(events) != int(last-first+1) {
		t.Errorf("got %d events, want %d (ids %d..%d)", len(events), last-first+1, first, last)
	}
	want := first
	for _, f := range events {
		if f.ID != want {
			t.Fatalf("event id %d where %d was due: lost or repeated events", f.ID, want)
		}
		want++
	}
}

func TestStreamResumesAcrossReloadWithoutLossOrRepeat(t *testing.T) {
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			t.Parallel()
			_, c := startDaemonClient(t, bus.Limits{})
			publishN(t, c, "s", "t:e", 1)
			st := openStream(t, c, client.StreamOptions{Session: "s", Since: ptr[uint64](0), Transport: tr})

			// Publish while the daemon reloads, so some events land while
			// the stream is away.
			const total = 300
			var wg sync.WaitGroup
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				defer cancel()
				for i := 2; i <= total; i++ {
					if _, err := c.Publish(ctx, "s", "t:e", i); err != nil {
						t.Errorf("Publish %d: %v", i, err)
						return
					}
					if i == total/3 {
						if _, err := c.Reload(ctx); err != nil {
							t.Errorf("Reload: %v", err)
						}
					}
				}
			})
			events, reserved := collect(t, st, total)
			wg.Wait()
			checkExactlyOnce(t, events, 1, total)
			var closed bus.ClosedData
			for _, f := range reserved {
				if f.Type == bus.TypeClosed {
					f.DecodeData(&closed)
				}
				if f.Type == bus.TypeGap {
					t.Errorf("unexpected %s", f.Raw)
				}
			}
			if closed.Reason != "reload" {
				t.Errorf("reserved frames %q: want a stream:closed with reason reload", types(reserved))
			}
		})
	}
}

func TestStreamReportsEpochResetAfterDaemonRestart(t *testing.T) {
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			t.Parallel()
			d, c := startDaemonClient(t, bus.Limits{})
			publishN(t, c, "s", "t:e", 3)

			// The restarted daemon has no session s until a publish creates
			// it: the stream must wait for it through 404s, not end.
			var published atomic.Bool
			var retries []string
			st := openStream(t, c, client.StreamOptions{
				Session: "s", Since: ptr[uint64](0), Transport: tr,
				OnRetry: func(err error, wait time.Duration) {
					retries = append(retries, err.Error())
					if errors.Is(err, client.ErrNotFound) && !published.Swap(true) {
						publishN(t, c, "s", "t:new", 2)
					}
				},
			})
			events, _ := collect(t, st, 3)
			checkExactlyOnce(t, events, 1, 3)
			// Read on, so the connection is idle: a WebSocket's close
			// handshake waits for the reader.
			nextOf(t, st, bus.TypeReplayed)
			_, oldEpoch, _ := st.Cursor()

			d.restart()
			if f := nextOf(t, st, bus.TypeClosed); !strings.Contains(string(f.Data), `"shutdown"`) {
				t.Fatalf("closed frame = %s, want reason shutdown", f.Raw)
			}
			gap := nextOf(t, st, bus.TypeGap)
			var gd bus.GapData
			if err := gap.DecodeData(&gd); err != nil || gd.Reason != bus.GapEpochReset || gd.LastDeliveredID != 3 {
				t.Fatalf("gap = %s, want epoch_reset after id 3", gap.Raw)
			}
			events, _ = collect(t, st, 2)
			checkExactlyOnce(t, events, 1, 2)
			if events[0].Type != "t:new" {
				t.Errorf("after the gap: %s, want the new sequence's t:new", events[0].Raw)
			}
			if _, epoch, _ := st.Cursor(); epoch == oldEpoch {
				t.Errorf("Cursor epoch still %q after the restart", epoch)
			}
			if !published.Load() {
				t.Errorf("the stream never retried through a 404; retries: %q", retries)
			}
		})
	}
}

func TestStreamEndsForGoodWhenSessionDeleted(t *testing.T) {
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			t.Parallel()
			_, c := startDaemonClient(t, bus.Limits{})
			publishN(t, c, "s", "t:e", 1)
			st := openStream(t, c, client.StreamOptions{Session: "s", Transport: tr})
			next(t, st) // stream:ready
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			if err := c.DeleteSession(ctx, "s"); err != nil {
				t.Fatal(err)
			}
			f := next(t, st)
			var cd bus.ClosedData
			if f.Type != bus.TypeClosed || f.DecodeData(&cd) != nil || cd.Reason != "session_deleted" {
				t.Fatalf("frame = %s, want stream:closed (session_deleted)", f.Raw)
			}
			for range 2 {
				_, err := st.Next(ctx)
				var ee *client.EndedError
				if !errors.As(err, &ee) || ee.Reason != "session_deleted" || ee.Session != "s" {
					t.Fatalf("Next after deletion = %v, want *EndedError session_deleted of s", err)
				}
			}
		})
	}
}

func TestStreamOfMissingSessionEnds(t *testing.T) {
	t.Parallel()
	_, c := startDaemonClient(t, bus.Limits{})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, err := c.Stream(ctx, client.StreamOptions{Session: "nope"})
	var ee *client.EndedError
	if !errors.As(err, &ee) || ee.Reason != "not_found" || !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("Stream of a missing session = %v, want *EndedError not_found wrapping ErrNotFound", err)
	}
}

func TestStreamWaitsForASessionNotCreatedYet(t *testing.T) {
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			t.Parallel()
			_, c := startDaemonClient(t, bus.Limits{})
			var retries int
			st := openStream(t, c, client.StreamOptions{
				Session: "later", Transport: tr, WaitForSession: true,
				OnRetry: func(err error, wait time.Duration) {
					if !errors.Is(err, client.ErrNotFound) {
						t.Errorf("OnRetry(%v), want a 404", err)
					}
					if retries++; retries == 2 {
						publishN(t, c, "later", "t:e", 1)
					}
				},
			})
			if f := nextOf(t, st, "t:e"); f.ID != 1 {
				t.Errorf("first event %s, want id 1", f.Raw)
			}
			if retries < 2 {
				t.Errorf("OnRetry called %d times, want at least 2", retries)
			}
		})
	}
}

func TestStreamRefusesBadOptions(t *testing.T) {
	t.Parallel()
	_, c := startDaemonClient(t, bus.Limits{})
	tests := []struct {
		name string
		opts client.StreamOptions
		want int // HTTP status, 0 for a local error
	}{
		{"session and family", client.StreamOptions{Session: "s", Family: "f"}, 0},
		{"unknown transport", client.StreamOptions{Transport: "carrier-pigeon"}, 0},
		{"bad type", client.StreamOptions{Types: []string{"no colon"}}, http.StatusBadRequest},
		{"reserved type", client.StreamOptions{Types: []string{"stream:ready"}}, http.StatusBadRequest},
		{"maxQueued out of range", client.StreamOptions{MaxQueued: 3}, http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			st, err := c.Stream(ctx, tt.opts)
			if err == nil {
				st.Close()
				t.Fatalf("Stream(%+v) = nil error", tt.opts)
			}
			var ae *client.APIError
			switch {
			case tt.want == 0 && errors.As(err, &ae):
				t.Errorf("Stream(%+v) = %v, want a local error", tt.opts, err)
			case tt.want != 0 && (!errors.As(err, &ae) || ae.Status != tt.want):
				t.Errorf("Stream(%+v) = %v, want an *APIError %d", tt.opts, err, tt.want)
			}
		})
	}
}

// waitUntil polls cond every few milliseconds until it holds, failing the
// test after wait.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	bustest.Eventually(t, wait, what, cond)
}

// evict opens a stream on s with the smallest queue, publishes n large
// events without reading, and returns once the daemon has dropped the
// stream as a slow reader.
func evict(t *testing.T, c *client.Client, tr client.Transport, n int) *client.Stream {
	t.Helper()
	publishN(t, c, "s", "t:first", 1)
	st := openStream(t, c, client.StreamOptions{Session: "s", Since: ptr[uint64](0), Transport: tr, MaxQueued: 16})
	nextOf(t, st, bus.TypeReplayed)
	big := json.RawMessage(`"` + strings.Repeat("x", 2<<10) + `"`)
	events := make([]client.Event, 0, 100)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for sent := 1; sent < n; sent += len(events) {
		events = events[:0]
		for i := 0; i < 100 && sent+i < n; i++ {
			events = append(events, client.Event{Type: "t:big", Data: big})
		}
		if _, err := c.PublishBatch(ctx, "s", events); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "the daemon evicts the unread stream", func() bool {
		info, err := c.Session(ctx, "s")
		return err == nil && info.Subscribers == 0
	})
	return st
}

func TestStreamRecoversFromEvictionWithoutGap(t *testing.T) {
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			t.Parallel()
			_, c := startDaemonClient(t, bus.Limits{MaxQueued: 16})
			const n = 300 // 600 KiB: more than socket buffers hold
			st := evict(t, c, tr, n)
			events, reserved := collect(t, st, n-1)
			checkExactlyOnce(t, events, 2, n)
			got := strings.Join(types(reserved), ",")
			if !strings.Contains(got, bus.TypeLagged) || strings.Contains(got, bus.TypeGap) {
				t.Errorf("reserved frames %s: want stream:lagged and no gap", got)
			}
		})
	}
}

func TestStreamReportsGapWhenRingLostEvents(t *testing.T) {
	t.Parallel()
	_, c := startDaemonClient(t, bus.Limits{MaxQueued: 16, RingSize: 100})
	const n = 300
	st := evict(t, c, client.SSE, n)
	var before, after []client.Frame
	var gap *client.Frame
	for len(after) == 0 || after[len(after)-1].ID < n {
		f := next(t, st)
		switch {
		case f.Type == bus.TypeGap:
			gap = &f
		case f.Reserved():
		case gap == nil:
			before = append(before, f)
		default:
			after = append(after, f)
		}
	}
	if gap == nil {
		t.Fatal("no stream:gap though the ring lost events")
	}
	var gd bus.GapData
	if err := gap.DecodeData(&gd); err != nil || gd.Reason != bus.GapRingEvicted || gd.EarliestAvailableID == nil {
		t.Fatalf("gap = %s, want ring_evicted with earliestAvailableId", gap.Raw)
	}
	if len(before) == 0 || gd.LastDeliveredID != before[len(before)-1].ID {
		t.Errorf("gap's lastDeliveredId %d is not the last event received before it", gd.LastDeliveredID)
	}
	checkExactlyOnce(t, before, 2, gd.LastDeliveredID)
	checkExactlyOnce(t, after, *gd.EarliestAvailableID, n)
}

func TestNextContextEndsTheCallNotTheStream(t *testing.T) {
	t.Parallel()
	_, c := startDaemonClient(t, bus.Limits{})
	publishN(t, c, "s", "t:e", 1)
	st := openStream(t, c, client.StreamOptions{Session: "s"})
	next(t, st) // stream:ready
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := st.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next on a quiet stream = %v, want context.DeadlineExceeded", err)
	}
	publishN(t, c, "s", "t:e", 1)
	if f := next(t, st); f.ID != 2 {
		t.Fatalf("after a timed-out Next: %s, want event 2", f.Raw)
	}
}

func TestCancellingStreamLeavesNoGoroutine(t *testing.T) {
	// Not parallel: it checks every goroutine of the process.
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			// Runs last, after the daemon and client cleanups.
			before := goleak.IgnoreCurrent()
			t.Cleanup(func() { goleak.VerifyNone(t, before) })
			_, c := startDaemonClient(t, bus.Limits{})
			publishN(t, c, "s", "t:e", 1)

			ctx, cancel := context.WithCancel(context.Background())
			st, err := c.Stream(ctx, client.StreamOptions{Session: "s", Transport: tr})
			if err != nil {
				t.Fatal(err)
			}
			next(t, st) // stream:ready
			errc := make(chan error, 1)
			go func() {
				_, err := st.Next(context.Background())
				errc <- err
			}()
			cancel()
			select {
			case err := <-errc:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("Next after the stream's context ended = %v, want context.Canceled", err)
				}
			case <-time.After(wait):
				t.Fatal("Next did not return when the stream's context ended")
			}
			st.Close()
			if _, err := st.Next(context.Background()); !errors.Is(err, client.ErrClosed) {
				t.Errorf("Next after Close = %v, want ErrClosed", err)
			}
		})
	}
}

func TestCloseUnblocksNext(t *testing.T) {
	t.Parallel()
	_, c := startDaemonClient(t, bus.Limits{})
	publishN(t, c, "s", "t:e", 1)
	st := openStream(t, c, client.StreamOptions{Session: "s"})
	next(t, st)
	errc := make(chan error, 1)
	go func() {
		_, err := st.Next(context.Background())
		errc <- err
	}()
	st.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, client.ErrClosed) {
			t.Errorf("Next during Close = %v, want ErrClosed", err)
		}
	case <-time.After(wait):
		t.Fatal("Close did not unblock Next")
	}
}
