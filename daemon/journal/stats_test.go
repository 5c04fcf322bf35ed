package journal

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// countObserver counts the measurements it is given.
type countObserver struct{ n atomic.Int64 }

func (o *countObserver) Observe(float64) { o.n.Add(1) }

// TestStatsCountSyncsCheckpointsAndDiskFull pins the figures the
// daemon's metrics read: each sync of the log is measured, each checkpoint
// and each append refused for lack of space is counted, and the database
// and log sizes are reported.
func TestStatsCountSyncsCheckpointsAndDiskFull(t *testing.T) {
	var full atomic.Bool
	syncs := new(countObserver)
	j, _ := open(t, t.TempDir(), Options{
		SyncSeconds: syncs,
		// No background checkpoint: the test counts its own.
		CheckpointInterval: time.Hour,
		WrapFile:           func(f File) File { return &faultFile{File: f, full: &full} },
	})
	b := newBus(t, j, "s", 0, 0)
	publish(t, b, events(0, 3, 100)...)
	if syncs.n.Load() == 0 {
		t.Errorf("no sync measured after a publish with fsync always")
	}
	if st := j.Stats(); st.LogBytes <= 0 || st.DBBytes <= 0 || st.Checkpoints != 0 || st.DiskFull != 0 {
		t.Errorf("after a publish: Stats() = %+v; want log and database bytes, no checkpoint, no disk full", st)
	}
	full.Store(true)
	if _, _, err := b.Publish(events(3, 1, 100)...); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("Publish on a full disk = %v, want ErrDiskFull", err)
	}
	full.Store(false)
	if err := j.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if st := j.Stats(); st.Checkpoints != 1 || st.CheckpointErrors != 0 || st.DiskFull != 1 || st.LogBytes != 0 {
		t.Errorf("after a refused publish and a checkpoint: Stats() = %+v; want 1 checkpoint, 1 disk full, an empty log", st)
	}
}
