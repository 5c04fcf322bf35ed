package upstream_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/daemon/upstream"
	"github.com/localbus/localbus/daemon/upstream/natstest"
)

// upstreamGaps reads what a subscription to b (on the session's bus, or
// the global bus with session "") replays from cursor and returns its
// upstream_lost gaps, each with the origin id of the event after it.
func upstreamGaps(t *testing.T, h *hub.Hub, session string, cursor uint64, epoch string) (gaps []bus.GapData, next []uint64) {
	t.Helper()
	b := h.Global()
	if session != "" {
		s, ok := h.Session(session)
		if !ok {
			t.Fatalf("no session %s", session)
		}
		b = s.Bus
	}
	sub, err := b.Subscribe(t.Context(), bus.SubscribeOptions{Cursor: &cursor, Epoch: epoch})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	frames, _ := sub.Take(nil)
	return lostIn(t, frames)
}

// lostIn returns the upstream_lost gaps among frames, each with the origin
// id of the event after it.
func lostIn(t *testing.T, frames []*bus.Frame) (gaps []bus.GapData, next []uint64) {
	t.Helper()
	for i, f := range frames {
		var env struct {
			Type   string
			Data   bus.GapData
			Origin *bus.RemoteOrigin
		}
		if f.Type != bus.TypeGap {
			continue
		}
		if err := json.Unmarshal(f.JSON(), &env); err != nil {
			t.Fatal(err)
		}
		if env.Data.Reason != bus.GapUpstreamLost {
			continue
		}
		gaps = append(gaps, env.Data)
		if i+1 >= len(frames) || frames[i+1].Reserved() {
			t.Fatalf("upstream_lost gap %s is not followed by an event", f.JSON())
		}
		var ev bus.Envelope
		if err := json.Unmarshal(frames[i+1].JSON(), &ev); err != nil || ev.Origin == nil {
			t.Fatalf("event after the gap: %s", frames[i+1].JSON())
		}
		next = append(next, ev.Origin.ID)
	}
	return gaps, next
}

// TestBacklogOverflowIsAGapForMirrorReaders: events the export backlog
// dropped reach the mirror's readers as one stream:gap (upstream_lost)
// naming the missing origin ids, just before the first event after them:
// live, on replay, on the global bus, and after the importing daemon
// restarts.
func TestBacklogOverflowIsAGapForMirrorReaders(t *testing.T) {
	srv := natstest.Start(t)
	a := startNodeRing(t, upstream.Config{URLs: []string{srv.URL()}, Node: "a", Export: []string{"build*"}, BacklogBytes: 20000}, 100)
	b := startNode(t, upstream.Config{URLs: []string{srv.URL()}, Node: "b", Import: []string{"a/*"}})
	a.publish("build", 0, 10, 10)
	waitFor(t, "the first export", func() bool { return lastID(b.h, "a.build") == 10 })
	s, _ := b.h.Session("a.build")
	live, err := s.Bus.Subscribe(t.Context(), bus.SubscribeOptions{MaxQueued: 2048})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()

	srv.Kill()
	const total = 5010
	a.publish("build", 10, total-10, 100)
	srv.Restart()
	waitFor(t, "the export lag to drain", func() bool { return a.br.Status().Lag == 0 })
	st := a.br.Status()
	if st.Lost == 0 {
		t.Fatalf("nothing was lost: status %+v", st)
	}
	last := st.Exported // the mirror's ids are contiguous
	waitFor(t, "the mirror's last event", func() bool { return lastID(b.h, "a.build") == last })

	// Live.
	var frames []*bus.Frame
	deadline := time.After(30 * time.Second)
	for len(frames) == 0 || frames[len(frames)-1].ID != last {
		var ended bool
		if frames, ended = live.Take(frames); ended {
			t.Fatalf("the live reader's stream ended: %s", frames[len(frames)-1].JSON())
		}
		if len(frames) > 0 && frames[len(frames)-1].ID == last {
			break
		}
		select {
		case <-live.Ready():
		case <-deadline:
			t.Fatal("timed out waiting for the live reader")
		}
	}
	check := func(name string, gaps []bus.GapData, next []uint64, lastDelivered, at uint64) {
		t.Helper()
		if len(gaps) != 1 {
			t.Fatalf("%s: %d upstream_lost gaps, want 1: %+v", name, len(gaps), gaps)
		}
		g := gaps[0]
		if g.OriginFrom != 11 || g.OriginTo-g.OriginFrom+1 != st.Lost || next[0] != g.OriginTo+1 {
			t.Errorf("%s: gap names origin ids %d..%d before origin id %d; want 11..%d (lost %d)", name, g.OriginFrom, g.OriginTo, next[0], 10+st.Lost, st.Lost)
		}
		if g.LastDeliveredID != lastDelivered || g.EarliestAvailableID == nil || *g.EarliestAvailableID != at {
			t.Errorf("%s: gap %+v, want lastDeliveredId %d, earliestAvailableId %d", name, g, lastDelivered, at)
		}
	}
	gaps, next := lostIn(t, frames)
	check("live", gaps, next, 10, 11)

	// Replay, on the mirror's bus and on the global bus.
	epoch := s.Bus.Epoch()
	gaps, next = upstreamGaps(t, b.h, "a.build", 5, epoch)
	check("resuming at 5", gaps, next, 10, 11)
	if gaps, _ = upstreamGaps(t, b.h, "a.build", 11, epoch); len(gaps) != 0 {
		t.Errorf("resuming after the event that records the loss: gaps %+v", gaps)
	}
	global := b.h.Global()
	gaps, _ = upstreamGaps(t, b.h, "", 0, global.Epoch())
	if len(gaps) != 1 || gaps[0].OriginFrom != 11 {
		t.Errorf("global bus: gaps %+v, want one from origin id 11", gaps)
	}

	// After a restart, from the journal.
	b.restart()
	gaps, next = upstreamGaps(t, b.h, "a.build", 5, epoch)
	check("resuming at 5 after a restart", gaps, next, 10, 11)
	gaps, _ = upstreamGaps(t, b.h, "", 0, b.h.Global().Epoch())
	if len(gaps) != 1 || gaps[0].OriginFrom != 11 {
		t.Errorf("global bus after a restart: gaps %+v, want one from origin id 11", gaps)
	}
}
