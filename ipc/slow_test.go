package ipc_test

import (
	"bufio"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/ipc"
	"github.com/localbus/localbus/ipc/ipctest"
)

// checkEvicted checks what an evicted stream received: stream:ready, the
// events from 1 on without a hole (with stream:slow warnings among them),
// and stream:lagged last. It returns the last event id received.
func checkEvicted(tb testing.TB, what string, envs []bus.Envelope) uint64 {
	tb.Helper()
	if len(envs) < 2 || envs[0].Type != bus.TypeReady {
		tb.Fatalf("%s: frames %v, want stream:ready first", what, bustest.Types(envs))
	}
	last := envs[len(envs)-1]
	if last.Type != bus.TypeLagged {
		tb.Fatalf("%s: last frame %s, want stream:lagged", what, last.Type)
	}
	ld := data[bus.LaggedData](tb, last)
	if ld.Reason != bus.LagQueueOverflow || ld.MaxQueued != 16 || ld.QueueSize != 16 {
		tb.Errorf("%s: stream:lagged %s, want reason queue_overflow with queueSize 16 and maxQueued 16", what, last.Data)
	}
	var got []uint64
	slow := 0
	for _, env := range envs[1 : len(envs)-1] {
		switch {
		case env.ID != 0:
			got = append(got, env.ID)
		case env.Type == bus.TypeSlow:
			slow++
		default:
			tb.Errorf("%s: unexpected %s before stream:lagged", what, env.Type)
		}
	}
	if len(got) == 0 || !slices.Equal(got, seq(1, uint64(len(got)))) {
		tb.Fatalf("%s: event ids %v, want 1 to %d in order", what, got, len(got))
	}
	if slow == 0 {
		tb.Errorf("%s: no stream:slow before stream:lagged", what)
	}
	return got[len(got)-1]
}

// checkRecovered checks a resumed stream: stream:ready with the cursor, no
// stream:gap, every event after the cursor up to lastID, stream:replayed.
func checkRecovered(tb testing.TB, what string, next func() bus.Envelope, cursor, lastID uint64) {
	tb.Helper()
	ready := next()
	if rd := data[bus.ReadyData](tb, ready); ready.Type != bus.TypeReady || rd.Cursor == nil || *rd.Cursor != cursor {
		tb.Fatalf("%s: first frame %s %s, want stream:ready with cursor %d", what, ready.Type, ready.Data, cursor)
	}
	var got []uint64
	for {
		env := next()
		if env.Type == bus.TypeReplayed {
			rp := data[bus.ReplayedData](tb, env)
			if rp.ReplayedCount != len(got) {
				tb.Errorf("%s: stream:replayed %s, want replayedCount %d", what, env.Data, len(got))
			}
			break
		}
		if env.ID == 0 {
			tb.Fatalf("%s: got %s during the replay, want events only", what, env.Type)
		}
		got = append(got, env.ID)
	}
	if !slices.Equal(got, seq(cursor+1, lastID)) {
		tb.Errorf("%s: replayed %v, want %d to %d", what, got, cursor+1, lastID)
	}
}

