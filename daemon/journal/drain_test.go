package journal

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
)

// sessionEnvelopes returns what every session retains: session → id →
// envelope.
func sessionEnvelopes(t *testing.T, h *hub.Hub) map[string]map[uint64]string {
	t.Helper()
	out := map[string]map[uint64]string{}
	for _, s := range h.Sessions() {
		sub, err := s.Bus.Subscribe(t.Context(), bus.SubscribeOptions{Cursor: new(uint64)})
		if err != nil {
			t.Fatal(err)
		}
		frames, _ := sub.Take(nil)
		sub.Close()
		out[s.ID] = map[uint64]string{}
		for _, f := range frames {
			if !f.Reserved() {
				out[s.ID][f.ID] = string(f.JSON())
			}
		}
	}
	return out
}

// copyDir copies the regular files of dir, as a crash would leave them at
// that moment, into a new directory.
func copyDir(t *testing.T, dir string) string {
	t.Helper()
	to := t.TempDir()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return to
}

// TestKillDuringTheCheckpointAfterOpenLosesNothingAndReusesNoID: Open
// restores a crashed log in memory, serves, and copies the log into the
// database in the background, a segment at a time. A kill at any step of
// that copy (a segment's events committed, before and after the segment is
// removed), with events published since Open, loses no event, changes no
// byte, keeps the epochs (fsync always) and reuses no id.
func TestKillDuringTheCheckpointAfterOpenLosesNothingAndReusesNoID(t *testing.T) {
	dir := t.TempDir()
	h, j, _ := openHub(t, dir, noKicks, 0)
	for k := range 60 {
		hubPublish(t, h, fmt.Sprintf("s%d", k%3), events(k*4, 4, 300))
	}
	h.Close()
	j.crash()
	old := len(segmentsIn(t, dir))
	if old < 4 {
		t.Fatalf("%d segments, want several", old)
	}

	var (
		mu       sync.Mutex
		images   []string // crash images taken during the copy, in order
		steps    []string
		released = make(chan struct{})
	)
	setHooks(t, dir, &hooks{afterCheckpoint: func(seq uint64, removed bool) {
		mu.Lock()
		first := len(images) == 0
		mu.Unlock()
		if first {
			select { // until the test has published after Open
			case <-released:
			case <-time.After(10 * time.Second):
			}
		}
		img := copyDir(t, dir)
		mu.Lock()
		images = append(images, img)
		steps = append(steps, fmt.Sprintf("segment %d, removed %v", seq, removed))
		mu.Unlock()
	}})
	h2, j2, _ := openHub(t, dir, noKicks, 0)
	for k := range 6 {
		hubPublish(t, h2, fmt.Sprintf("s%d", k%3), events(1000+k*2, 2, 300))
	}
	wantGlobal, wantSessions := globalEnvelopes(t, h2), sessionEnvelopes(t, h2)
	epochs := map[string]string{"": h2.Global().Epoch()}
	for _, s := range h2.Sessions() {
		epochs[s.ID] = s.Bus.Epoch()
	}
	close(released)
	waitFor(t, func() bool { return len(segmentsIn(t, dir)) == 1 }) // the copy is done
	h2.Close()
	j2.crash()

	mu.Lock()
	defer mu.Unlock()
	if len(images) < 2*(old-1) {
		t.Fatalf("%d crash images (%v), want two for each of the %d segments copied", len(images), steps, old)
	}
	for i, img := range images {
		h3, _, lb := openHub(t, img, noKicks, 0)
		if diff := cmp.Diff(wantGlobal, globalEnvelopes(t, h3)); diff != "" {
			t.Errorf("killed at %s: global bus (-want +got):\n%s\nlog:\n%s", steps[i], diff, lb)
		}
		if diff := cmp.Diff(wantSessions, sessionEnvelopes(t, h3)); diff != "" {
			t.Errorf("killed at %s: sessions (-want +got):\n%s\nlog:\n%s", steps[i], diff, lb)
		}
		if got := h3.Global().Epoch(); got != epochs[""] {
			t.Errorf("killed at %s: the global bus's epoch changed", steps[i])
		}
		for _, s := range h3.Sessions() {
			if s.Bus.Epoch() != epochs[s.ID] {
				t.Errorf("killed at %s: session %s's epoch changed", steps[i], s.ID)
			}
			last := s.Bus.LastID()
			first, _, err := h3.Publish(bustest.SessionID(s.ID), events(0, 1, 10))
			if err != nil {
				t.Fatal(err)
			}
			if first != last+1 || last != uint64(len(wantSessions[s.ID])) {
				t.Errorf("killed at %s: session %s: next id %d after %d, want %d", steps[i], s.ID, first, last, len(wantSessions[s.ID])+1)
			}
		}
		h3.Close()
	}
}

// TestRemovingASegmentCopiesTheGlobalEventsThatReferToIt: the global
// bus's copy of a session event can be logged in the segment after the
// session's record (the log rolled over between the two). Removing the
// session's segment copies that global event too, though its record stays
// in the log, so that a crash does not leave a reference the log cannot
// resolve; a global event of a later segment, referring to that segment,
// stays in the log only.
func TestRemovingASegmentCopiesTheGlobalEventsThatReferToIt(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	j, _ := open(t, dir, noKicks)
	s := newBus(t, j, "s", 1000, 64<<20)
	g := newBus(t, j, "", 1000, 64<<20)
	frames := publishFrames(t, s, bus.Event{Type: bustest.Type("a:b"), Data: json.RawMessage(`{"k":1}`), Time: at})
	if _, _, err := j.wal.rotate(); err != nil { // segment 2
		t.Fatal(err)
	}
	gid, _, err := bustest.PublishCopies(g, bus.Copies{From: s, Frames: frames})
	if err != nil {
		t.Fatal(err)
	}
	if !refOf(t, j, dir, gid) {
		t.Fatal("the copy is not logged as a reference")
	}
	if _, _, err := j.wal.rotate(); err != nil { // segment 3
		t.Fatal(err)
	}
	later := publishFrames(t, s, bus.Event{Type: bustest.Type("a:b"), Data: json.RawMessage(`{"k":2}`), Time: at})
	gid2, _, err := bustest.PublishCopies(g, bus.Copies{From: s, Frames: later})
	if err != nil {
		t.Fatal(err)
	}
	j.ckptMu.Lock()
	err = j.checkpointThrough(1)
	j.ckptMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if first := segmentsIn(t, dir)[0]; first != filepath.Join(dir, segmentName(2)) {
		t.Fatalf("oldest segment after removing segment 1: %s", first)
	}
	if n, _ := onDisk(t, j, ""); n != 1 || gid != 1 || gid2 != 2 {
		t.Errorf("global bus in the database: %d events, want 1: the copy %d (not %d, which refers to segment 3)", n, gid, gid2)
	}
	gst, _, _, _ := j.OpenBus("", 0)
	want := envelopes(retained(gst))
	j.crash()
	j2, lb := open(t, dir, noKicks)
	st, _, _, _ := j2.OpenBus("", 0)
	if diff := cmp.Diff(want, envelopes(retained(st))); diff != "" {
		t.Errorf("global bus after a crash (-want +got):\n%s\nlog:\n%s", diff, lb)
	}
}
