package journal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// File is a log segment as the journal writes it. Options.WrapFile may wrap
// it, for tests that inject storage faults or count syncs.
type File interface {
	WriteAt(p []byte, off int64) (int, error)
	Truncate(size int64) error
	Sync() error
	Close() error
}

// wal is the write-ahead log: numbered segment files, one current. Offsets
// in it (lsn) count the bytes appended since Open, across segments.
type wal struct {
	dir    string
	wrap   func(File) File
	onSync func()
	noSync bool // SyncNever: rotation does not sync

	syncMu sync.Mutex // held by the goroutine syncing and by rotate/close; taken before mu
	synced atomic.Uint64

	mu     sync.Mutex // guards the fields below
	f      File
	seq    uint64 // current segment number
	off    int64  // current segment's size
	lsn    uint64 // bytes appended since Open
	dirty  bool   // off must be restored by truncating before the next write
	closed bool
	failed error // a failed sync: the log can no longer promise durability
}

func segmentName(seq uint64) string { return fmt.Sprintf("wal-%016x.log", seq) }

// segments lists the segment numbers in dir, in order.
func segments(dir string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var seqs []uint64
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "wal-") || !strings.HasSuffix(name, ".log") {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, "wal-"), ".log"), 16, 64)
		if err != nil {
			continue
		}
		seqs = append(seqs, n)
	}
	slices.Sort(seqs)
	return seqs, nil
}

// openWAL starts a new, empty segment numbered seq.
func openWAL(dir string, seq uint64, wrap func(File) File, onSync func(), noSync bool) (*wal, error) {
	w := &wal{dir: dir, wrap: wrap, onSync: onSync, noSync: noSync, seq: seq}
	f, err := w.create(seq)
	if err != nil {
		return nil, err
	}
	w.f = f
	return w, nil
}

func (w *wal) create(seq uint64) (File, error) {
	f, err := os.OpenFile(filepath.Join(w.dir, segmentName(seq)), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, classify(err)
	}
	if err := syncDir(w.dir); err != nil {
		f.Close()
		return nil, err
	}
	var file File = f
	if w.wrap != nil {
		file = w.wrap(file)
	}
	return file, nil
}

// append writes p, one or more whole records, at the end of the log and
// returns the log offset just past it. On error nothing of p remains in the
// log.
func (w *wal) append(p []byte) (uint64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, ErrClosed
	}
	if w.failed != nil {
		return 0, w.failed
	}
	if w.dirty {
		if err := w.f.Truncate(w.off); err != nil {
			return 0, classify(err)
		}
		w.dirty = false
	}
	n, err := w.f.WriteAt(p, w.off)
	if err != nil {
		if n > 0 {
			// A short write: cut it off now, or before the next write.
			w.dirty = w.f.Truncate(w.off) != nil
		}
		return 0, classify(err)
	}
	w.off += int64(n)
	w.lsn += uint64(n)
	return w.lsn, nil
}

// size returns the current segment's size.
func (w *wal) size() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.off
}

// syncTo returns once the log is durable up to lsn. Concurrent callers
// share syncs: while one syncs, the others wait, and most find their
// records covered when it is done (group commit).
func (w *wal) syncTo(lsn uint64) error {
	if w.synced.Load() >= lsn {
		return nil
	}
	w.syncMu.Lock()
	defer w.syncMu.Unlock()
	if w.synced.Load() >= lsn {
		return nil
	}
	return w.syncLocked()
}

// sync makes everything appended so far durable.
func (w *wal) sync() error {
	w.syncMu.Lock()
	defer w.syncMu.Unlock()
	return w.syncLocked()
}

// syncLocked syncs the current segment. w.syncMu must be held, which keeps
// the segment from being rotated meanwhile.
func (w *wal) syncLocked() error {
	w.mu.Lock()
	f, target, closed, failed := w.f, w.lsn, w.closed, w.failed
	w.mu.Unlock()
	if failed != nil {
		return failed
	}
	if closed {
		return ErrClosed
	}
	if w.synced.Load() >= target {
		return nil
	}
	err := f.Sync()
	if w.onSync != nil {
		w.onSync()
	}
	if err != nil {
		// After a failed fsync the kernel may have dropped the dirty pages:
		// nothing written since the last good sync can be promised again.
		err = fmt.Errorf("journal: sync: %w", classify(err))
		w.mu.Lock()
		w.failed = err
		w.mu.Unlock()
		return err
	}
	w.synced.Store(target)
	return nil
}

// rotate closes the current segment, synced unless noSync, and starts the
// next one. It returns the number of the segment closed: every record
// appended before rotate was called is in it or in an older one.
func (w *wal) rotate() (uint64, error) {
	w.syncMu.Lock()
	defer w.syncMu.Unlock()
	if !w.noSync {
		if err := w.syncLocked(); err != nil {
			return 0, err
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, ErrClosed
	}
	f, err := w.create(w.seq + 1)
	if err != nil {
		return 0, err
	}
	old := w.seq
	w.f.Close()
	w.f, w.seq, w.off, w.dirty = f, w.seq+1, 0, false
	return old, nil
}

// close closes the current segment and returns its number.
func (w *wal) close() (uint64, error) {
	w.syncMu.Lock()
	defer w.syncMu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return w.seq, nil
	}
	w.closed = true
	return w.seq, w.f.Close()
}

// removeThrough deletes the segments numbered up to seq.
func (w *wal) removeThrough(seq uint64) error {
	seqs, err := segments(w.dir)
	if err != nil {
		return err
	}
	for _, s := range seqs {
		if s <= seq {
			if err := os.Remove(filepath.Join(w.dir, segmentName(s))); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// classify wraps running out of space in ErrDiskFull.
func classify(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%w: %w", ErrDiskFull, err)
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return classify(err)
	}
	return nil
}