// TestSlowReaderEvictedAndRecovers runs readers that stop reading over the
// real socket: a raw SSE connection and a WebSocket, both with
// ?maxQueued=16, beside a client that reads everything. The publisher
// publishes events of a few KB until the socket buffers fill and both slow
// readers are evicted. When they read at last, each finds stream:lagged as
// its last frame (and the WebSocket closes 1013); resuming with its last id
// recovers every event it missed, with no gap, while the normal client got
// them all live.
func TestSlowReaderEvictedAndRecovers(t *testing.T) {
	// A byte limit the normal client cannot reach even if it is starved of
	// CPU for a while; the slow ones go by the frame count they asked for.
	srv := ipctest.New(t, ipctest.Options{Hub: hub.Options{AutoCreate: true, Limits: bus.Limits{MaxQueuedBytes: 64 << 20}}})
	createSession(t, srv, "slow")
	sess, _ := srv.Hub.Session("slow")
	b := sess.Bus
	ctx := testCtx(t)

	// The normal client: read as fast as events come.
	normal := srv.OpenSSE(t, "/api/v1/sessions/slow/events?maxQueued=2048", nil)
	expectSSE(t, normal, bus.TypeReady)
	normalIDs := make(chan bus.Envelope, 1<<16)
	normalDone := make(chan struct{})
	go func() {
		defer close(normalDone)
		defer close(normalIDs)
		for {
			env, _, err := normal.NextEnvelope(ctx)
			if err != nil {
				return
			}
			normalIDs <- env
		}
	}()
	defer func() {
		normal.Close()
		<-normalDone
	}()

	// The raw SSE client: send the request, read nothing.
	conn, err := srv.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req, _ := http.NewRequest(http.MethodGet, ipctest.URL("/api/v1/sessions/slow/events?maxQueued=16"), nil)
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	// The WebSocket client: upgrade, read nothing.
	ws, _, err := srv.DialWS(ctx, "/api/v1/sessions/slow/ws?maxQueued=16", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(-1)
	bustest.Eventually(t, wait, "three subscribers", func() bool { return b.Stats().Subscribers == 3 })

	// Publish events of about 4 KB until both slow readers are evicted.
	pad := strings.Repeat("x", 4000)
	n := 0
	publishBatch := func() {
		var evs []ipctest.Event
		for range 8 {
			n++
			evs = append(evs, ev("load:chunk", fmt.Sprintf(`{"n":%d,"pad":%q}`, n, pad)))
		}
		srv.Publish(t, "slow", evs...)
	}
	stats := func() string { return fmt.Sprintf("%d events published: %+v", n, b.Stats()) }
	bustest.Eventually(bustest.Showing(t, stats), wait, "both slow readers to be evicted", func() bool {
		// Publishing is what fills their queues: a few batches a poll.
		for range 8 {
			if b.Stats().EvictedQueue >= 2 {
				return true
			}
			if n >= 20000 {
				t.Fatalf("slow readers not evicted after %d events: %+v", n, b.Stats())
			}
			publishBatch()
		}
		return false
	})
	// Events the evicted readers surely missed.
	for range 4 {
		publishBatch()
	}
	lastID := uint64(n)
	if st := b.Stats(); st.LastID != lastID || st.EvictedQueue != 2 || st.EvictedBytes != 0 || st.Subscribers != 1 {
		t.Errorf("bus stats %+v, want lastId %d, two queue evictions, one subscriber left", st, lastID)
	}

	// The normal client received everything, live.
	var got []uint64
	for len(got) == 0 || got[len(got)-1] < lastID {
		select {
		case env, ok := <-normalIDs:
			if !ok {
				t.Fatalf("normal client stream ended after %d events", len(got))
			}
			if env.ID == 0 {
				t.Fatalf("normal client got %s %s", env.Type, env.Data)
			}
			got = append(got, env.ID)
		case <-ctx.Done():
			t.Fatalf("normal client got %d events, want %d", len(got), lastID)
		}
	}
	if !slices.Equal(got, seq(1, lastID)) {
		t.Errorf("normal client got %d events with holes or repeats, want 1 to %d", len(got), lastID)
	}

	// The raw SSE reader reads now: its stream ends with stream:lagged.
	conn.SetDeadline(time.Now().Add(wait))
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("raw SSE status %d", resp.StatusCode)
	}
	raw := ipctest.ReadSSE(resp, conn)
	defer raw.Close()
	envs, err := raw.End(ctx)
	if err != nil {
		t.Fatalf("raw SSE: %v after %v", err, bustest.Types(envs))
	}
	sseLast := checkEvicted(t, "SSE", envs)
	if sseLast >= lastID {
		t.Fatalf("SSE reader received up to %d, the last id: it was not behind", sseLast)
	}

	// The WebSocket reader reads now: stream:lagged, then close 1013.
	wenvs, code := readToClose(t, ws)
	wsLast := checkEvicted(t, "WebSocket", wenvs)
	if code != websocket.StatusTryAgainLater {
		t.Errorf("evicted WebSocket close = %d, want 1013", code)
	}

	// Each resumes with its last id and recovers every missed event.
	re := srv.OpenSSE(t, "/api/v1/sessions/slow/events", header("Last-Event-ID", strconv.FormatUint(sseLast, 10)))
	checkRecovered(t, "SSE resume", func() bus.Envelope { return re.MustNext(t) }, sseLast, lastID)
	rw := srv.OpenWS(t, "/api/v1/sessions/slow/ws?since="+strconv.FormatUint(wsLast, 10), nil)
	checkRecovered(t, "WebSocket resume", func() bus.Envelope { return ipctest.MustReadEnvelope(t, rw) }, wsLast, lastID)
}

// TestStoppedReaderIsCutOffByWriteTimeout: a reader that stops reading with
// room left in its queue is cut off once one write has waited WriteTimeout,
// over SSE and WebSocket, without being counted as evicted.
func TestStoppedReaderIsCutOffByWriteTimeout(t *testing.T) {
	for _, kind := range []string{"events", "ws"} {
		t.Run(kind, func(t *testing.T) {
			srv := ipctest.New(t, ipctest.Options{Hub: hubOpts(), Handler: ipc.Options{Settings: ipc.Settings{WriteTimeout: 100 * time.Millisecond}}})
			createSession(t, srv, "s")
			s, _ := srv.Hub.Session("s")
			ctx := testCtx(t)
			path := "/api/v1/sessions/s/" + kind + "?maxQueued=2048"
			if kind == "events" {
				conn, err := srv.Dial(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				req, _ := http.NewRequest(http.MethodGet, ipctest.URL(path), nil)
				if err := req.Write(conn); err != nil {
					t.Fatal(err)
				}
			} else {
				c, _, err := srv.DialWS(ctx, path, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer c.CloseNow()
			}
			bustest.Eventually(t, wait, "the subscriber", func() bool { return s.Bus.Stats().Subscribers == 1 })
			// About 1 MB: more than the socket holds, less than the
			// subscriber's queue (2 MiB, 2048 frames).
			pad := strings.Repeat("y", 50_000)
			for i := range 20 {
				srv.Publish(t, "s", ev("big:chunk", fmt.Sprintf(`{"n":%d,"pad":%q}`, i, pad)))
			}
			bustest.Eventually(t, wait, "the stopped reader to be cut off", func() bool {
				return s.Bus.Stats().Subscribers == 0
			})
			if st := s.Bus.Stats(); st.EvictedQueue+st.EvictedBytes != 0 {
				t.Errorf("stats %+v: the reader was evicted, want it cut off by the write timeout", st)
			}
		})
	}
}
