package journal

import (
	"errors"
	"time"
)

// retryWritable is the least time between two attempts to finish an Open
// that the disk's lack of space left read-only.
var retryWritable = time.Second

// The read-only journal. When recovery's writes (recovery.persist) fail
// for lack of space, Open still succeeds: the journal serves what the
// recovery restored, from the database and from the log's segments as they
// are, writes nothing, and refuses every append with ErrDiskFull. A bus the
// recovery put on a new epoch has it in memory only, so no id is assigned
// until persist has written it: an append first retries persist, at most
// once per retryWritable (tryWritable), and once it succeeds the journal is
// writable and starts its background work, which copies the log into the
// database as after any recovery.

// enterReadOnly makes j read-only, with rc's writes still to make; cause
// is why persist failed.
func (j *Journal) enterReadOnly(rc *recovery, cause error) {
	j.pending = rc
	j.readOnly.Store(true)
	j.logger.Error("journal: the disk is full: serving what it holds read-only; every publish is refused until space returns",
		"err", cause, "dir", j.dir, "buses", len(rc.metas), "newEpochs", len(rc.newEpoch))
}

// tryWritable attempts, at most once per retryWritable, to finish an Open
// left read-only, and reports whether the journal is writable.
func (j *Journal) tryWritable() bool {
	j.roMu.Lock()
	defer j.roMu.Unlock()
	if !j.readOnly.Load() {
		return true
	}
	if time.Since(j.roTried) < retryWritable {
		return false
	}
	j.roTried = time.Now()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return false
	}
	err := guard(func() error {
		if j.noDB.Load() {
			if err := j.createDBLocked(j.pending); err != nil {
				return err
			}
		}
		return j.persist(j.pending)
	})
	if err != nil {
		if !errors.Is(err, ErrDiskFull) {
			j.logger.Error("journal: cannot leave read-only mode", "err", err)
		}
		return false
	}
	j.pending = nil
	j.readOnly.Store(false)
	j.startLocked()
	j.logger.Info("journal: space returned; the journal is writable again")
	return true
}
