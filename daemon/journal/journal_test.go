package journal

import (
	"bytes"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/localbus/localbus/bus"
)

var modes = []string{SyncAlways, SyncInterval, SyncNever}

func TestRoundTripKeepsEventsIDsEpochsAndSettings(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			j, _ := open(t, dir, Options{Sync: mode})
			g := newBus(t, j, "", 0, 0)
			s1 := newBus(t, j, "s1", 100, 0)
			s2 := newBus(t, j, "s2", 0, 0)
			publish(t, s1, events(0, 3, 50)...)
			publish(t, s1, events(3, 1, 50)...)
			publish(t, s2, events(0, 2, 50)...)
			publish(t, g, events(0, 5, 50)...)
			want := map[string][]*bus.Frame{}
			for _, name := range []string{"", "s1", "s2"} {
				st, _, _, _ := j.OpenBus(name, 0)
				want[name] = retained(st)
			}
			epochs := map[string]string{"": g.Epoch(), "s1": s1.Epoch(), "s2": s2.Epoch()}
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}

			j2, _ := open(t, dir, Options{Sync: mode})
			if got := j2.Sessions(); !slices.Equal(got, []string{"s1", "s2"}) {
				t.Errorf("Sessions() = %v, want [s1 s2]", got)
			}
			for name, frames := range want {
				st, epoch, rs, err := j2.OpenBus(name, 7)
				if err != nil {
					t.Fatal(err)
				}
				if epoch != epochs[name] {
					t.Errorf("bus %q: epoch %q after a clean restart, want %q", name, epoch, epochs[name])
				}
				if wantRS := map[string]int{"s1": 100}[name]; rs != wantRS {
					t.Errorf("bus %q: ring size %d, want %d", name, rs, wantRS)
				}
				got := retained(st)
				if len(got) != len(frames) {
					t.Fatalf("bus %q: %d events restored, want %d", name, len(got), len(frames))
				}
				for i := range got {
					if got[i].ID != frames[i].ID || got[i].Type != frames[i].Type || !bytes.Equal(got[i].SSE(), frames[i].SSE()) {
						t.Errorf("bus %q event %d: restored %q, want %q", name, i, got[i].SSE(), frames[i].SSE())
					}
				}
				if st.LastID() != uint64(len(frames)) {
					t.Errorf("bus %q: LastID() = %d, want %d", name, st.LastID(), len(frames))
				}
			}
			b := newBus(t, j2, "s1", 0, 0)
			if first, _ := publish(t, b, events(9, 1, 10)...); first != 5 {
				t.Errorf("first id after restart = %d, want 5", first)
			}
		})
	}
}

func TestIDsContinueAfterEverythingIsEvicted(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, dir, Options{})
	b := newBus(t, j, "s", 1, 0)
	for i := range 5 {
		publish(t, b, events(i, 1, 10)...)
	}
	if err := j.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	j.Close()
	j2, _ := open(t, dir, Options{})
	b2 := newBus(t, j2, "s", 1, 0)
	if got := b2.LastID(); got != 5 {
		t.Errorf("LastID() after restart = %d, want 5", got)
	}
	if first, _ := publish(t, b2, events(0, 1, 10)...); first != 6 {
		t.Errorf("next id = %d, want 6", first)
	}
}

func TestDeleteRemovesTheSessionAndANewOneStartsOver(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, dir, Options{})
	b := newBus(t, j, "s", 0, 0)
	publish(t, b, events(0, 10, 100)...)
	oldEpoch := b.Epoch()
	if err := j.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := j.Delete("s"); err != nil {
		t.Fatal(err)
	}
	if got := j.Sessions(); len(got) != 0 {
		t.Errorf("Sessions() after Delete = %v, want none", got)
	}
	b2 := newBus(t, j, "s", 0, 0)
	if b2.Epoch() == oldEpoch || b2.LastID() != 0 {
		t.Errorf("recreated session: epoch %q (old %q), lastId %d; want a new epoch and 0", b2.Epoch(), oldEpoch, b2.LastID())
	}
	publish(t, b2, events(0, 2, 10)...)
	j.Close()
	j2, _ := open(t, dir, Options{})
	st, _, _, _ := j2.OpenBus("s", 0)
	if diff := cmp.Diff(span(1, 2), ids(retained(st))); diff != "" {
		t.Errorf("recreated session after restart (-want +got):\n%s", diff)
	}
}

func TestRestoredEventsAreReadFromAnyPointAcrossChunks(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, dir, Options{})
	b := newBus(t, j, "s", 5000, 0)
	for k := range 30 {
		publish(t, b, events(k*100, 100, 250)...)
		if k%7 == 0 {
			if err := j.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
	}
	st0, _, _, _ := j.OpenBus("s", 0)
	want := retained(st0)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j2, _ := open(t, dir, Options{})
	st, _, _, _ := j2.OpenBus("s", 0)
	for _, from := range []uint64{1234, 1, 2999, 3000, 3001, 700} {
		var got []*bus.Frame
		st.Scan(from, func(f *bus.Frame) bool { got = append(got, f); return true })
		wantFrom := want[min(int(from-1), len(want)):]
		if len(got) != len(wantFrom) {
			t.Fatalf("Scan(%d) after restart: %d events, want %d", from, len(got), len(wantFrom))
		}
		for i := range got {
			if !bytes.Equal(got[i].SSE(), wantFrom[i].SSE()) {
				t.Fatalf("Scan(%d) event %d = %q, want %q", from, got[i].ID, got[i].SSE(), wantFrom[i].SSE())
			}
		}
	}
}
