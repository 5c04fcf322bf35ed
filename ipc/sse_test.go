package ipc_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/ipc"
	"github.com/localbus/localbus/ipc/ipctest"
	"github.com/localbus/localbus/ipc/wire"
)

// nextBlock returns the next SSE block, bounded by wait.
func nextBlock(tb testing.TB, st *ipctest.SSE) ipctest.SSEFrame {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	f, err := st.Next(ctx)
	if err != nil {
		tb.Fatalf("SSE next block: %v", err)
	}
	return f
}

func TestSSEFraming(t *testing.T) {
	srv := ipctest.New(t, ipctest.Options{
		Hub:     hubOpts(),
		Handler: ipc.Options{Settings: ipc.Settings{Keepalive: 50 * time.Millisecond}},
	})
	createSession(t, srv, "s")
	st := srv.OpenSSE(t, "/api/v1/sessions/s/events", nil)

	h := st.Response.Header
	for name, want := range map[string]string{
		"Content-Type":      "text/event-stream",
		"Cache-Control":     "no-cache",
		"X-Accel-Buffering": "no",
	} {
		if got := h.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}

	// The stream starts with the retry hint, alone.
	first := nextBlock(t, st)
	if first.Raw != "retry: 3000" {
		t.Errorf("first block = %q, want %q", first.Raw, "retry: 3000")
	}

	// Reserved frames have event: and data: and never id:.
	ready := nextBlock(t, st)
	if ready.HasID || ready.Event != bus.TypeReady || !strings.HasPrefix(ready.Raw, "event: stream:ready\ndata: {") {
		t.Errorf("stream:ready block = %q, want event: and data: lines and no id:", ready.Raw)
	}
	env, err := ready.Envelope()
	if err != nil || env.Type != bus.TypeReady || env.ID != 0 {
		t.Errorf("stream:ready data = %q (%v), want an envelope without id", ready.Data, err)
	}
	rd := data[bus.ReadyData](t, env)
	if rd.Cursor == nil || *rd.Cursor != 0 || rd.LastID != 0 || rd.EarliestID != nil || rd.Types != nil || rd.MaxQueued != bus.DefaultMaxQueued {
		t.Errorf("stream:ready data = %s, want cursor 0, lastId 0, earliestId null, types null, maxQueued %d", env.Data, bus.DefaultMaxQueued)
	}

	// Events: id:, event:, data: in that order, data one line of JSON.
	srv.Publish(t, "s", ev("build:step", `{"n": 3}`))
	f := nextBlock(t, st)
	for f.Data == "" { // a ping may come first
		f = nextBlock(t, st)
	}
	wantPrefix := "id: 1\nevent: build:step\ndata: {\"id\":1,\"v\":1,\"type\":\"build:step\",\"session\":\"s\",\"data\":{\"n\":3},\"timestamp\":\""
	if !f.HasID || f.ID != "1" || f.Event != "build:step" || !strings.HasPrefix(f.Raw, wantPrefix) || strings.Count(f.Raw, "\n") != 2 {
		t.Errorf("event block = %q, want prefix %q and three lines", f.Raw, wantPrefix)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(f.Data), &raw); err != nil {
		t.Fatalf("event data %q: %v", f.Data, err)
	}
	if _, ok := raw["originator"]; ok {
		t.Errorf("event data %q has an originator without a %s header", f.Data, wire.HeaderClientID)
	}

	// A quiet stream gets ": ping" comments.
	for {
		f := nextBlock(t, st)
		if f.Data != "" {
			t.Fatalf("unexpected block %q on a quiet stream", f.Raw)
		}
		if f.Raw == ": ping" && slices.Equal(f.Comments, []string{"ping"}) {
			break
		}
	}

	// A replay ends with stream:replayed, without id: either.
	rs := srv.OpenSSE(t, "/api/v1/sessions/s/events?since=0", nil)
	var blocks []ipctest.SSEFrame
	for len(blocks) < 3 {
		if b := nextBlock(t, rs); b.Data != "" {
			blocks = append(blocks, b)
		}
	}
	if blocks[0].Event != bus.TypeReady || blocks[0].HasID || blocks[1].ID != "1" || blocks[2].Event != bus.TypeReplayed || blocks[2].HasID {
		t.Errorf("replay blocks = %q, want stream:ready, id 1, stream:replayed (reserved without id:)", []string{blocks[0].Raw, blocks[1].Raw, blocks[2].Raw})
	}
}

