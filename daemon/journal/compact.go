package journal

import (
	"os"
	"path/filepath"
	"syscall"
)

// compact removes the oldest log segments whose events the buses have
// mostly evicted, copying into the database what they still retain. The
// log, not the database, then holds what is published and soon evicted:
// under a steady stream of publishes little is copied. It stops at the
// first segment whose retained events fill more than a quarter of it,
// unless the log from there on is over its bound (logBound). With the
// bound following the rings, it first deletes from the database what the
// rings evicted (trimEvicted), so the journal takes at most about twice
// what the rings retain plus a segment.
func (j *Journal) compact() error {
	j.ckptMu.Lock()
	defer j.ckptMu.Unlock()
	if j.adaptive {
		if err := j.trimEvicted(); err != nil {
			j.rearm(2*uint64(j.opts.CheckpointBytes), err)
			return j.countCheckpoint(err)
		}
	}
	limit := j.logBound()
	live := j.wal.held()
	end := j.wal.end()
	retire, found := uint64(0), false
	var copied uint64 // what retiring the segments so far copies
	for i, seg := range live[:len(live)-1] {
		size := live[i+1].lsn - seg.lsn
		forced := end-live[i+1].lsn > limit
		if j.adaptive {
			forced = end-seg.lsn > limit
		}
		more := j.retainedThrough(seg.seq)
		if !forced && more-min(copied, more) > size/4 {
			break
		}
		retire, found, copied = seg.seq, true, more
	}
	var err error
	if found {
		err = j.countCheckpoint(j.checkpointThrough(retire))
	}
	j.rearm(limit, err)
	return err
}

// rearm sets the log offset from which an append asks for a compaction
// again, after one that kept the log within limit (or failed: err).
func (j *Journal) rearm(limit uint64, err error) {
	start, end := j.wal.start(), j.wal.end()
	seg := uint64(j.opts.SegmentBytes)
	if !j.adaptive || err != nil {
		// After a new CheckpointBytes of log, or, when the rings retain
		// more than that (or the compaction failed), after half a
		// segment.
		j.compactAt.Store(max(start+min(limit/2, uint64(j.opts.CheckpointBytes)), end+seg/2))
		return
	}
	// Once the log is over its limit again; when only the current
	// segment is left and it is over the limit alone, once the next
	// segment starts.
	if len(j.wal.held()) == 1 {
		j.compactAt.Store(max(start+limit, start+j.wal.capacity()+1))
	} else {
		j.compactAt.Store(start + limit)
	}
}

// maxAdaptiveLog bounds the log when it follows the rings: what a crash
// leaves to replay.
const maxAdaptiveLog = 2 * DefaultCheckpointBytes

// logBound is the log's bound, the one place it is decided. With
// CheckpointBytes set it is twice that. Otherwise it follows the rings:
// twice the bytes the rings retain (in the database's format), less what
// the database file takes on disk, at least half a segment and at most
// maxAdaptiveLog. The database holds retained events that the log no
// longer does, and its free pages, which it reuses; so the journal takes
// at most max(2 × retained, database + half a segment) plus what the
// current segment has allocated ahead.
func (j *Journal) logBound() uint64 {
	if !j.adaptive {
		return 2 * uint64(j.opts.CheckpointBytes)
	}
	var retained uint64
	for _, s := range j.storeList() {
		s.mu.Lock()
		retained += uint64(s.win.disk)
		s.mu.Unlock()
	}
	db := uint64(diskBytes(filepath.Join(j.dir, dbName)))
	limit := uint64(j.opts.SegmentBytes) / 2
	if 2*retained > db+limit {
		limit = 2*retained - db
	}
	return min(limit, maxAdaptiveLog)
}

// diskBytes returns what the file at path takes on disk (its allocated
// blocks), 0 if it cannot tell.
func diskBytes(path string) int64 {
	fi, err := os.Lstat(path)
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}

// retainedThrough estimates the bytes of events that log segments up to
// seq hold, that their buses retain and that the database lacks: what
// removing those segments would copy.
func (j *Journal) retainedThrough(seq uint64) uint64 {
	var total uint64
	for _, s := range j.storeList() {
		s.mu.Lock()
		through := max(s.ckptID, s.lastThrough(seq))
		from := max(s.ckptID+1, s.win.earliest())
		if s.win.n > 0 && through >= from {
			total += (through - from + 1) * uint64(s.win.disk) / uint64(s.win.n)
		}
		s.mu.Unlock()
	}
	return total
}

// anyEvicted reports whether some bus retains less than the database holds.
func (j *Journal) anyEvicted() bool {
	for _, s := range j.storeList() {
		s.mu.Lock()
		dropped := s.win.earliest() != s.dbFirst && s.dbFirst != 0
		s.mu.Unlock()
		if dropped {
			return true
		}
	}
	return false
}
