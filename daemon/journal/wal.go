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
	"time"
)

// File is a log segment as the journal writes it. Options.WrapFile may wrap
// it, for tests that inject storage faults or count syncs.
type File interface {
	// WriteAt writes p at off, within the segment's preallocated size.
	WriteAt(p []byte, off int64) (int, error)
	// Reserve allocates the segment on disk up to end at least, so that a
	// write below end cannot fail for lack of space: a log synced after
	// every append reserves at append time and writes at the sync.
	Reserve(end int64) error
	// Truncate discards what was written from size on.
	Truncate(size int64) error
	// Sync makes what was written durable.
	Sync() error
	// Close releases the segment; it does not sync.
	Close() error
}

// wal is the write-ahead log: numbered segment files, one current. Offsets
// in it (lsn) count the bytes appended since Open, across segments.
type wal struct {
	dir    string
	wrap   func(File) File
	onSync func()
	// syncSeconds, if set, is told how long each segment sync took.
	syncSeconds Observer
	noSync      bool // SyncNever: rotation does not sync
	// syncEach (SyncAlways): segments take every write through pwrite
	// (see bigWrite), and appends only reserve their room and copy their
	// records into pend: the sync that makes them durable writes them
	// with one pwrite, so a group of appends that share a sync costs one
	// write, done by the syncing goroutine outside every bus's lock.
	syncEach bool
	segSize  int64

	syncMu sync.Mutex // held by the goroutine syncing and by rotate/close; taken before mu
	// Appends wait for a sync under way on waiting, not in syncMu's
	// queue: when it ends they all wake at once, the ones it covered
	// return, and the first of the others starts the next sync at once.
	// In a mutex's queue, appends the sync covered would wake one at a
	// time, some behind an append that is already syncing again.
	waitMu  sync.Mutex
	waiting sync.Cond // on waitMu
	leading bool      // a syncTo is syncing; guarded by waitMu
	waiters int       // appends waiting on waiting; guarded by waitMu
	synced  atomic.Uint64

	mu    sync.Mutex // guards the fields below
	live  []segStart // the segments on disk, oldest first; the last is the current one
	f     File
	cap   int64  // current segment's size
	old   []File // full segments not yet synced and closed
	seq   uint64 // current segment number
	off   int64  // bytes written to the current segment
	lsn   uint64 // bytes appended since Open
	dirty bool   // off must be restored by truncating before the next write
	// pend holds the records appended to the current segment, from
	// pendOff, that are not written to it yet (syncEach); spare is the
	// buffer a sync writes from, kept for the next swap.
	pend    []byte
	pendOff int64
	spare   []byte
	closed  bool
	failed  error // a failed sync: the log can no longer promise durability
	// detached is set by detach, which closed the current segment: the
	// next append starts a new one. gone is set once a checkpoint has
	// removed the segment detach closed: its entry in live is stale.
	detached, gone bool
}