// TestSSEResumeCursor pins which cursor a stream resumes from: the
// Last-Event-ID header wins over ?since=, a malformed or empty header is
// ignored (live only, cursor null) unless ?since= is given, and an epoch
// other than the bus's gives stream:gap epoch_reset and the whole ring.
func TestSSEResumeCursor(t *testing.T) {
	srv := newServer(t)

	cases := []struct {
		name   string
		query  string
		header http.Header
		cursor *uint64 // stream:ready's cursor
		gap    string  // stream:gap's reason, "" for none
		replay []uint64
		live   bool // no replay: the next event is live
	}{
		{"header wins over since", "?since=1", header("Last-Event-ID", "3"), ptr[uint64](3), "", seq(4, 5), false},
		{"header alone", "", header("Last-Event-ID", "2"), ptr[uint64](2), "", seq(3, 5), false},
		{"header with leading zeros", "", header("Last-Event-ID", "0004"), ptr[uint64](4), "", seq(5, 5), false},
		{"since alone", "?since=0", nil, ptr[uint64](0), "", seq(1, 5), false},
		{"malformed header ignored", "", header("Last-Event-ID", "abc"), nil, "", nil, true},
		{"negative header ignored", "", header("Last-Event-ID", "-1"), nil, "", nil, true},
		{"header above 2^53-1 ignored", "", header("Last-Event-ID", "9007199254740992"), nil, "", nil, true},
		{"empty header ignored", "", header("Last-Event-ID", ""), nil, "", nil, true},
		{"malformed header then since", "?since=2", header("Last-Event-ID", "x"), ptr[uint64](2), "", seq(3, 5), false},
		{"no cursor", "", nil, ptr[uint64](5), "", nil, true},
		{"epoch matches", "?since=2&epoch=EPOCH", nil, ptr[uint64](2), "", seq(3, 5), false},
		{"epoch differs", "?since=2&epoch=other", nil, ptr[uint64](2), bus.GapEpochReset, seq(1, 5), false},
		{"epoch header differs", "", header("Last-Event-ID", "4", "Localbus-Epoch", "other"), ptr[uint64](4), bus.GapEpochReset, seq(1, 5), false},
		{"epoch without cursor", "?epoch=other", nil, ptr[uint64](5), "", nil, true},
		{"cursor past lastId", "?since=9", nil, ptr[uint64](9), bus.GapEpochReset, seq(1, 5), false},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A session of its own: five events, ids 1 to 5.
			id := fmt.Sprintf("s%d", i)
			for n := range 5 {
				srv.Publish(t, id, ev("a:b", strconv.Itoa(n+1)))
			}
			s, _ := srv.Hub.Session(id)
			epoch := s.Bus.Epoch()
			query := strings.ReplaceAll(tc.query, "EPOCH", epoch)
			st := srv.OpenSSE(t, "/api/v1/sessions/"+id+"/events"+query, tc.header)
			defer st.Close()
			ready := st.MustNext(t)
			if ready.Type != bus.TypeReady {
				t.Fatalf("first frame %s, want stream:ready", ready.Type)
			}
			rd := data[bus.ReadyData](t, ready)
			if (rd.Cursor == nil) != (tc.cursor == nil) || rd.Cursor != nil && *rd.Cursor != *tc.cursor {
				t.Errorf("stream:ready cursor = %s, want %v", ready.Data, fmtPtr(tc.cursor))
			}
			if rd.Epoch != epoch || rd.LastID != 5 {
				t.Errorf("stream:ready = %s, want epoch %s lastId 5", ready.Data, epoch)
			}
			if tc.live {
				r := srv.Publish(t, id, ev("a:live", ""))
				if got := st.MustNext(t); got.ID != r.LastID || got.Type != "a:live" {
					t.Errorf("after stream:ready got %s %d, want the live event %d", got.Type, got.ID, r.LastID)
				}
				return
			}
			next := st.MustNext(t)
			if tc.gap != "" {
				if next.Type != bus.TypeGap {
					t.Fatalf("got %s, want stream:gap", next.Type)
				}
				gd := data[bus.GapData](t, next)
				if gd.Reason != tc.gap || gd.LastDeliveredID != *tc.cursor || gd.LastID != 5 {
					t.Errorf("stream:gap = %s, want reason %s lastDeliveredId %d lastId 5", next.Data, tc.gap, *tc.cursor)
				}
				next = st.MustNext(t)
			}
			var got []uint64
			for next.Type != bus.TypeReplayed {
				if next.ID == 0 {
					t.Fatalf("got %s during the replay", next.Type)
				}
				got = append(got, next.ID)
				next = st.MustNext(t)
			}
			if !slices.Equal(got, tc.replay) {
				t.Errorf("replayed %v, want %v", got, tc.replay)
			}
			rp := data[bus.ReplayedData](t, next)
			if rp.ReplayedCount != len(got) {
				t.Errorf("stream:replayed = %s, want replayedCount %d", next.Data, len(got))
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func fmtPtr(p *uint64) any {
	if p == nil {
		return "null"
	}
	return *p
}

// TestResumeAfterReloadLosesNothing: a reload ends every stream, but the
// buses, their ids, rings and epochs survive, so a client that resumes with
// its last id and epoch gets exactly what it missed.
func TestResumeAfterReloadLosesNothing(t *testing.T) {
	srv := newServer(t)
	for i := range 5 {
		srv.Publish(t, "s", ev("a:b", strconv.Itoa(i+1)))
	}
	st := srv.OpenSSE(t, "/api/v1/sessions/s/events?since=0", nil)
	envs := expectSSE(t, st, bus.TypeReady, "a:b", "a:b", "a:b", "a:b", "a:b", bus.TypeReplayed)
	epoch := data[bus.ReadyData](t, envs[0]).Epoch

	srv.Hub.EndStreams(bus.EndReload)
	if rest := readSSEToEnd(t, st); len(rest) != 1 || rest[0].Type != bus.TypeClosed || data[bus.ClosedData](t, rest[0]).Reason != "reload" {
		t.Fatalf("after reload the stream sent %v, want stream:closed reason reload", bustest.Types(rest))
	}
	for i := range 3 {
		srv.Publish(t, "s", ev("a:b", strconv.Itoa(i+6)))
	}
	re := srv.OpenSSE(t, "/api/v1/sessions/s/events", header("Last-Event-ID", "5", "Localbus-Epoch", epoch))
	got := expectSSE(t, re, bus.TypeReady, "a:b", "a:b", "a:b", bus.TypeReplayed)
	if rd := data[bus.ReadyData](t, got[0]); rd.Epoch != epoch || rd.LastID != 8 {
		t.Errorf("stream:ready after reload %s, want the same epoch %s and lastId 8", got[0].Data, epoch)
	}
	if ids := bustest.IDs(got); !slices.Equal(ids, seq(6, 8)) {
		t.Errorf("resumed with %v, want 6 to 8", ids)
	}
}

// TestHeadOnAStreamRouteOpensNoStream: HEAD on an SSE route answers what
// GET would (status and headers) and ends at once, so the connection is
// free for the next request and no subscriber is left behind.
func TestHeadOnAStreamRouteOpensNoStream(t *testing.T) {
	srv := newServer(t)
	createSession(t, srv, "s")
	s, _ := srv.Hub.Session("s")
	cases := []struct {
		path   string
		status int
	}{
		{"/api/v1/sessions/s/events", http.StatusOK},
		{"/api/v1/sessions/s/events?since=0", http.StatusOK},
		{"/api/v1/events", http.StatusOK},
		{"/api/v1/families/build/events", http.StatusOK},
		{"/api/v1/sessions/nosuch/events", http.StatusNotFound},
		{"/api/v1/sessions/s/events?since=x", http.StatusBadRequest},
	}
	for _, tc := range cases {
		r := srv.Do(t, http.MethodHead, tc.path, nil, nil)
		if r.Status != tc.status || len(r.Body) != 0 {
			t.Errorf("HEAD %s = %d with %d body bytes, want %d and none", tc.path, r.Status, len(r.Body), tc.status)
		}
		if tc.status == http.StatusOK && r.Header.Get("Content-Type") != "text/event-stream" {
			t.Errorf("HEAD %s Content-Type = %q, want text/event-stream", tc.path, r.Header.Get("Content-Type"))
		}
		// The same client, likely the same connection: it must be free.
		if r := srv.Do(t, http.MethodGet, "/healthz", nil, nil); r.Status != http.StatusOK {
			t.Errorf("GET /healthz after HEAD %s = %d", tc.path, r.Status)
		}
	}
	if n := s.Bus.Stats().Subscribers + srv.Hub.Global().Stats().Subscribers; n != 0 {
		t.Errorf("%d subscribers after HEAD requests, want 0", n)
	}
}

// TestResumePastTheRingGetsGap: a cursor older than the ring's oldest event
// gets stream:gap ring_evicted, then the surviving suffix, on both
// transports; cursor 0 too, once id 1 is gone.
func TestResumePastTheRingGetsGap(t *testing.T) {
	srv := newServer(t)
	if r := srv.Do(t, http.MethodPost, "/api/v1/sessions", nil, []byte(`{"id":"r","ringSize":5}`)); r.Status != http.StatusCreated {
		t.Fatalf("create = %d %s", r.Status, r.Body)
	}
	for i := range 10 {
		srv.Publish(t, "r", ev("a:b", strconv.Itoa(i+1)))
	}
	for _, cursor := range []string{"0", "2", "4"} {
		for _, kind := range []string{"events", "ws"} {
			t.Run(kind+" since "+cursor, func(t *testing.T) {
				path := "/api/v1/sessions/r/" + kind + "?since=" + cursor
				var next func() bus.Envelope
				if kind == "events" {
					st := srv.OpenSSE(t, path, nil)
					next = func() bus.Envelope { return st.MustNext(t) }
				} else {
					c := srv.OpenWS(t, path, nil)
					next = func() bus.Envelope { return ipctest.MustReadEnvelope(t, c) }
				}
				var envs []bus.Envelope
				for len(envs) == 0 || envs[len(envs)-1].Type != bus.TypeReplayed {
					envs = append(envs, next())
				}
				want := []string{bus.TypeReady, bus.TypeGap, "a:b", "a:b", "a:b", "a:b", "a:b", bus.TypeReplayed}
				if !slices.Equal(bustest.Types(envs), want) {
					t.Fatalf("frames %v, want %v", bustest.Types(envs), want)
				}
				gd := data[bus.GapData](t, envs[1])
				c, _ := strconv.ParseUint(cursor, 10, 64)
				if gd.Reason != bus.GapRingEvicted || gd.LastDeliveredID != c || gd.EarliestAvailableID == nil || *gd.EarliestAvailableID != 6 || gd.LastID != 10 {
					t.Errorf("stream:gap %s, want ring_evicted from %d, earliest 6, lastId 10", envs[1].Data, c)
				}
				if got := bustest.IDs(envs); !slices.Equal(got, seq(6, 10)) {
					t.Errorf("replayed %v, want 6 to 10", got)
				}
			})
		}
	}
}
