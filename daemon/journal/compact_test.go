package journal

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// noKicks keeps the background from compacting or checkpointing, so that a
// test calls compact itself.
var noKicks = Options{SegmentBytes: 16 << 10, CheckpointBytes: 1 << 40, CheckpointInterval: time.Hour}

func TestCompactionRemovesOldSegmentsAndCopiesOnlyWhatRingsRetain(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			o := noKicks
			o.Sync = mode
			j, _ := open(t, dir, o)
			quiet := newBus(t, j, "quiet", 1000, 64<<20)
			busy := newBus(t, j, "busy", 20, 64<<20)
			publish(t, quiet, events(0, 5, 300)...)
			for i := range 40 {
				publish(t, busy, events(i*5, 5, 300)...) // about 10 batches to a segment
			}
			before := segmentsIn(t, dir)
			if len(before) < 4 {
				t.Fatalf("%d segments, want several", len(before))
			}
			if err := j.compact(); err != nil {
				t.Fatal(err)
			}
			after := segmentsIn(t, dir)
			if len(after) >= len(before) || after[len(after)-1] != before[len(before)-1] {
				t.Errorf("segments before compaction %v, after %v: want the oldest removed", before, after)
			}
			// The quiet session's events were in a removed segment and are
			// retained: copied. The busy session's there were evicted: not.
			if n, _ := onDisk(t, j, "quiet"); n != 5 {
				t.Errorf("quiet session: %d events in the database, want 5", n)
			}
			if n, _ := onDisk(t, j, "busy"); n != 0 {
				t.Errorf("busy session: %d events in the database, want 0 (all evicted)", n)
			}

			j.crash()
			j2, _ := open(t, dir, o)
			for _, c := range []struct {
				session     string
				first, last uint64
			}{{"quiet", 1, 5}, {"busy", 181, 200}} {
				st, _, _, _ := j2.OpenBus(c.session, 0)
				st.SetLimits(20, 64<<20)
				if diff := cmp.Diff(span(c.first, c.last), ids(retained(st))); diff != "" {
					t.Errorf("%s after a crash (-want +got):\n%s", c.session, diff)
				}
			}
		})
	}
}

func TestCompactionKeepsSegmentsWhoseEventsAreStillRetained(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, dir, noKicks)
	b := newBus(t, j, "s", 100_000, 64<<20)
	for i := range 40 {
		publish(t, b, events(i*5, 5, 300)...)
	}
	before := segmentsIn(t, dir)
	if err := j.compact(); err != nil {
		t.Fatal(err)
	}
	if after := segmentsIn(t, dir); len(after) != len(before) {
		t.Errorf("segments before compaction %v, after %v: want all kept, their events are retained", before, after)
	}
	if n, _ := onDisk(t, j, "s"); n != 0 {
		t.Errorf("%d events copied into the database, want none", n)
	}
}

func TestBackgroundCompactionBoundsTheLog(t *testing.T) {
	dir := t.TempDir()
	const segment, checkpoint = 16 << 10, 64 << 10
	j, _ := open(t, dir, Options{Sync: SyncNever, SegmentBytes: segment, CheckpointBytes: checkpoint, CheckpointInterval: time.Hour})
	b := newBus(t, j, "s", 100_000, 64<<20) // retains everything: compaction must copy
	for i := range 400 {
		publish(t, b, events(i*5, 5, 300)...) // about 700 KiB in all
	}
	// The log stays within twice CheckpointBytes, plus the segments being
	// filled while a compaction runs.
	waitFor(t, func() bool { return j.Stats().LogBytes <= 2*checkpoint+2*segment })
	if n, _ := onDisk(t, j, "s"); n == 0 {
		t.Error("nothing copied into the database, yet the log is bounded")
	}
	j.crash()
	j2, _ := open(t, dir, Options{Sync: SyncNever, SegmentBytes: segment, CheckpointBytes: checkpoint, CheckpointInterval: time.Hour})
	st, _, _, _ := j2.OpenBus("s", 0)
	st.SetLimits(100_000, 64<<20)
	if diff := cmp.Diff(span(1, 2000), ids(retained(st))); diff != "" {
		t.Errorf("after a crash (-want +got):\n%s", diff)
	}
}

// TestFullSegmentsAreReleasedWithoutSync: with SyncNever nothing syncs a
// full segment, so it is closed at once; kept open, a segment that
// compaction removes would keep its disk space.
func TestFullSegmentsAreReleasedWithoutSync(t *testing.T) {
	o := noKicks
	o.Sync = SyncNever
	j, _ := open(t, t.TempDir(), o)
	b := newBus(t, j, "s", 20, 64<<20)
	for i := range 40 {
		publish(t, b, events(i*5, 5, 300)...)
	}
	j.wal.mu.Lock()
	open := len(j.wal.old)
	j.wal.mu.Unlock()
	if open != 0 {
		t.Errorf("%d full segments still open", open)
	}
}