// segStart is a segment of the log and the log offset where it starts.
type segStart struct {
	seq uint64
	lsn uint64
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

// newWAL returns a log of dir that has no segment yet: attach starts one.
// Until then it takes no append (a journal that recovery left read-only).
func newWAL(dir string, segSize int64, wrap func(File) File, onSync func(), syncSeconds Observer, noSync, syncEach bool) *wal {
	w := &wal{dir: dir, wrap: wrap, onSync: onSync, syncSeconds: syncSeconds, noSync: noSync, syncEach: syncEach,
		segSize: segSize, live: []segStart{{}}}
	w.waiting.L = &w.waitMu
	return w
}

// attach starts a new, empty segment numbered seq, after the segments old
// that an earlier run wrote and that recovery keeps until a checkpoint has
// copied them (their records then come first in the log's offsets). On
// error the log is as it was.
func (w *wal) attach(seq uint64, old []oldSegment) error {
	f, size, err := w.createFitting(seq, 0)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.f, w.cap, w.seq = f, size, seq
	w.live = w.live[:0]
	for _, o := range old {
		w.live = append(w.live, segStart{seq: o.seq, lsn: w.lsn})
		w.lsn += o.bytes
	}
	w.live = append(w.live, segStart{seq: seq, lsn: w.lsn})
	w.synced.Store(w.lsn)
	return nil
}

// minSegment is the smallest segment createFitting tries on a full disk.
const minSegment = 64 << 10

// createFitting creates segment seq of w.segSize bytes, or of need if
// larger; when the disk has no room for that, of half as much, and so on
// down to minSegment or need, so that a nearly full disk still takes
// publishes until it is really full.
func (w *wal) createFitting(seq uint64, need int64) (File, int64, error) {
	size := max(w.segSize, need)
	for {
		f, err := w.create(seq, size)
		if err == nil || !errors.Is(err, ErrDiskFull) || size/2 < max(need, minSegment) {
			return f, size, err
		}
		size /= 2
	}
}

func (w *wal) create(seq uint64, size int64) (File, error) {
	path := filepath.Join(w.dir, segmentName(seq))
	seg, err := createSegment(path, size)
	if err != nil {
		return nil, err
	}
	if w.syncEach {
		seg.pwriteFrom = 0
	}
	if err := syncDir(w.dir); err != nil {
		seg.Close()
		os.Remove(path)
		return nil, err
	}
	var f File = seg
	if w.wrap != nil {
		f = w.wrap(f)
	}
	return f, nil
}

// nextLocked starts the next segment, with room for need bytes at least;
// the current one, once what it pends is written, waits in w.old to be
// synced (or, with noSync, is closed). w.mu must be held.
func (w *wal) nextLocked(need int64) error {
	if err := w.flushLocked(); err != nil {
		return err
	}
	f, size, err := w.createFitting(w.seq+1, need)
	if err != nil {
		return err
	}
	if w.detached {
		// The current segment was closed by detach, and maybe removed.
		if w.gone {
			w.live = w.live[:len(w.live)-1]
		}
		w.detached, w.gone = false, false
	} else if w.noSync {
		// Nothing will sync it: release it now, or a segment that
		// compaction removes would keep its disk space while mapped.
		w.f.Close()
	} else {
		w.old = append(w.old, w.f)
	}
	w.f, w.cap, w.seq, w.off, w.dirty = f, size, w.seq+1, 0, false
	w.live = append(w.live, segStart{seq: w.seq, lsn: w.lsn})
	return nil
}

// append writes p, one or more whole records, at the end of the log and
// returns the log offset just past it and the segment it is in. On error
// nothing of p remains in the log.
func (w *wal) append(p []byte) (lsn, seq uint64, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, 0, ErrClosed
	}
	if w.failed != nil {
		return 0, 0, w.failed
	}
	if w.detached {
		if err := w.nextLocked(int64(len(p))); err != nil {
			return 0, 0, err
		}
	}
	if w.dirty {
		if err := w.f.Truncate(w.off); err != nil {
			return 0, 0, classify(err)
		}
		w.dirty = false
	}
	if w.off+int64(len(p)) > w.cap {
		if err := w.nextLocked(int64(len(p))); err != nil {
			return 0, 0, err
		}
	}
	if w.syncEach {
		if err := w.f.Reserve(w.off + int64(len(p))); err != nil {
			return 0, 0, classify(err)
		}
		if len(w.pend) == 0 {
			w.pendOff = w.off
		}
		w.pend = append(w.pend, p...)
		w.off += int64(len(p))
		w.lsn += uint64(len(p))
		return w.lsn, w.seq, nil
	}
	n, err := w.f.WriteAt(p, w.off)
	if err != nil {
		if n > 0 {
			// A short write: cut it off now, or before the next write.
			w.dirty = w.f.Truncate(w.off) != nil
		}
		return 0, 0, classify(err)
	}
	w.off += int64(n)
	w.lsn += uint64(n)
	return w.lsn, w.seq, nil
}

// flushLocked writes the records the current segment pends. A write that
// fails fails the log: the appends that wait for those records can no
// longer be made durable. w.mu must be held.
func (w *wal) flushLocked() error {
	if len(w.pend) == 0 {
		return nil
	}
	_, err := w.f.WriteAt(w.pend, w.pendOff)
	w.pend = w.pend[:0]
	if err != nil {
		w.failed = fmt.Errorf("journal: write: %w", classify(err))
		return w.failed
	}
	return nil
}

// maxSpare is the largest write buffer the log keeps between syncs.
const maxSpare = 1 << 20

// held returns the segments on disk, oldest first, with the log offsets
// where they start; the last is the current one.
func (w *wal) held() []segStart {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.live)
}

// start returns the log offset where the oldest segment on disk starts.
func (w *wal) start() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gone {
		return w.lsn
	}
	return w.live[0].lsn
}

// capacity returns the size of the current segment.
func (w *wal) capacity() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return uint64(w.cap)
}

// end returns the log offset past the last record.
func (w *wal) end() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lsn
}

