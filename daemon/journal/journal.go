package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/localbus/localbus/bus"
	bolt "go.etcd.io/bbolt"
)

// Errors of the journal.
var (
	// ErrDiskFull wraps a write refused for lack of space (ENOSPC, EDQUOT).
	// The append it refused left nothing behind. It is bus.ErrDiskFull,
	// the error of the Store interface, so callers above the bus recognise
	// it without importing the journal.
	ErrDiskFull = bus.ErrDiskFull
	// ErrClosed is returned after Close, and by a deleted bus's Store. It
	// is bus.ErrStoreClosed, like ErrDiskFull.
	ErrClosed = bus.ErrStoreClosed
	// ErrLocked is returned by Open when another process holds the journal.
	ErrLocked = errors.New("journal: in use by another process")
)

// Sync modes, the values of Options.Sync (the fsync setting of SPEC §10).
const (
	SyncAlways   = "always"
	SyncInterval = "interval"
	SyncNever    = "never"
)

// Defaults of Options.
const (
	DefaultSyncInterval       = 100 * time.Millisecond
	DefaultSegmentBytes       = 4 << 20
	DefaultCheckpointBytes    = 64 << 20 // the log is kept within twice it
	DefaultCheckpointInterval = 5 * time.Second
)

// Options configure Open. Zero values mean the defaults.
type Options struct {
	// Dir is the journal's directory, created 0700 if missing; one that
	// exists must be owned by the process's uid and not writable by group
	// or others (see PrepareDir). Required.
	Dir string
	// Sync is SyncAlways (default), SyncInterval or SyncNever.
	Sync string
	// SyncInterval is the sync period under SyncInterval; default 100 ms.
	SyncInterval time.Duration
	// SegmentBytes is the size of a log segment, allocated on disk as it
	// fills; default 4 MiB. A batch larger than that gets a segment of its
	// own size.
	SegmentBytes int64
	// CheckpointBytes, if set, is how much log starts a compaction, and
	// the log is kept within twice it. Default: the log follows what the
	// rings retain (see compactLimit), so that the journal takes at most
	// about twice the retained bytes plus a segment, and at most 128 MiB
	// of log.
	CheckpointBytes int64
	// CheckpointInterval is the period of the checkpoint, which copies
	// everything into the database and empties the log; default 5 s. With
	// the log following the rings (CheckpointBytes unset) it runs only
	// when nothing was appended since the last tick, and a compaction
	// runs instead.
	CheckpointInterval time.Duration
	// Logger receives recovery reports and background errors; nil means
	// slog.Default().
	Logger *slog.Logger
	// WrapFile, if set, wraps every log segment the journal opens for
	// writing: tests use it to inject faults. Default: none.
	WrapFile func(File) File
	// OnSync, if set, is called after every sync of the log; default none.
	OnSync func()
	// SyncSeconds, if set, is told how long each sync of the log took;
	// default none. The daemon's fsync latency histogram is one.
	SyncSeconds Observer

	// afterCheckpoint, if set (tests), is called by every checkpoint that
	// copies the segments up to seq, once its transaction is committed
	// (removed false) and once the segments are removed (removed true).
	afterCheckpoint func(seq uint64, removed bool)
}

// An Observer takes one measurement, in seconds; a prometheus.Histogram
// is one. Observe is called on the publishing path (with SyncAlways, once
// per group commit), so it must be quick and safe for concurrent use.
type Observer interface {
	Observe(seconds float64)
}

