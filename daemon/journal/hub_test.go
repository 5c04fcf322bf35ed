package journal_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/daemon/journal"
)

// TestHubCombinesGlobalPublishesInOrder publishes concurrently to several
// journaled sessions, which the hub combines on the global bus, and checks
// that the global bus holds every event once, each session's in seq order,
// and that this survives a restart.
func TestHubCombinesGlobalPublishesInOrder(t *testing.T) {
	dir := t.TempDir()
	j, err := journal.Open(journal.Options{Dir: dir, Logger: quiet, SegmentBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	h, err := hub.New(hub.Options{Journal: j, AutoCreate: true})
	if err != nil {
		t.Fatal(err)
	}
	const sessions, batches = 6, 40
	var wg sync.WaitGroup
	for s := range sessions {
		wg.Go(func() {
			for k := range batches {
				evs := make([]bus.Event, 1+k%4)
				for i := range evs {
					evs[i] = bus.Event{Type: bustest.Type("t:e"), Data: json.RawMessage(`1`)}
				}
				if _, _, err := h.Publish(bustest.SessionID(fmt.Sprintf("s%d", s)), evs); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	check := func(g *bus.Bus) {
		t.Helper()
		sub, err := g.Subscribe(t.Context(), bus.SubscribeOptions{Cursor: new(uint64), Filter: nil})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		frames, _ := sub.Take(nil)
		next := map[string]uint64{}
		for _, f := range frames {
			if f.Reserved() || f.Type != "t:e" {
				continue
			}
			var env bus.Envelope
			if err := json.Unmarshal(f.JSON(), &env); err != nil {
				t.Fatal(err)
			}
			if env.Seq != next[env.Session]+1 {
				t.Fatalf("global id %d: %s seq %d after %d", f.ID, env.Session, env.Seq, next[env.Session])
			}
			next[env.Session] = env.Seq
		}
		for s := range sessions {
			id := fmt.Sprintf("s%d", s)
			sess, ok := h.Session(id)
			if !ok || next[id] != sess.Bus.LastID() {
				t.Errorf("%s: global bus has seqs up to %d, session's last id %d", id, next[id], sess.Bus.LastID())
			}
		}
	}
	check(h.Global())
	h.Close()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j, err = journal.Open(journal.Options{Dir: dir, Logger: quiet, SegmentBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	h, err = hub.New(hub.Options{Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	check(h.Global())
}