// syncTo returns once the log is durable up to lsn. Concurrent callers
// share syncs (group commit): one syncs everything appended so far while
// the others wait; when it is done every caller it covered returns, and
// one of the rest starts the next sync.
func (w *wal) syncTo(lsn uint64) error {
	if w.synced.Load() >= lsn {
		return nil
	}
	w.waitMu.Lock()
	defer w.waitMu.Unlock()
	for w.synced.Load() < lsn {
		if w.leading {
			w.waiters++
			w.waiting.Wait()
			w.waiters--
			continue
		}
		w.leading = true
		w.waitMu.Unlock()
		err := w.sync()
		w.waitMu.Lock()
		w.leading = false
		w.waiting.Broadcast()
		if err != nil {
			return err
		}
	}
	return nil
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
	if w.failed != nil || w.closed {
		failed := w.failed
		w.mu.Unlock()
		if failed != nil {
			return failed
		}
		return ErrClosed
	}
	f, old, target := w.f, w.old, w.lsn
	w.old = nil
	// What the current segment pends is written here, outside w.mu: the
	// appends that come meanwhile pend in the spare buffer (or, should
	// they fill the segment, write theirs to it at other offsets).
	buf, bufOff := w.pend, w.pendOff
	w.pend, w.spare = w.spare[:0], nil
	w.mu.Unlock()
	var err error
	if len(buf) > 0 {
		if _, werr := f.WriteAt(buf, bufOff); werr != nil {
			err = fmt.Errorf("journal: write: %w", classify(werr))
			w.mu.Lock()
			w.failed = err
			w.mu.Unlock()
		}
	}
	if cap(buf) <= maxSpare {
		w.mu.Lock()
		w.spare = buf[:0]
		w.mu.Unlock()
	}
	if err != nil {
		for _, o := range old {
			o.Close()
		}
		return err
	}
	for _, o := range old {
		if serr := o.Sync(); err == nil {
			err = serr
		}
		o.Close()
	}
	if f == nil {
		// Detached: detach synced the segment it closed.
		if err == nil {
			w.synced.Store(target)
		}
		return err
	}
	if w.synced.Load() >= target && len(old) == 0 {
		return nil
	}
	start := time.Now()
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if w.syncSeconds != nil {
		w.syncSeconds.Observe(time.Since(start).Seconds())
	}
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
// next one. It returns the number of the segment closed (every record
// appended before rotate was called is in it or in an older one) and the
// log offset where the new one starts.
func (w *wal) rotate() (uint64, uint64, error) {
	w.syncMu.Lock()
	defer w.syncMu.Unlock()
	if !w.noSync {
		if err := w.syncLocked(); err != nil {
			return 0, 0, err
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, 0, ErrClosed
	}
	if w.detached {
		// Every record is in the segment detach closed, or an older one;
		// the next append starts a new one.
		return w.seq, w.lsn, nil
	}
	if w.off == 0 && len(w.old) == 0 {
		// The current segment is empty (a checkpoint that failed left
		// it, say): every record is in an older one, and another new
		// segment would only take room.
		return w.seq - 1, w.lsn, nil
	}
	old := w.seq
	if err := w.nextLocked(0); err != nil {
		return 0, 0, err
	}
	// Segments filled since the sync above: an Append waiting for its
	// record in one must not find it unsynced after the checkpoint.
	for _, o := range w.old {
		if !w.noSync {
			if err := o.Sync(); err != nil {
				w.failed = fmt.Errorf("journal: sync: %w", classify(err))
				return 0, 0, w.failed
			}
		}
		o.Close()
	}
	w.old = nil
	return old, w.lsn, nil
}

// detach syncs the log (unless noSync) and closes the current segment
// without starting another: a checkpoint through the number it returns
// can then remove every segment, and the next append starts a new one
// (when the disk has room for it). It is what frees the log's space on a
// full disk, where starting a segment first is what fails.
func (w *wal) detach() (uint64, error) {
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
	if w.detached || w.f == nil {
		return w.seq, nil
	}
	// Written and filled since the sync above.
	if err := w.flushLocked(); err != nil {
		return 0, err
	}
	for _, o := range w.old {
		if !w.noSync {
			if err := o.Sync(); err != nil {
				w.failed = fmt.Errorf("journal: sync: %w", classify(err))
				return 0, w.failed
			}
		}
		o.Close()
	}
	w.old = nil
	if !w.noSync && w.lsn > w.synced.Load() {
		if err := w.f.Sync(); err != nil {
			w.failed = fmt.Errorf("journal: sync: %w", classify(err))
			return 0, w.failed
		}
	}
	w.f.Close()
	w.f, w.detached, w.dirty = nil, true, false
	if !w.noSync {
		w.synced.Store(w.lsn)
	}
	return w.seq, nil
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
	if w.f != nil {
		w.flushLocked() // not synced: as before, Close does not sync
	}
	for _, o := range w.old {
		o.Close()
	}
	w.old = nil
	if w.f == nil {
		return w.seq, nil // a read-only journal's log, which never had a segment
	}
	return w.seq, w.f.Close()
}

// removeThrough deletes the segments numbered up to seq, never the
// current one.
func (w *wal) removeThrough(seq uint64) error {
	w.mu.Lock()
	for len(w.live) > 1 && w.live[0].seq <= seq {
		w.live = w.live[1:]
	}
	if w.detached && w.live[0].seq <= seq {
		w.gone = true
	}
	w.mu.Unlock()
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
