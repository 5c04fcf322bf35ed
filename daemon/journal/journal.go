package journal

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
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
	// rings retain (see logBound), so that the journal takes at most
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
	opts Options
	// backlog is what the export backlogs of every bus take in the
	// database's format, backlogMax its bound (backlog.go).
	backlog    atomic.Int64
	backlogMax atomic.Int64
	stamp      atomic.Uint64 // counts the appends to held stores, for their age marks
	// holdMu guards holders, the stores that hold a backlog; taken after
	// Store.mu. shedMu is held while backlogs are shed, before Store.mu,
	// and guards what noteShed has logged.
	holdMu       sync.Mutex
	holders      map[*Store]struct{}
	shedMu       sync.Mutex
	shedLogged   time.Time
	shedUnlogged uint64
	roomGen      atomic.Uint64 // counts makeRoom's compactions
	mode         string
	logger       *slog.Logger
	db           *bolt.DB
	wal          *wal
	dir          string

	ckptMu    sync.Mutex    // one checkpoint at a time; taken before mu
	arena     []byte        // guarded by ckptMu: the last checkpoint's buffer
	compactAt atomic.Uint64 // the log offset from which an append asks for compact
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

	// keysMu guards logKeys, the idempotency keys whose log records a
	// checkpoint has not copied yet (keys.go); taken after Store.mu.
	keysMu      sync.Mutex
	logKeys     map[string]logKey
	droppedKeys map[string]bool // dropped by DropKeys, for the next checkpoint to delete

	mu      sync.Mutex // guards the fields below; taken before Store.mu
	closed  bool
	stores  map[uint64]*Store
	names   map[string]uint64 // session id ("" for the global bus) to bus number
	metas   map[uint64]*busMeta
	nextNum uint64
	// exported names the sessions whose export backlog is held
	// (SetExported); nil: none.
	exported func(session string) bool

	// readOnly is set while Open could not write what recovery found for
	// lack of space (readonly.go); pending is what it has yet to write.
	// roMu guards pending and roTried, which rate-limits the attempts.
	readOnly atomic.Bool
	// noDB is set, with readOnly, while the journal has no database: a
	// state dir with nothing in it on a disk with no room to create one
	// (readonly.go). j.db is set before noDB is cleared.
	noDB    atomic.Bool
	roMu    sync.Mutex
	roTried time.Time
	pending *recovery
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
		holders: map[*Store]struct{}{},
	}
	if j.logger == nil {
		j.logger = slog.Default()
	}
	j.backlogMax.Store(DefaultBacklogBytes)
	j.wal = newWAL(j.dir, opts.SegmentBytes, opts.WrapFile, opts.OnSync, opts.SyncSeconds, j.mode == SyncNever, j.mode == SyncAlways)
	err := PrepareDir(opts.Dir)
	var rc *recovery
	if err == nil {
		rc, err = j.recover()
	}
	if j.startsEmpty(err) {
		j.enterEmpty(err)
		return j, nil
	}
	if err == nil {
		err = guard(func() error { return j.persist(rc) })
		if errors.Is(err, ErrDiskFull) {
			j.enterReadOnly(rc, err)
			return j, nil
		}
	}
	if err != nil {
		for _, m := range j.recoveredMaps {
			unmapSegment(m)
		}
		if j.db != nil {
			j.db.Close()
		}
		return nil, err
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
		// The stores stop reading the log's mappings before they go.
		for _, s := range j.storeList() {
			s.mu.Lock()
			s.pend = nil
			s.mu.Unlock()
		}
		j.ckptMu.Lock()
		for _, m := range j.recoveredMaps {
			unmapSegment(m)
		}
		j.recoveredMaps = nil
		j.ckptMu.Unlock()
		if j.noDB.Load() {
			return nil
		}
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
