package journal

import (
	"fmt"
	"testing"
)

// bboltAllowance is what the test allows the database file beyond the
// bound: its meta, freelist and branch pages, and the pages of events a
// compaction copied there, which it reuses.
const bboltAllowance = 256 << 10

// retainedDisk returns the bytes the buses of j retain, in the database's
// format.
func retainedDisk(j *Journal) int64 {
	var n int64
	for _, s := range j.storeList() {
		s.mu.Lock()
		n += s.win.disk
		s.mu.Unlock()
	}
	return n
}

// waitCompacted waits until no compaction is running or asked for.
func waitCompacted(t *testing.T, j *Journal) {
	t.Helper()
	waitFor(t, func() bool {
		if len(j.kick) > 0 || !j.ckptMu.TryLock() {
			return false
		}
		defer j.ckptMu.Unlock()
		return j.wal.end() < j.compactAt.Load()
	})
}

// TestDiskUseStaysWithinTwiceTheRetainedBytesPlusASegment publishes a
// stream fifty times the ring's bytes, and forty segments at least, into a
// small ring (and a few events
// a quiet session keeps), and checks, each time the background has caught
// up, that the journal's files take on disk (allocated blocks) at most
// twice the bytes the rings retain, plus a segment, plus bboltAllowance.
func TestDiskUseStaysWithinTwiceTheRetainedBytesPlusASegment(t *testing.T) {
	const seg = 256 << 10
	for _, ring := range []int{20, 1000} {
		t.Run(fmt.Sprintf("ring %d", ring), func(t *testing.T) {
			dir := t.TempDir()
			j, _ := open(t, dir, Options{Sync: SyncNever, SegmentBytes: seg})
			quiet := newBus(t, j, "quiet", 100, 64<<20)
			publish(t, quiet, events(0, 5, 300)...)
			b := newBus(t, j, "s", ring, 64<<20)
			var published, most, mostBound int64
			for k := 0; published < max(50*int64(ring)*330, 40*seg); k++ {
				publish(t, b, events(k*10, 10, 300)...)
				published += 10 * 330
				if k%5 != 0 {
					continue
				}
				waitCompacted(t, j)
				retained, use := retainedDisk(j), diskUse(t, dir)
				if bound := 2*retained + seg + bboltAllowance; use > bound {
					t.Fatalf("after %d bytes published: %d bytes on disk (database %d), want at most %d: twice the %d retained, a segment and %d",
						published, use, diskBytes(dir+"/"+dbName), bound, retained, bboltAllowance)
				}
				if use > most {
					most, mostBound = use, 2*retained+seg+bboltAllowance
				}
			}
			t.Logf("ring of %d: at most %d bytes on disk (bound then %d), publishing %d", ring, most, mostBound, published)
			// What the rings retain survives a crash.
			j.crash()
			j2, _ := open(t, dir, Options{Sync: SyncNever, SegmentBytes: seg})
			st, _, _, _ := j2.OpenBus("s", 0)
			st.SetLimits(ring, 64<<20)
			if got := st.Len(); got != ring {
				t.Errorf("after a crash: %d events retained, want %d", got, ring)
			}
			q, _, _, _ := j2.OpenBus("quiet", 0)
			if got := ids(retained(q)); len(got) != 5 {
				t.Errorf("quiet session after a crash: ids %v, want 1..5", got)
			}
		})
	}
}