// A Journal is the on-disk state of every bus of a daemon. Its methods are
// safe for concurrent use. Close it to stop its goroutines and mark a clean
// shutdown.
type Journal struct {
	opts   Options
	mode   string
	logger *slog.Logger
	db     *bolt.DB
	wal    *wal
	dir    string

	ckptMu    sync.Mutex    // one checkpoint at a time; taken before mu
	arena     []byte        // guarded by ckptMu: the last checkpoint's buffer
	compactAt atomic.Uint64 // the log offset from which an append asks for compact
	failCkpt  func() error  // tests: makes the database's side of a checkpoint fail
	retired   atomic.Uint64 // segments up to this one are removed, or being removed: no ref may point into them
	recovered uint64        // the last segment an earlier run wrote, which Open kept (0: none); set before start
	adaptive  bool          // Options.CheckpointBytes was not set: the log's bound follows the rings
	kick      chan struct{}
	stop      chan struct{}
	wg        sync.WaitGroup

	// recoveredMaps are the mappings of the segments Open replayed, which
	// the stores' pend refer to until checkpoints copy them; guarded by
	// ckptMu (see releaseRecovered).
	recoveredMaps [][]byte

	// Cumulative figures for Stats.
	checkpoints      atomic.Uint64
	checkpointErrors atomic.Uint64
	diskFull         atomic.Uint64

	mu      sync.Mutex // guards the fields below; taken before Store.mu
	closed  bool
	stores  map[uint64]*Store
	names   map[string]uint64 // session id ("" for the global bus) to bus number
	metas   map[uint64]*busMeta
	nextNum uint64

	// readOnly is set while Open could not finish for lack of space (see
	// openReadOnly); roMu and roTried rate-limit the attempts to finish it.
	readOnly atomic.Bool
	roMu     sync.Mutex
	roTried  time.Time
}

// Open opens or creates the journal in opts.Dir, recovers it (see the
// package doc) and returns it with every stored bus ready for OpenBus.
func Open(opts Options) (*Journal, error) {
	if opts.Dir == "" {
		return nil, errors.New("journal: no directory")
	}
	switch opts.Sync {
	case "":
		opts.Sync = SyncAlways
	case SyncAlways, SyncInterval, SyncNever:
	default:
		return nil, fmt.Errorf("journal: unknown sync mode %q", opts.Sync)
	}
	if opts.SyncInterval <= 0 {
		opts.SyncInterval = DefaultSyncInterval
	}
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = DefaultSegmentBytes
	}
	adaptive := opts.CheckpointBytes <= 0
	if adaptive {
		opts.CheckpointBytes = DefaultCheckpointBytes
	}
	if opts.CheckpointInterval <= 0 {
		opts.CheckpointInterval = DefaultCheckpointInterval
	}
	j := &Journal{
		opts: opts, mode: opts.Sync, logger: opts.Logger, dir: opts.Dir, adaptive: adaptive,
		kick: make(chan struct{}, 1), stop: make(chan struct{}),
		stores: map[uint64]*Store{}, names: map[string]uint64{}, metas: map[uint64]*busMeta{},
	}
	if j.logger == nil {
		j.logger = slog.Default()
	}
	if err := PrepareDir(opts.Dir); err != nil {
		return nil, err
	}
	if err := j.recover(); err != nil {
		if j.db != nil {
			j.db.Close()
			j.db = nil
		}
		if !errors.Is(err, ErrDiskFull) {
			return nil, err
		}
		if rerr := j.openReadOnly(err); rerr != nil {
			if j.db != nil {
				j.db.Close()
			}
			return nil, fmt.Errorf("%w (and restoring read-only failed: %v)", err, rerr)
		}
		return j, nil
	}
	j.startLocked()
	return j, nil
}

