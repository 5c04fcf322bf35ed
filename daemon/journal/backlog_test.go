package journal

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/daemon/journal/journaltest"
)

// exportOnly returns a SetExported match for the sessions names.
func exportOnly(names ...string) func(string) bool {
	return func(s string) bool {
		for _, n := range names {
			if s == n {
				return true
			}
		}
		return false
	}
}

// exportIDs returns the ids ReadExport reads of session from id 1 on.
func exportIDs(j *Journal, session, epoch string) []uint64 {
	return ids(j.ReadExport(session, epoch, 1, math.MaxUint64, 1<<20, nil))
}

func TestExportBacklogIsKeptBeyondTheRingUntilConfirmed(t *testing.T) {
	j, _ := open(t, t.TempDir(), Options{})
	j.SetExported(exportOnly("s"))
	b := newBus(t, j, "s", 10, 0)
	for i := range 10 {
		publish(t, b, events(i*10, 10, 50)...)
	}
	st := j.storeOf("s")
	// The bus sees its ring only.
	if n, e := st.Len(), st.Earliest(); n != 10 || e != 91 {
		t.Errorf("ring: Len %d, Earliest %d; want 10, 91", n, e)
	}
	if got := ids(retained(st)); got[0] != 91 || len(got) != 10 {
		t.Errorf("ring scan = %v, want 91..100", got)
	}
	// The exporter reads the backlog and the ring, held from the
	// session's first event: it was exported when it was created.
	if got := exportIDs(j, "s", b.Epoch()); len(got) != 100 || got[0] != 1 || got[99] != 100 {
		t.Fatalf("ReadExport from 1 = %d events, %v", len(got), got)
	}
	if got := j.ReadExport("s", "another-epoch", 1, math.MaxUint64, 1000, nil); len(got) != 0 {
		t.Errorf("ReadExport of another epoch = %d events, want none", len(got))
	}
	if j.BacklogBytes() <= 0 || j.ExportBacklog("s") != j.BacklogBytes() {
		t.Errorf("backlog %d bytes, of s %d", j.BacklogBytes(), j.ExportBacklog("s"))
	}
	// An exporter without a cursor starts where the hold is.
	if epoch, id, held := j.HoldExport("s", "", 0); epoch != b.Epoch() || id != 0 || !held {
		t.Errorf("HoldExport without a cursor = %q, %d, %v; want %q, 0, true", epoch, id, held, b.Epoch())
	}
	// A cursor of another epoch leaves the hold where it is.
	if _, id, _ := j.HoldExport("s", "another-epoch", 70); id != 0 {
		t.Errorf("a cursor of another epoch moved the hold to %d", id)
	}
	// Confirmed events leave the backlog.
	if _, id, _ := j.HoldExport("s", b.Epoch(), 50); id != 50 {
		t.Errorf("HoldExport(50) = %d", id)
	}
	if got := exportIDs(j, "s", b.Epoch()); got[0] != 51 {
		t.Errorf("after confirming 50, the backlog starts at %d, want 51", got[0])
	}
	j.HoldExport("s", b.Epoch(), 100)
	if j.BacklogBytes() != 0 {
		t.Errorf("backlog after confirming everything = %d bytes, want 0", j.BacklogBytes())
	}
	// Without a hold nothing is kept beyond the ring, and HoldExport
	// starts none.
	b2 := newBus(t, j, "t", 10, 0)
	publish(t, b2, events(0, 100, 50)...)
	if _, _, held := j.HoldExport("t", b2.Epoch(), 0); held || j.ExportBacklog("t") != 0 {
		t.Errorf("an unexported bus: held %v, %d bytes of backlog", held, j.ExportBacklog("t"))
	}
}

