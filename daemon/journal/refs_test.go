package journal

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
)

// openHub opens a journal in dir and a hub on it, with rings of ringSize.
func openHub(t *testing.T, dir string, o Options, ringSize int) (*hub.Hub, *Journal, *logBuf) {
	t.Helper()
	j, lb := open(t, dir, o)
	h, err := hub.New(hub.Options{Journal: j, AutoCreate: true, Limits: bus.Limits{RingSize: ringSize}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h, j, lb
}

// globalEnvelopes returns what the global bus retains: id → envelope.
func globalEnvelopes(t *testing.T, h *hub.Hub) map[uint64]string {
	t.Helper()
	sub, err := h.Global().Subscribe(t.Context(), bus.SubscribeOptions{Cursor: new(uint64)})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	frames, _ := sub.Take(nil)
	out := map[uint64]string{}
	for _, f := range frames {
		if !f.Reserved() {
			out[f.ID] = string(f.JSON())
		}
	}
	return out
}

// sessionIDs returns the ids each session retains.
func sessionIDs(t *testing.T, h *hub.Hub) map[string][]uint64 {
	t.Helper()
	out := map[string][]uint64{}
	for _, s := range h.Sessions() {
		sub, err := s.Bus.Subscribe(t.Context(), bus.SubscribeOptions{Cursor: new(uint64)})
		if err != nil {
			t.Fatal(err)
		}
		frames, _ := sub.Take(nil)
		sub.Close()
		for _, f := range frames {
			if !f.Reserved() {
				out[s.ID] = append(out[s.ID], f.ID)
			}
		}
	}
	return out
}

func hubPublish(t *testing.T, h *hub.Hub, session string, evs []bus.Event) {
	t.Helper()
	if _, _, err := h.Publish(bustest.SessionID(session), evs); err != nil {
		t.Fatalf("Publish(%s): %v", session, err)
	}
}

// logRecords returns the records of dir's log, in order.
func logRecords(t *testing.T, dir string) []record {
	t.Helper()
	var out []record
	for _, path := range segmentsIn(t, dir) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, cutRecords(data, true).recs...)
	}
	return out
}

func TestGlobalCopiesAreLoggedAsReferencesAndRestoredExactly(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			o := noKicks
			o.Sync = mode
			h, j, _ := openHub(t, dir, o, 0)
			for k := range 4 {
				evs := events(k*10, 10, 200)
				evs[3].Originator = "cli-7"
				hubPublish(t, h, fmt.Sprintf("s%d", k%2), evs)
			}
			want := globalEnvelopes(t, h)
			if len(want) != 42 { // 40 copies, 2 session-opened announcements
				t.Fatalf("global bus holds %d events, want 42", len(want))
			}

			j.mu.Lock()
			globalNum := j.names[""]
			j.mu.Unlock()
			var refs, full int
			for _, r := range logRecords(t, dir) {
				switch {
				case r.num != globalNum:
				case r.refs != nil:
					refs += r.count
				default:
					full += r.count
				}
			}
			if refs != 40 || full != 2 {
				t.Errorf("global bus's log: %d events as references, %d in full; want 40, 2 (the announcements)", refs, full)
			}

			h.Close()
			j.crash()
			h2, _, lb := openHub(t, dir, o, 0)
			if diff := cmp.Diff(want, globalEnvelopes(t, h2)); diff != "" {
				t.Errorf("global bus after a crash (-want +got):\n%s\nlog:\n%s", diff, lb)
			}
		})
	}
}

func TestReferencesSurviveTheDeletionOfTheirSession(t *testing.T) {
	dir := t.TempDir()
	h, j, _ := openHub(t, dir, noKicks, 0)
	hubPublish(t, h, "gone", events(0, 5, 100))
	hubPublish(t, h, "kept", events(5, 5, 100))
	if err := h.Delete("gone"); err != nil {
		t.Fatal(err)
	}
	want := globalEnvelopes(t, h)
	h.Close()
	j.crash()
	h2, _, lb := openHub(t, dir, noKicks, 0)
	if diff := cmp.Diff(want, globalEnvelopes(t, h2)); diff != "" {
		t.Errorf("global bus after a crash (-want +got):\n%s\nlog:\n%s", diff, lb)
	}
	if _, ok := h2.Session("gone"); ok {
		t.Error("the deleted session came back")
	}
}

