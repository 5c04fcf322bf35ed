package journal

import (
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/localbus/localbus/bus"
)

// recordPool holds buffers to encode log records in: a batch of 1000
// events is a record of hundreds of KiB, which the log copies at once.
var recordPool = sync.Pool{New: func() any { return new([]byte) }}

const (
	maxPooledRecord = 4 << 20
	maxPooledArena  = 64 << 20
)

// log appends the record of frames of bus num (as refs, if not nil). It
// returns the log offset past the record and the segment that holds it; it
// does not wait for the record to be durable (see waitDurable).
func (j *Journal) log(num uint64, frames []*bus.Frame, refs []refRun, key string, val []byte) (lsn, seq uint64, err error) {
	bp := recordPool.Get().(*[]byte)
	var rec []byte
	switch {
	case refs != nil:
		rec = appendRefsRecord((*bp)[:0], num, frames[0].ID, len(frames), refs)
	default:
		n := recHeaderLen + payloadHeadLen
		for _, f := range frames {
			n += 6 + len(f.Type) + len(f.JSON())
		}
		if key != "" {
			rec = appendKeyedRecord(slices.Grow((*bp)[:0], n+keyedLen(key, val)), num, frames, key, val)
			break
		}
		rec = appendRecord(slices.Grow((*bp)[:0], n), num, frames)
	}
	lsn, seq, err = j.wal.append(rec)
	if cap(rec) <= maxPooledRecord {
		*bp = rec[:0]
		recordPool.Put(bp)
	}
	if err != nil {
		return 0, 0, err
	}
	if lsn >= j.compactAt.Load() {
		select {
		case j.kick <- struct{}{}:
		default:
		}
	}
	return lsn, seq, nil
}

// waitDurable returns once the log is durable up to lsn as the sync mode
// promises it (at once but with SyncAlways), and the log offset durable
// then. Concurrent callers share syncs (group commit).
func (j *Journal) waitDurable(lsn uint64) (uint64, error) {
	if j.mode != SyncAlways {
		return lsn, nil
	}
	if err := j.wal.syncTo(lsn); err != nil {
		return 0, j.countDiskFull(err)
	}
	return max(lsn, j.wal.synced.Load()), nil
}

func (j *Journal) syncLoop() {
	t := time.NewTicker(j.opts.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-j.stop:
			return
		case <-t.C:
			if err := j.wal.sync(); err != nil && !errors.Is(err, ErrClosed) {
				j.logger.Error("journal: sync", "err", err)
			}
		}
	}
}

// countDiskFull counts an append refused for lack of space, and returns
// err.
func (j *Journal) countDiskFull(err error) error {
	if errors.Is(err, ErrDiskFull) {
		j.diskFull.Add(1)
	}
	return err
}