// TestExportBacklogSurvivesARestart pins SPEC §12: what export owes beyond
// the ring is kept across a restart of the daemon, clean or killed, and
// the hold restored at Open keeps every restored event until the exporter
// moves it to its cursor.
func TestExportBacklogSurvivesARestart(t *testing.T) {
	for _, stop := range []string{"close", "crash"} {
		t.Run(stop, func(t *testing.T) {
			dir := t.TempDir()
			j, _ := open(t, dir, Options{SegmentBytes: 64 << 10})
			j.SetExported(exportOnly("s"))
			b := newBus(t, j, "s", 10, 0)
			other := newBus(t, j, "t", 10, 0)
			for i := range 100 {
				publish(t, b, events(i*10, 10, 100)...)
				publish(t, other, events(i*10, 10, 100)...)
				if i == 50 {
					// Part of it in the database, the rest in the log.
					if err := j.Checkpoint(); err != nil {
						t.Fatal(err)
					}
				}
			}
			j.HoldExport("s", b.Epoch(), 200)
			epoch := b.Epoch()
			b.Close()
			other.Close()
			if stop == "close" {
				if err := j.Close(); err != nil {
					t.Fatal(err)
				}
			} else {
				j.crash()
			}

			j2, _ := open(t, dir, Options{SegmentBytes: 64 << 10})
			j2.SetExported(exportOnly("s"))
			b2 := newBus(t, j2, "s", 10, 0)
			newBus(t, j2, "t", 10, 0)
			if b2.Epoch() != epoch {
				t.Fatalf("epoch %q after the restart, want %q", b2.Epoch(), epoch)
			}
			if n := b2.Stats().RingLen; n != 10 {
				t.Errorf("ring after the restart holds %d events, want 10", n)
			}
			if got, id, held := j2.HoldExport("s", epoch, 200); got != epoch || id != 200 || !held {
				t.Errorf("HoldExport after the restart = %q, %d, %v", got, id, held)
			}
			if diff := cmpIDs(span(201, 1000), exportIDs(j2, "s", epoch)); diff != "" {
				t.Errorf("the backlog after the restart (-want +got):\n%s", diff)
			}
			if j2.ExportBacklog("t") != 0 {
				t.Errorf("an unexported session kept %d bytes beyond its ring", j2.ExportBacklog("t"))
			}
			// And a restart after that (a checkpoint copied what Open
			// restored) still holds it.
			if err := j2.Close(); err != nil {
				t.Fatal(err)
			}
			j3, _ := open(t, dir, Options{})
			j3.SetExported(exportOnly("s"))
			newBus(t, j3, "s", 10, 0)
			j3.HoldExport("s", epoch, 500)
			if diff := cmpIDs(span(501, 1000), exportIDs(j3, "s", epoch)); diff != "" {
				t.Errorf("the backlog after a second restart (-want +got):\n%s", diff)
			}
		})
	}
}

// cmpIDs describes how got differs from want, "" when equal.
func cmpIDs(want, got []uint64) string {
	if slices.Equal(want, got) {
		return ""
	}
	return "-" + describeIDs(want) + "\n+" + describeIDs(got)
}

// describeIDs summarises ids: first, last, count, and whether they are
// consecutive.
func describeIDs(ids []uint64) string {
	if len(ids) == 0 {
		return "none"
	}
	consecutive := ids[len(ids)-1]-ids[0]+1 == uint64(len(ids))
	return fmt.Sprintf("%d..%d (%d ids, consecutive %v)", ids[0], ids[len(ids)-1], len(ids), consecutive)
}

// TestExportBacklogPastItsBoundDropsTheOldestOfAnySession pins SPEC §12:
// past backlog_bytes the oldest unexported events go first, whichever
// session they belong to, and the drop is logged with its range.
func TestExportBacklogPastItsBoundDropsTheOldestOfAnySession(t *testing.T) {
	j, logs := open(t, t.TempDir(), Options{})
	j.SetExported(exportOnly("s1", "s2"))
	s1 := newBus(t, j, "s1", 10, 0)
	s2 := newBus(t, j, "s2", 10, 0)
	// s1 first: 40 events beyond its ring.
	for i := range 5 { // data of one size: 3-digit numbers
		publish(t, s1, events(100+i*10, 10, 50)...)
	}
	per := j.BacklogBytes() / 40
	j.SetBacklogBytes(60*per + per/2) // room for 60 events of backlog
	if got := exportIDs(j, "s1", s1.Epoch()); len(got) != 50 {
		t.Fatalf("s1 before the bound: %d events, want 50", len(got))
	}
	// Then s2: 40 beyond its ring, 80 in all: s1's oldest 20 go.
	for i := range 5 {
		publish(t, s2, events(100+i*10, 10, 50)...)
	}
	if diff := cmpIDs(span(21, 50), exportIDs(j, "s1", s1.Epoch())); diff != "" {
		t.Errorf("s1 after s2's burst (-want +got):\n%s", diff)
	}
	if got := exportIDs(j, "s2", s2.Epoch()); len(got) != 50 || got[0] != 1 {
		t.Errorf("s2 lost its events though s1's were older: %d from %v", len(got), got[:1])
	}
	// Then s2 again: s1's backlog goes entirely before s2's oldest.
	for i := 5; i < 8; i++ {
		publish(t, s2, events(100+i*10, 10, 50)...)
	}
	if diff := cmpIDs(span(41, 50), exportIDs(j, "s1", s1.Epoch())); diff != "" {
		t.Errorf("s1 after s2's second burst: only its ring is left (-want +got):\n%s", diff)
	}
	if diff := cmpIDs(span(11, 80), exportIDs(j, "s2", s2.Epoch())); diff != "" {
		t.Errorf("s2 after its second burst (-want +got):\n%s", diff)
	}
	if got := j.BacklogBytes(); got > 60*per+per/2 {
		t.Errorf("backlog = %d bytes, over its bound %d", got, 60*per+per/2)
	}
	if !strings.Contains(logs.String(), "over backlog_bytes; dropping the oldest unexported events") ||
		!strings.Contains(logs.String(), "session=s1 from=1 ") {
		t.Errorf("no log line with the first range dropped:\n%s", logs)
	}
	// A deleted bus's backlog is forgotten.
	if err := j.Delete("s2"); err != nil {
		t.Fatal(err)
	}
	if j.BacklogBytes() != 0 {
		t.Errorf("backlog after deleting its bus = %d bytes", j.BacklogBytes())
	}
}