// TestReferencesNeverPointIntoRemovedSegments publishes from several
// goroutines into sessions whose rings evict quickly, while compactions
// and checkpoints remove segments, then crashes: every copy the global bus
// held must come back, byte for byte. The race is narrow: five rounds.
func TestReferencesNeverPointIntoRemovedSegments(t *testing.T) {
	for round := range 5 {
		t.Run(fmt.Sprint(round), referencesSurviveCompaction)
	}
}

func referencesSurviveCompaction(t *testing.T) {
	dir := t.TempDir()
	o := Options{Sync: SyncNever, SegmentBytes: 8 << 10, CheckpointBytes: 1 << 40, CheckpointInterval: 1 << 40}
	h, j, _ := openHub(t, dir, o, 30)
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		for k := 0; ; k++ {
			select {
			case <-done:
				return
			default:
			}
			var err error
			if k%5 == 4 {
				err = j.Checkpoint()
			} else {
				err = j.compact()
			}
			if err != nil {
				t.Error(err)
				return
			}
		}
	})
	var pubs sync.WaitGroup
	for p := range 3 {
		pubs.Go(func() {
			for k := range 60 {
				if _, _, err := h.Publish(bustest.SessionID(fmt.Sprintf("s%d", p)), events(k*3, 1+k%3, 150)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	pubs.Wait()
	close(done)
	wg.Wait()
	want := globalEnvelopes(t, h)
	wantSessions := sessionIDs(t, h)
	h.Close()
	j.crash()
	h2, _, lb := openHub(t, dir, o, 30)
	if diff := cmp.Diff(want, globalEnvelopes(t, h2)); diff != "" {
		t.Errorf("global bus after a crash (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantSessions, sessionIDs(t, h2)); diff != "" {
		t.Errorf("sessions after a crash (-want +got):\n%s", diff)
	}
	if strings.Contains(lb.String(), "level=ERROR") {
		t.Errorf("recovery logged errors:\n%s", lb)
	}
}

func TestAReferenceToEventsTheLogLacksIsDroppedAsCorrupt(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, dir, Options{})
	g := newBus(t, j, "", 0, 0)
	publish(t, g, bus.Event{Type: bustest.Type("a:b"), Data: json.RawMessage(`1`)})
	epoch := g.Epoch()
	j.mu.Lock()
	num := j.names[""]
	j.mu.Unlock()
	// A whole record, checksum and all, naming a bus the log never held.
	if _, _, err := j.wal.append(appendRefsRecord(nil, num, 2, 1, []refRun{{num: 99, first: 1, n: 1}})); err != nil {
		t.Fatal(err)
	}
	j.crash()
	j2, lb := open(t, dir, Options{})
	st, epoch2, _, _ := j2.OpenBus("", 0)
	if diff := cmp.Diff(span(1, 1), ids(retained(st))); diff != "" {
		t.Errorf("global bus (-want +got):\n%s", diff)
	}
	if epoch2 == epoch {
		t.Error("epoch kept after dropping a record")
	}
	for _, want := range []string{"refers to events the log does not hold", "corrupt log record"} {
		if !strings.Contains(lb.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, lb)
		}
	}
}

// TestACopyOfAnEventInARemovedSegmentIsLoggedInFull publishes a session's
// event, removes the log segment that holds it, then publishes its global
// copy: the copy cannot refer to the removed record, so its record holds
// the event, and it comes back after a crash.
func TestACopyOfAnEventInARemovedSegmentIsLoggedInFull(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, removal := range []string{"none", "checkpoint", "compaction"} {
		t.Run(removal, func(t *testing.T) {
			dir := t.TempDir()
			j, _ := open(t, dir, noKicks)
			s := newBus(t, j, "s", 1000, 64<<20)
			g := newBus(t, j, "", 1000, 64<<20)
			frames := publishFrames(t, s, bus.Event{Type: bustest.Type("a:b"), Data: json.RawMessage(`{"k":1}`), Time: at})
			switch removal {
			case "checkpoint":
				if err := j.Checkpoint(); err != nil {
					t.Fatal(err)
				}
			case "compaction":
				other := newBus(t, j, "other", 1, 64<<20) // evicts at once: its segments go
				for k := range 100 {
					publish(t, other, events(k, 1, 300)...)
				}
				if err := j.compact(); err != nil {
					t.Fatal(err)
				}
			}
			removed := segmentsIn(t, dir)[0] != filepath.Join(dir, segmentName(1))
			if removed != (removal != "none") {
				t.Fatalf("segment 1, which holds the session's event, removed: %v; segments %v", removed, segmentsIn(t, dir))
			}
			// A later event of the session, in a segment that stays.
			publish(t, s, bus.Event{Type: bustest.Type("a:b"), Time: at})
			gid, _, err := bustest.PublishCopies(g, bus.Copies{From: s, Frames: frames})
			if err != nil {
				t.Fatal(err)
			}
			if ref := refOf(t, j, dir, gid); ref != !removed {
				t.Errorf("the copy logged as a reference: %v, want %v", ref, !removed)
			}
			gst, _, _, _ := j.OpenBus("", 0)
			want := envelopes(retained(gst))
			j.crash()
			j2, lb := open(t, dir, noKicks)
			st, _, _, _ := j2.OpenBus("", 0)
			if diff := cmp.Diff(want, envelopes(retained(st))); diff != "" {
				t.Errorf("global bus after a crash (-want +got):\n%s\nlog:\n%s", diff, lb)
			}
		})
	}
}

// TestACopyOfADeletedSessionsEventIsLoggedInFull deletes a session and
// creates it again, then publishes the copy of an event of the first one:
// the new session holds an event under the same id, but the copy's CopyOf
// names the old epoch, so its record holds the event, and the copy comes
// back after a crash as it was served.
func TestACopyOfADeletedSessionsEventIsLoggedInFull(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, dir, noKicks)
	g := newBus(t, j, "", 1000, 64<<20)
	old := newBus(t, j, "s", 1000, 64<<20)
	frames := publishFrames(t, old, bus.Event{Type: bustest.Type("a:b"), Data: json.RawMessage(`"old"`)})
	if err := j.Delete("s"); err != nil {
		t.Fatal(err)
	}
	again := newBus(t, j, "s", 1000, 64<<20)
	publish(t, again, bus.Event{Type: bustest.Type("a:b"), Data: json.RawMessage(`"new"`)})
	gid, _, err := bustest.PublishCopies(g, bus.Copies{From: old, Frames: frames})
	if err != nil {
		t.Fatal(err)
	}
	if refOf(t, j, dir, gid) {
		t.Error("the copy was logged as a reference to the new session's event")
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

// TestACopyOfAnEventRestoredFromTheDatabaseIsLoggedInFull copies, after a
// restart, an event the session held before it: the event is in the
// database, not the log, even though the session has written to the log
// since, so the copy's record holds the event.
func TestACopyOfAnEventRestoredFromTheDatabaseIsLoggedInFull(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, dir, noKicks)
	publish(t, newBus(t, j, "s", 1000, 64<<20), bus.Event{Type: bustest.Type("a:b"), Data: json.RawMessage(`1`)})
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j2, _ := open(t, dir, noKicks)
	s := newBus(t, j2, "s", 1000, 64<<20)
	g := newBus(t, j2, "", 1000, 64<<20)
	restored := retainedFrames(t, s)
	publish(t, s, bus.Event{Type: bustest.Type("a:b"), Data: json.RawMessage(`2`)})
	gid, _, err := bustest.PublishCopies(g, bus.Copies{From: s, Frames: restored})
	if err != nil {
		t.Fatal(err)
	}
	if refOf(t, j2, dir, gid) {
		t.Error("the copy of a restored event was logged as a reference")
	}
	gst, _, _, _ := j2.OpenBus("", 0)
	want := envelopes(retained(gst))
	j2.crash()
	j3, lb := open(t, dir, noKicks)
	st, _, _, _ := j3.OpenBus("", 0)
	if diff := cmp.Diff(want, envelopes(retained(st))); diff != "" {
		t.Errorf("global bus after a crash (-want +got):\n%s\nlog:\n%s", diff, lb)
	}
}

// retainedFrames returns the events b retains, as a replay gets them.
func retainedFrames(t *testing.T, b *bus.Bus) []*bus.Frame {
	t.Helper()
	sub, err := b.Subscribe(t.Context(), bus.SubscribeOptions{Cursor: new(uint64)})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	frames, _ := sub.Take(nil)
	var out []*bus.Frame
	for _, f := range frames {
		if !f.Reserved() {
			out = append(out, f)
		}
	}
	return out
}

// TestNoReferenceIntoASegmentACheckpointIsRemoving pins the rule for the
// moment between a checkpoint's snapshot of the global bus and its
// snapshot of a session: the session still lists the segment, but the
// global bus's copy must not refer to it.
func TestNoReferenceIntoASegmentACheckpointIsRemoving(t *testing.T) {
	j, _ := open(t, t.TempDir(), noKicks)
	s := newBus(t, j, "s", 1000, 64<<20)
	frames := publishFrames(t, s, bus.Event{Type: bustest.Type("a:b"), Data: json.RawMessage(`1`)})
	mem, err := bus.New(bus.Options{}) // the global bus's frame, not logged
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	sub, err := mem.Subscribe(t.Context(), bus.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	sub.Take(nil) // stream:ready
	if _, _, err := bustest.PublishCopies(mem, bus.Copies{From: s, Frames: frames}); err != nil {
		t.Fatal(err)
	}
	copies, _ := sub.Take(nil)
	runs := j.copyRunsOf(copies)
	if len(runs) != 1 {
		t.Fatalf("copyRunsOf = %+v, want one run", runs)
	}
	if refs, _ := j.refsFor(runs); len(refs) != 1 {
		t.Errorf("segment 1 not being removed: refsFor = %+v, want one run", refs)
	}
	j.retired.Store(1)
	if refs, _ := j.refsFor(runs); refs != nil {
		t.Errorf("segment 1 being removed: refsFor = %+v, want nil", refs)
	}
}

// publishFrames publishes evs on b and returns their frames.
func publishFrames(t *testing.T, b *bus.Bus, evs ...bus.Event) []*bus.Frame {
	t.Helper()
	frames, err := bustest.PublishFrames(b, evs...)
	if err != nil {
		t.Fatalf("PublishFrames: %v", err)
	}
	return frames
}

// refOf reports whether the global bus's log record of event id is a
// reference; it fails the test if the log holds no such record.
func refOf(t *testing.T, j *Journal, dir string, id uint64) bool {
	t.Helper()
	j.mu.Lock()
	num := j.names[""]
	j.mu.Unlock()
	for _, r := range logRecords(t, dir) {
		if r.num == num && r.firstID == id {
			return r.refs != nil
		}
	}
	t.Fatalf("no log record of global event %d", id)
	return false
}

// envelopes returns the envelopes of frames, by id.
func envelopes(frames []*bus.Frame) map[uint64]string {
	out := map[uint64]string{}
	for _, f := range frames {
		out[f.ID] = string(f.JSON())
	}
	return out
}

// TestTwoCrashesInARowRestoreEverything crashes a journal, then crashes
// the one that recovered it before any checkpoint: sessions and the global
// bus's references come back whole from the log both times.
func TestTwoCrashesInARowRestoreEverything(t *testing.T) {
	dir := t.TempDir()
	h, j, _ := openHub(t, dir, noKicks, 0)
	for k := range 30 {
		hubPublish(t, h, fmt.Sprintf("s%d", k%3), events(k*4, 4, 300))
	}
	want := globalEnvelopes(t, h)
	h.Close()
	j.crash()
	h1, j1, _ := openHub(t, dir, noKicks, 0)
	h1.Close()
	j1.crash()
	h2, _, lb := openHub(t, dir, noKicks, 0)
	if diff := cmp.Diff(want, globalEnvelopes(t, h2)); diff != "" {
		t.Errorf("global bus after two crashes (-want +got):\n%s\nlog:\n%s", diff, lb)
	}
	for k := range 3 {
		s, ok := h2.Session(fmt.Sprintf("s%d", k))
		if !ok {
			t.Fatalf("session s%d not restored", k)
		}
		if st := s.Bus.Stats(); st.RingLen != 40 {
			t.Errorf("session s%d: %d events restored, want 40", k, st.RingLen)
		}
	}
}