// startLocked starts the background work of a writable journal.
func (j *Journal) startLocked() {
	if j.adaptive {
		j.compactAt.Store(j.wal.start() + uint64(j.opts.SegmentBytes)/2)
	} else {
		j.compactAt.Store(uint64(j.opts.CheckpointBytes))
	}
	j.wg.Go(j.checkpointLoop)
	if j.mode == SyncInterval {
		j.wg.Go(j.syncLoop)
	}
}

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
func (j *Journal) log(num uint64, frames []*bus.Frame, refs []refRun) (lsn, seq uint64, err error) {
	bp := recordPool.Get().(*[]byte)
	var rec []byte
	if refs != nil {
		rec = appendRefsRecord((*bp)[:0], num, frames[0].ID, len(frames), refs)
	} else {
		n := recHeaderLen + payloadHeadLen
		for _, f := range frames {
			n += 6 + len(f.Type) + len(f.JSON())
		}
		rec = appendRecord(slices.Grow((*bp)[:0], n), num, frames)
	}
	lsn, seq, err = j.wal.append(rec)
	if cap(rec) <= maxPooledRecord {
		*bp = rec[:0]
		recordPool.Put(bp)
	}
	if err != nil {
		return 0, 0, j.countDiskFull(err)
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

func (j *Journal) checkpointLoop() {
	t := time.NewTicker(j.opts.CheckpointInterval)
	defer t.Stop()
	failing := false
	quiet := j.wal.end() // the log's end at the last tick
	if err := j.drainRecovered(); err != nil {
		j.logger.Error("journal: checkpoint failed; the log keeps the events meanwhile", "err", err)
		failing = true
	}
	for {
		var err error
		select {
		case <-j.stop:
			return
		case <-t.C:
			// With the log following the rings, a checkpoint of
			// everything waits for a quiet log: under a stream of
			// publishes it would copy into the database what the rings
			// soon evict, and compaction bounds the log meanwhile.
			if end := j.wal.end(); j.adaptive && end != quiet {
				quiet = end
				err = j.compact()
			} else {
				err = j.Checkpoint()
			}
		case <-j.kick:
			err = j.compact()
		}
		switch {
		case err != nil && !failing:
			j.logger.Error("journal: checkpoint failed; the log keeps the events meanwhile", "err", err)
			failing = true
		case err == nil && failing:
			j.logger.Info("journal: checkpoint succeeded again")
			failing = false
		}
	}
}

// Checkpoint copies what the log holds into the database, applies
// retention there and removes every log segment. The journal runs it in
// the background every CheckpointInterval; tests call it to compact at once.
func (j *Journal) Checkpoint() error {
	if j.readOnly.Load() {
		return fmt.Errorf("%w: the journal is read-only until space returns", ErrDiskFull)
	}
	j.ckptMu.Lock()
	defer j.ckptMu.Unlock()
	if j.wal.end() == j.wal.start() && !j.anyEvicted() {
		return nil
	}
	if err := j.trimEvicted(); err != nil {
		return j.countCheckpoint(err)
	}
	seq, _, err := j.wal.rotate()
	if err != nil {
		return j.countCheckpoint(err)
	}
	return j.countCheckpoint(j.checkpointThrough(seq))
}

// drainRecovered copies into the database, one segment per transaction,
// the events of the log segments an earlier run wrote, which Open restored
// in memory only, and removes each segment once the database holds them
// durably: a crash meanwhile replays what is left. It stops early when the
// journal closes (Close checkpoints the rest).
func (j *Journal) drainRecovered() error {
	if j.recovered == 0 {
		return nil
	}
	for _, seg := range j.wal.held() {
		if seg.seq > j.recovered {
			break
		}
		select {
		case <-j.stop:
			return nil
		default:
		}
		j.ckptMu.Lock()
		err := j.countCheckpoint(j.checkpointThrough(seg.seq))
		j.ckptMu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// countCheckpoint notes the result of a checkpoint in the journal's
// figures and returns err.
func (j *Journal) countCheckpoint(err error) error {
	if err != nil {
		j.checkpointErrors.Add(1)
	} else {
		j.checkpoints.Add(1)
	}
	return err
}

// countDiskFull counts an append refused for lack of space, and returns
// err.
func (j *Journal) countDiskFull(err error) error {
	if errors.Is(err, ErrDiskFull) {
		j.diskFull.Add(1)
	}
	return err
}

// compact removes the oldest log segments whose events the buses have
// mostly evicted, copying into the database what they still retain. The
// log, not the database, then holds what is published and soon evicted:
// under a steady stream of publishes little is copied. It stops at the
// first segment whose retained events fill more than a quarter of it,
// unless the log from there on is over its bound: twice CheckpointBytes
// if set, else compactLimit. With the bound following the rings, it first
// deletes from the database what the rings evicted (trimEvicted), and the
// log is kept within compactLimit, so the journal takes at most about
// twice what the rings retain plus a segment.
func (j *Journal) compact() error {
	j.ckptMu.Lock()
	defer j.ckptMu.Unlock()
	limit := 2 * uint64(j.opts.CheckpointBytes)
	if j.adaptive {
		if err := j.trimEvicted(); err != nil {
			j.rearm(limit, err)
			return j.countCheckpoint(err)
		}
		limit = j.compactLimit()
	}
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

// compactLimit is the log's bound when it follows the rings: twice the
// bytes the rings retain (in the database's format), less what the
// database file takes on disk, and at least half a segment. The database
// holds retained events that the log no longer does, and its free pages,
// which it reuses; so the journal takes at most max(2 × retained, database
// + half a segment) plus what the current segment has allocated ahead.
func (j *Journal) compactLimit() uint64 {
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

// trimEvicted deletes from the database, in a transaction of its own, the
// events the buses have evicted since the last checkpoint: what a
// checkpoint then writes reuses their pages, rather than growing the file
// by as much. j.ckptMu must be held.
func (j *Journal) trimEvicted() error {
	type trim struct {
		s     *Store
		below uint64
	}
	var trims []trim
	for _, s := range j.storeList() {
		s.mu.Lock()
		below := s.win.earliest()
		if below == 0 {
			below = s.lastID + 1
		}
		below = min(below, s.ckptID+1) // the database holds nothing past ckptID
		if !s.deleted && s.dbFirst != 0 && below > s.dbFirst {
			trims = append(trims, trim{s, below})
		}
		s.mu.Unlock()
	}
	if len(trims) == 0 {
		return nil
	}
	err := guard(func() error {
		return j.db.Update(func(tx *bolt.Tx) error {
			if j.failCkpt != nil {
				if err := j.failCkpt(); err != nil {
					return err
				}
			}
			var arena []byte
			for _, t := range trims {
				b := eventsBucket(tx, t.s.num)
				if b == nil {
					continue // deleted meanwhile
				}
				var err error
				if arena, err = trimBelow(b, t.below, arena); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		return classify(err)
	}
	for _, t := range trims {
		t.s.mu.Lock()
		t.s.dbFirst = max(t.s.dbFirst, t.below)
		t.s.mu.Unlock()
	}
	return nil
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

func (j *Journal) storeList() []*Store {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]*Store, 0, len(j.stores))
	for _, s := range j.stores {
		out = append(out, s)
	}
	return out
}

// work is what a checkpoint writes for one bus.
type work struct {
	s        *Store
	first    uint64        // the id of evs[0]
	evs      []storedEvent // the events to copy, ids consecutive
	earliest uint64        // delete ids below it
	through  uint64        // the database holds the bus's events up to this id after the checkpoint
}

// checkpointThrough copies into the database every bus's events that log
// segments up to seq hold and that the bus retains, applies retention
// there, then removes those segments. j.ckptMu must be held.
func (j *Journal) checkpointThrough(seq uint64) error {
	var works []work
	for _, s := range j.storeList() {
		s.mu.Lock()
		if s.deleted {
			s.mu.Unlock()
			continue
		}
		w := work{s: s, through: s.ckptID, earliest: s.win.earliest()}
		if w.earliest == 0 {
			w.earliest = s.lastID + 1
		}
		// The global bus's records may refer to session records in the
		// segments removed: those are copied too (refs.go).
		w.through = max(w.through, s.lastThrough(seq))
		// No reference may point into the segments being removed, even
		// if this checkpoint fails (see refsFor).
		s.logFloor = max(s.logFloor, w.through)
		if s.session == "" {
			j.retired.Store(max(j.retired.Load(), seq))
		}
		w.first = max(s.ckptID+1, s.win.first)
		for id := w.first; id <= w.through && s.win.n > 0; id++ {
			if f := s.win.at(int(id - s.win.first)).f; f != nil {
				w.evs = append(w.evs, storedEvent{typ: f.Type, env: f.JSON()})
			} else if typ, env, ok := s.pendAt(id); ok {
				w.evs = append(w.evs, storedEvent{typ: typ, env: env})
			} else {
				s.mu.Unlock()
				return fmt.Errorf("journal: bus %d: event %d, to checkpoint, is neither in memory nor in the log", s.num, id)
			}
		}
		unchanged := w.through == s.ckptID && w.earliest == s.dbFirst
		s.mu.Unlock()
		if !unchanged {
			works = append(works, w)
		}
	}
	n := 0
	for _, w := range works {
		for _, ev := range w.evs {
			n += eventLen(ev.typ, len(ev.env))
		}
		n += (len(w.evs)/chunkMaxEvents + 1) * chunkHeadLen
	}
	// bbolt keeps values until the commit: they are cut from one arena
	// whose bytes are not reused before it (a larger one is allocated if
	// needed). The next checkpoint reuses it: fresh memory costs page
	// faults.
	arena := j.arena[:0]
	if cap(arena) < n+n/8 {
		arena = make([]byte, 0, n+n/8)
	}
	// Opening checked every page: a panic here is damage done since, which
	// fails the checkpoint (the log keeps the events) rather than the
	// daemon.
	err := guard(func() error {
		return j.db.Update(func(tx *bolt.Tx) error {
			if j.failCkpt != nil {
				if err := j.failCkpt(); err != nil {
					return err
				}
			}
			for _, w := range works {
				m, err := getMeta(tx, w.s.num)
				if err != nil {
					return err
				}
				if m == nil {
					continue // deleted meanwhile
				}
				b, err := tx.Bucket(bucketEvents).CreateBucketIfNotExists(idKey(w.s.num))
				if err != nil {
					return err
				}
				b.FillPercent = 0.95 // keys only grow
				if len(w.evs) > 0 {
					arena, err = appendChunks(arena, w.first, len(w.evs),
						func(i int) (string, []byte) { return w.evs[i].typ, w.evs[i].env },
						func(id uint64, v []byte) error { return b.Put(idKey(id), v) })
					if err != nil {
						return err
					}
				}
				if arena, err = trimBelow(b, w.earliest, arena); err != nil {
					return err
				}
				if m.LastID != w.through {
					m.LastID = w.through
					if err := putMeta(tx, w.s.num, m); err != nil {
						return err
					}
				}
			}
			return nil
		})
	})
	if cap(arena) <= maxPooledArena {
		j.arena = arena[:0]
	}
	if err != nil {
		return classify(err)
	}
	for _, w := range works {
		w.s.mu.Lock()
		w.s.ckptID = max(w.s.ckptID, w.through)
		w.s.syncedID = max(w.s.syncedID, w.through)
		w.s.dbFirst = w.earliest
		w.s.dropPendThrough(w.through)
		for len(w.s.segs) > 0 && w.s.segs[0].last <= w.through {
			w.s.segs = w.s.segs[1:] // in the database now
		}
		w.s.mu.Unlock()
	}
	j.releaseRecovered()
	if j.opts.afterCheckpoint != nil {
		j.opts.afterCheckpoint(seq, false)
	}
	err = j.wal.removeThrough(seq)
	if err == nil && j.opts.afterCheckpoint != nil {
		j.opts.afterCheckpoint(seq, true)
	}
	return err
}

// releaseRecovered unmaps the segments Open replayed once no store refers
// to them: every store's pend is empty (a deleted store's is dropped by
// Delete), and frames built from them are copies. j.ckptMu must be held,
// so that no checkpoint is reading them.
func (j *Journal) releaseRecovered() {
	if j.recoveredMaps == nil {
		return
	}
	for _, s := range j.storeList() {
		s.mu.Lock()
		pending := len(s.pend) > 0
		s.mu.Unlock()
		if pending {
			return
		}
	}
	for _, m := range j.recoveredMaps {
		unmapSegment(m)
	}
	j.recoveredMaps = nil
}

// trimBelow deletes the events of b below id: chunks that end below it,
// and the older part of the chunk that holds it, which is written again
// from id on (into arena, which it returns). Disk then holds what the ring
// does.
func trimBelow(b *bolt.Bucket, id uint64, arena []byte) ([]byte, error) {
	var dels [][]byte
	var keep []storedEvent
	c := b.Cursor()
	for k, v := c.First(); k != nil && keyID(k) < id; k, v = c.Next() {
		dels = append(dels, idKey(keyID(k)))
		evs, err := parseChunk(v)
		if err != nil {
			continue // damaged (Open drops those first): nothing to keep
		}
		if last := keyID(k) + uint64(len(evs)) - 1; last >= id {
			keep = evs[id-keyID(k):]
			break
		}
	}
	var err error
	if len(keep) > 0 {
		// keep aliases the page being rewritten: encode it first.
		var vals [][]byte
		arena, err = appendChunks(arena, id, len(keep),
			func(i int) (string, []byte) { return keep[i].typ, keep[i].env },
			func(_ uint64, v []byte) error { vals = append(vals, v); return nil })
		if err != nil {
			return arena, err
		}
		for _, k := range dels {
			if err := b.Delete(k); err != nil {
				return arena, err
			}
		}
		start := id
		for _, v := range vals {
			if err := b.Put(idKey(start), v); err != nil {
				return arena, err
			}
			start += uint64(binary.BigEndian.Uint32(v[4:]))
		}
		return arena, nil
	}
	for _, k := range dels {
		if err := b.Delete(k); err != nil {
			return arena, err
		}
	}
	return arena, nil
}

// deleteKeysBelow deletes the chunks of b whose key is below key.
func deleteKeysBelow(b *bolt.Bucket, key uint64) error {
	var dels [][]byte
	c := b.Cursor()
	for k, _ := c.First(); k != nil && keyID(k) < key; k, _ = c.Next() {
		dels = append(dels, idKey(keyID(k)))
	}
	for _, k := range dels {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// Sessions returns the ids of the sessions the journal holds, sorted.
func (j *Journal) Sessions() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var ids []string
	for name := range j.names {
		if name != "" {
			ids = append(ids, name)
		}
	}
	slices.Sort(ids)
	return ids
}

// OpenBus returns the store of session ("" for the global bus), its epoch
// and the ring size it was created with (0: the daemon's default). A
// session the journal does not hold is created, on a new epoch, with
// ringSize; for one it holds, ringSize is ignored.
func (j *Journal) OpenBus(session string, ringSize int) (bus.Store, string, int, error) {
	return j.openBus(session, ringSize, false, "")
}

// OpenAutoBus is OpenBus of a session a publish by peer creates, with the
// default ring size: the journal remembers it as such, and peer with it
// (see Auto).
func (j *Journal) OpenAutoBus(session, peer string) (bus.Store, string, int, error) {
	return j.openBus(session, 0, true, peer)
}

// Auto reports whether session was created by OpenAutoBus, and the peer
// stored with it: "" when the state dir was written before peers were
// stored.
func (j *Journal) Auto(session string) (peer string, auto bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	num, ok := j.names[session]
	if !ok || !j.metas[num].Auto {
		return "", false
	}
	return j.metas[num].Peer, true
}

func (j *Journal) openBus(session string, ringSize int, auto bool, peer string) (bus.Store, string, int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return nil, "", 0, ErrClosed
	}
	if num, ok := j.names[session]; ok {
		m := j.metas[num]
		return j.stores[num], m.Epoch, m.RingSize, nil
	}
	num := j.nextNum
	m := &busMeta{Session: session, Global: session == "", Epoch: bus.NewEpoch(), RingSize: ringSize, Auto: auto, Peer: peer}
	err := j.db.Update(func(tx *bolt.Tx) error {
		if err := putMeta(tx, num, m); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keyNextNum, idKey(num+1))
	})
	if err != nil {
		return nil, "", 0, classify(err)
	}
	j.nextNum++
	s := j.addStoreLocked(num, m)
	return s, m.Epoch, ringSize, nil
}

func (j *Journal) addStoreLocked(num uint64, m *busMeta) *Store {
	// What the bus held at Open is in the database, not the log: logFloor
	// keeps references away from it.
	s := &Store{j: j, num: num, session: m.Session, epoch: m.Epoch, lastID: m.LastID, ckptID: m.LastID,
		syncedID: m.LastID, logFloor: m.LastID, maxLen: bus.DefaultRingSize, maxBytes: bus.DefaultRingMaxBytes}
	j.stores[num], j.names[m.Session], j.metas[num] = s, num, m
	return s
}

// Delete forgets session and deletes its events and settings. A session
// the journal does not hold is no error. A journal read-only for lack of
// space refuses it with ErrDiskFull.
func (j *Journal) Delete(session string) error {
	if j.readOnly.Load() {
		return fmt.Errorf("%w: the journal is read-only until space returns", ErrDiskFull)
	}
	j.mu.Lock()
	num, ok := j.names[session]
	if !ok || session == "" || j.closed {
		j.mu.Unlock()
		return nil
	}
	s := j.stores[num]
	delete(j.names, session)
	delete(j.stores, num)
	delete(j.metas, num)
	j.mu.Unlock()
	s.mu.Lock()
	s.deleted = true
	s.pend = nil // no longer to be copied, nor read
	s.mu.Unlock()
	err := j.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketBuses).Delete(idKey(num)); err != nil {
			return err
		}
		err := tx.Bucket(bucketEvents).DeleteBucket(idKey(num))
		if errors.Is(err, bolt.ErrBucketNotFound) {
			err = nil
		}
		return err
	})
	return classify(err)
}

// Stats are the journal's figures. Counters are cumulative since Open.
type Stats struct {
	// BytesOnDisk is the size of the database and the log segments.
	BytesOnDisk int64
	// LogBytes is the size of the log not yet checkpointed.
	LogBytes int64
	// DBBytes is the size of the database file.
	DBBytes int64
	// Checkpoints counts the checkpoints and compactions that copied the
	// log into the database and removed segments; CheckpointErrors those
	// that failed.
	Checkpoints, CheckpointErrors uint64
	// DiskFull counts appends refused for lack of space (ErrDiskFull).
	DiskFull uint64
}

// Stats returns the journal's figures. It reads the directory, so it is
// meant for a scrape, not for a hot path.
func (j *Journal) Stats() Stats {
	var st Stats
	ents, _ := os.ReadDir(j.dir)
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			st.BytesOnDisk += fi.Size()
			if e.Name() == dbName {
				st.DBBytes = fi.Size()
			}
		}
	}
	st.LogBytes = int64(j.wal.end() - j.wal.start())
	st.Checkpoints, st.CheckpointErrors = j.checkpoints.Load(), j.checkpointErrors.Load()
	st.DiskFull = j.diskFull.Load()
	return st
}

// Close stops the background work, checkpoints everything, removes the
// log and writes the clean-shutdown mark. Appends fail with ErrClosed from
// then on. Close is idempotent.
func (j *Journal) Close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.closed = true
	readOnly := j.readOnly.Load()
	j.mu.Unlock()
	close(j.stop)
	j.wg.Wait()
	if readOnly {
		// Nothing was written: what the disk holds is recovered next time.
		if err := j.db.Close(); err != nil {
			return fmt.Errorf("journal: close: %w", err)
		}
		return nil
	}

	j.ckptMu.Lock()
	defer j.ckptMu.Unlock()
	seq, err := j.wal.close()
	if err == nil {
		err = j.checkpointThrough(seq)
	}
	if err == nil {
		err = j.db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket(bucketMeta).Put(keyClean, []byte{1})
		})
	}
	if cerr := j.db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("journal: close: %w", err)
	}
	return nil
}