func TestExportBacklogIsReleasedWhenTheSessionIsNoLongerExported(t *testing.T) {
	j, _ := open(t, t.TempDir(), Options{})
	j.SetExported(exportOnly("s"))
	b := newBus(t, j, "s", 10, 0)
	publish(t, b, events(0, 100, 50)...)
	if j.ExportBacklog("s") == 0 {
		t.Fatal("no backlog held")
	}
	j.SetExported(exportOnly("other"))
	if j.BacklogBytes() != 0 || j.ExportBacklog("s") != 0 {
		t.Errorf("after the session is no longer exported: backlog %d bytes", j.BacklogBytes())
	}
	publish(t, b, events(100, 100, 50)...)
	if j.BacklogBytes() != 0 {
		t.Errorf("a released session keeps %d bytes of backlog", j.BacklogBytes())
	}
	// Exported again: held from what its ring retains then.
	j.SetExported(exportOnly("s"))
	if _, id, held := j.HoldExport("s", "", 0); !held || id != 190 {
		t.Errorf("hold of a session exported again = %d, %v; want 190 (its ring starts at 191)", id, held)
	}
}

// TestADiskFullDropsTheExportBacklogBeforeRefusingAPublish pins SPEC §12:
// if the disk fills while a backlog is held, the backlog gives way first:
// a publish is refused only once there is none left to drop.
func TestADiskFullDropsTheExportBacklogBeforeRefusingAPublish(t *testing.T) {
	mnt := t.TempDir()
	journaltest.SmallDisk(t, mnt, 8<<20)
	j, logs := open(t, filepath.Join(mnt, "journal"), Options{SegmentBytes: 256 << 10})
	j.SetExported(exportOnly("s"))
	b := newBus(t, j, "s", 10, 0)
	for i := range 200 { // about 2 MiB of backlog
		publish(t, b, events(i*10, 10, 1000)...)
	}
	release := journaltest.Fill(t, mnt)
	defer release()

	// Publishing on: the backlog gives way, and a publish is refused only
	// once none is left.
	next, refused := 2000, false
	for range 2000 {
		held := j.BacklogBytes()
		_, _, err := b.Publish(events(next, 10, 1000)...)
		if err == nil {
			next += 10
			continue
		}
		if !errors.Is(err, bus.ErrDiskFull) {
			t.Fatalf("publish: %v, want ErrDiskFull", err)
		}
		if got := j.BacklogBytes(); got != 0 {
			t.Fatalf("a publish was refused with %d bytes of backlog held (%d before it)", got, held)
		}
		refused = true
		break
	}
	if !strings.Contains(logs.String(), "the disk is full; dropping the oldest unexported events") {
		t.Fatalf("the disk never filled, or no log line for the backlog dropped:\n%s", logs)
	}
	if got := exportIDs(j, "s", b.Epoch()); got[0] == 1 {
		t.Errorf("after the disk filled, the backlog still starts at id 1")
	}
	if got := b.LastID(); got <= 2000 {
		t.Errorf("no publish succeeded on the full disk: last id %d", got)
	}
	t.Logf("published up to id %d on the full disk; refused then: %v", b.LastID(), refused)
}

// TestExportReadsOnlyWhatTheBusMayShow: with SyncAlways an event is
// exported only once it is durable, as the bus shows it only then:
// ReadExport reads up to the id the exporter's bus shows (0 before the
// record is durable, 2 after), never an appended event past it.
func TestExportReadsOnlyWhatTheBusMayShow(t *testing.T) {
	j, _ := open(t, t.TempDir(), Options{})
	j.SetExported(exportOnly("s"))
	st, epoch, _, err := j.OpenBus("s", 10)
	if err != nil {
		t.Fatal(err)
	}
	ds := st.(bus.DeferredStore)
	frame := func(id uint64) *bus.Frame {
		return bus.NewFrame(id, "test:ev", fmt.Appendf(nil, `{"id":%d,"v":1,"type":"test:ev","session":"s"}`, id))
	}
	mark, durable, err := ds.AppendDeferred([]*bus.Frame{frame(1), frame(2)})
	if err != nil || durable {
		t.Fatalf("AppendDeferred = %v, durable %v", err, durable)
	}
	if got := ids(j.ReadExport("s", epoch, 1, 0, 1000, nil)); len(got) != 0 {
		t.Errorf("before the record is durable, export reads %v", got)
	}
	if _, err := ds.WaitDurable(mark); err != nil {
		t.Fatal(err)
	}
	if got := ids(j.ReadExport("s", epoch, 1, 1, 1000, nil)); fmt.Sprint(got) != "[1]" {
		t.Errorf("up to id 1, export reads %v", got)
	}
	if diff := cmpIDs(span(1, 2), ids(j.ReadExport("s", epoch, 1, 2, 1000, nil))); diff != "" {
		t.Errorf("once durable (-want +got):\n%s", diff)
	}
}
