package journal

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/localbus/localbus/bus"
	bolt "go.etcd.io/bbolt"
)

// A Store is one bus's journal: a bus.Store whose appends are logged before
// they are retained. It also implements the hub's optional DurableStore
// (Figures). The bus calls its methods with the bus lock held; the
// checkpointer and Figures may call in concurrently, so it locks too.
type Store struct {
	j       *Journal
	num     uint64 // the bus's number in the database, never reused
	session string // "" for the global bus
	epoch   string // the bus's epoch, fixed for the store's life

	mu       sync.Mutex // guards the fields below; taken after Journal.mu, before the log's locks
	win      window     // the retained events; frames restored at Open are nil until read
	lastID   uint64
	maxLen   int
	maxBytes int64
	ckptID   uint64    // last id copied into the database
	dbFirst  uint64    // oldest id the database holds, as of the last checkpoint
	lastLSN  uint64    // log offset past this bus's last record
	segs     []segLast // the log segments holding this bus's records not yet in the database
	logFloor uint64    // ids up to this one are not in the log, or in segments being removed from it
	syncedID uint64    // last id known durable
	deleted  bool
	// pend holds the events that Open restored from the log and that the
	// database lacks until a checkpoint copies them, those from pendFirst
	// on: frames of the window that are nil there are built from it.
	pend      []pendRec
	pendFirst uint64
	// The ring is the newest ringN events of the window; the older ones
	// are the export backlog (backlog.go), kept while held is set and the
	// journal's backlog bound allows. ringSet is false until the ring is
	// first measured (the window restored at Open is all ring).
	ringN     int
	ringBytes int64 // frame sizes of the ring
	ringDisk  int64 // database sizes of the ring
	ringSet   bool
	held      bool      // the backlog is held for an exporter (SetExported)
	holdID    uint64    // the events after this id are owed to the exporter
	marks     []ageMark // when held: the age of the window's events, oldest first
}

// pendAt returns the type and envelope of event id from s.pend, if it
// holds it. s.mu must be held.
func (s *Store) pendAt(id uint64) (string, []byte, bool) {
	if len(s.pend) == 0 || id < s.pendFirst {
		return "", nil, false
	}
	k := sort.Search(len(s.pend), func(i int) bool { return s.pend[i].first > id }) - 1
	if k < 0 || id-s.pend[k].first >= uint64(len(s.pend[k].evs)) {
		return "", nil, false
	}
	typ, env := s.pend[k].at(id)
	return typ, env, true
}

// dropPendThrough forgets the events of s.pend up to id, which the
// database holds now. s.mu must be held.
func (s *Store) dropPendThrough(id uint64) {
	if len(s.pend) == 0 || id < s.pendFirst {
		return
	}
	s.pendFirst = id + 1
	k := 0
	for k < len(s.pend) && s.pend[k].first+uint64(len(s.pend[k].evs)) <= s.pendFirst {
		k++
	}
	clear(s.pend[:k])
	if s.pend = s.pend[k:]; len(s.pend) == 0 {
		s.pend = nil // releases what the log's segments were read into
	}
}

// segLast is a log segment and the last id of a bus it holds; for the
// global bus, also the oldest segment its records there refer to (noRefs:
// none).
type segLast struct {
	seq  uint64
	last uint64
	refs uint64
}

// noRefs is segLast.refs of records that refer to no other record.
const noRefs = ^uint64(0)

// lastThrough returns the last id of the bus's records that removing the
// log segments up to seq takes from the log: those in these segments, and
// those that refer into them. s.mu must be held.
func (s *Store) lastThrough(seq uint64) uint64 {
	var through uint64
	for _, sl := range s.segs {
		if sl.seq <= seq || sl.refs <= seq {
			through = max(through, sl.last)
		}
	}
	return through
}

// entry is one retained event: its frame (nil until read back from the
// database), the frame's size and the size it takes in the database.
type entry struct {
	f    *bus.Frame
	size uint32
	disk uint32
}

// window is a double-ended queue of the retained events, ids consecutive
// from first.
type window struct {
	buf   []entry
	head  int
	n     int
	first uint64
	bytes int64 // frame sizes
	disk  int64 // database sizes
}

func (w *window) at(i int) *entry { return &w.buf[(w.head+i)%len(w.buf)] }

func (w *window) push(id uint64, e entry) {
	if w.n == len(w.buf) {
		c := max(2*len(w.buf), 16)
		nb := make([]entry, c)
		for i := range w.n {
			nb[i] = *w.at(i)
		}
		w.buf, w.head = nb, 0
	}
	if w.n == 0 {
		w.first = id
	}
	*w.at(w.n) = e
	w.n++
	w.bytes += int64(e.size)
	w.disk += int64(e.disk)
}

func (w *window) pop() {
	e := w.at(0)
	w.bytes -= int64(e.size)
	w.disk -= int64(e.disk)
	*e = entry{}
	w.head = (w.head + 1) % len(w.buf)
	w.n--
	w.first++
}

// earliest is the oldest retained id, 0 when empty.
func (w *window) earliest() uint64 {
	if w.n == 0 {
		return 0
	}
	return w.first
}

// Append implements bus.Store: it logs frames as one record, waits until
// the record is durable with SyncAlways, then returns. On error
// (ErrDiskFull, ErrClosed) nothing is retained and nothing of the record
// stays in the log; after a failed sync the frames are retained but the
// journal refuses every later append.
func (s *Store) Append(frames []*bus.Frame) error {
	mark, durable, err := s.AppendDeferred(frames)
	if err != nil || durable {
		return err
	}
	_, err = s.WaitDurable(mark)
	return err
}

// AppendDeferred implements bus.DeferredStore: it logs frames as one
// record and retains them, and returns the log offset past the record,
// which is durable at once unless the mode is SyncAlways. On error nothing
// is retained and nothing of the record stays in the log.
func (s *Store) AppendDeferred(frames []*bus.Frame) (mark uint64, durable bool, err error) {
	return s.appendDeferred(frames, "", nil)
}

// AppendKeyed implements bus.KeyStore: AppendDeferred of a session's
// frames in one log record with key and its value, an idempotency key the
// journal then holds (Keys) and copies into the database before the
// record's segment goes (keys.go).
func (s *Store) AppendKeyed(frames []*bus.Frame, key string, value []byte) (mark uint64, durable bool, err error) {
	if s.session == "" || key == "" || len(key) > maxKeyLen {
		return 0, false, fmt.Errorf("journal: a keyed append needs a session and a key of 1 to %d bytes", maxKeyLen)
	}
	return s.appendDeferred(frames, key, value)
}

func (s *Store) appendDeferred(frames []*bus.Frame, key string, val []byte) (mark uint64, durable bool, err error) {
	if len(frames) == 0 {
		return s.j.wal.end(), true, nil
	}
	if s.j.readOnly.Load() && !s.j.tryWritable() {
		return 0, false, s.j.countDiskFull(fmt.Errorf("%w: the journal is read-only until space returns", ErrDiskFull))
	}
	var runs []copyRun
	if s.session == "" {
		runs = s.j.copyRunsOf(frames) // before s.mu: it takes Journal.mu
	}
	defer s.j.shedBacklog() // after the unlock below: it takes other stores' locks
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleted {
		return 0, false, ErrClosed
	}
	if frames[0].ID != s.lastID+1 {
		return 0, false, fmt.Errorf("journal: append of id %d after %d", frames[0].ID, s.lastID)
	}
	lsn, seq, refSeg, err := s.logRecord(frames, runs, key, val)
	if err != nil {
		return 0, false, err
	}
	last := frames[len(frames)-1].ID
	if n := len(s.segs); n > 0 && s.segs[n-1].seq == seq {
		s.segs[n-1].last = last
		s.segs[n-1].refs = min(s.segs[n-1].refs, refSeg)
	} else {
		s.segs = append(s.segs, segLast{seq: seq, last: last, refs: refSeg})
	}
	if s.held {
		s.markAge(frames[0].ID)
	}
	for _, f := range frames {
		e := entry{f: f, size: uint32(f.Size()), disk: uint32(eventLen(f.Type, len(f.JSON())))}
		s.measureRing()
		s.win.push(f.ID, e)
		s.ringN++
		s.ringBytes += int64(e.size)
		s.ringDisk += int64(e.disk)
	}
	s.lastID = frames[len(frames)-1].ID
	s.lastLSN = lsn
	s.evictLocked()
	return lsn, s.j.mode != SyncAlways, nil
}

// logRecord logs frames as one record (for the global bus, refs to the
// session records that copies, its copyRunsOf, copy; key and val for a
// keyed append) and returns the log offset past it, its segment and the
// oldest segment it refers to. When the disk has no room, the export
// backlogs give way first (makeRoom: s.mu is released meanwhile) and the
// record is tried again, before the append is refused. s.mu must be held.
func (s *Store) logRecord(frames []*bus.Frame, copies []copyRun, key string, val []byte) (lsn, seq, refSeg uint64, err error) {
	for try := 0; ; try++ {
		gen := s.j.roomGen.Load()
		var runs []refRun
		runs, refSeg = s.j.refsFor(copies)
		if key != "" {
			lsn, seq, err = s.j.logKeyed(s.num, s.session, frames, key, val)
		} else {
			lsn, seq, err = s.j.log(s.num, frames, runs, "", nil)
		}
		if !errors.Is(err, ErrDiskFull) || try == 2 {
			return lsn, seq, refSeg, s.j.countDiskFull(err)
		}
		s.mu.Unlock()
		made := s.j.makeRoom(gen, try == 1)
		s.mu.Lock()
		if !made {
			return 0, 0, 0, s.j.countDiskFull(err)
		}
		if s.deleted {
			return 0, 0, 0, ErrClosed
		}
	}
}

// WaitDurable implements bus.DeferredStore: it returns once the log is
// durable up to mark, sharing the sync with every append waiting at that
// moment (group commit), and the log offset durable then.
func (s *Store) WaitDurable(mark uint64) (uint64, error) {
	return s.j.waitDurable(mark)
}

func (s *Store) evictLocked() {
	s.measureRing()
	for s.ringN > s.maxLen || (s.ringBytes > s.maxBytes && s.ringN > 1) {
		s.leaveRing()
	}
	s.dropBacklog()
}

// TrimTo implements bus.Trimmer: the memory budget of every ring together.
func (s *Store) TrimTo(maxBytes int64, keep uint64) {
	defer s.j.shedBacklog()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.measureRing()
	for s.ringN > 1 && s.ringBytes > maxBytes && s.ringEarliest() < keep {
		s.leaveRing()
	}
	s.dropBacklog()
}

// LastID implements bus.Store.
func (s *Store) LastID() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastID
}

// Earliest implements bus.Store.
func (s *Store) Earliest() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.measureRing()
	return s.ringEarliest()
}

// Len implements bus.Store.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.measureRing()
	return s.ringN
}

// Bytes implements bus.Store.
func (s *Store) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.measureRing()
	return s.ringBytes
}

// Scan implements bus.Store: the ring's events from id from on. Events
// restored at Open are read from the database the first time a scan
// reaches them, then kept like the others.
func (s *Store) Scan(from uint64, fn func(*bus.Frame) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.measureRing()
	s.scanLocked(max(from, s.ringEarliest()), fn)
}

// scanLocked calls fn with the retained events from id from on, ring or
// backlog, until it returns false. s.mu must be held.
func (s *Store) scanLocked(from uint64, fn func(*bus.Frame) bool) {
	if s.win.n == 0 {
		return
	}
	start := 0
	if from > s.win.first {
		if from-s.win.first >= uint64(s.win.n) {
			return
		}
		start = int(from - s.win.first)
	}
	if s.win.at(start).f == nil {
		if err := s.loadLocked(start); err != nil {
			s.j.logger.Error("journal: reading stored events", "session", s.session, "err", err)
		}
	}
	for i := start; i < s.win.n; i++ {
		f := s.win.at(i).f
		if f == nil {
			continue // unreadable; logged above
		}
		if !fn(f) {
			return
		}
	}
}

// loadLocked reads the frames of the window from index i up to the first
// one already in memory. s.mu must be held.
func (s *Store) loadLocked(i int) error {
	return guard(func() error { return s.loadGuarded(i) })
}

func (s *Store) loadGuarded(i int) error {
	// Events restored from the log come from s.pend, the rest from the
	// database; ids of the latter come first.
	for k := i; k < s.win.n && len(s.pend) > 0; k++ {
		e, id := s.win.at(k), s.win.first+uint64(k)
		if e.f != nil {
			continue
		}
		if typ, env, ok := s.pendAt(id); ok {
			e.f = bus.NewFrame(id, typ, env)
		}
	}
	if s.win.at(i).f != nil {
		return nil
	}
	return s.j.db.View(func(tx *bolt.Tx) error {
		b := eventsBucket(tx, s.num)
		if b == nil {
			return errors.New("journal: no events bucket")
		}
		c := b.Cursor()
		id := s.win.first + uint64(i)
		k, v := c.Seek(idKey(id))
		if k == nil || keyID(k) > id {
			k, v = c.Prev() // the chunk that holds id starts before it
		}
		for ; i < s.win.n && s.win.at(i).f == nil; k, v = c.Next() {
			if k == nil || keyID(k) > id {
				return fmt.Errorf("journal: event %d missing", id)
			}
			evs, err := parseChunk(v)
			if err != nil {
				return fmt.Errorf("journal: chunk %d: %w", keyID(k), err)
			}
			for first := keyID(k); id-first < uint64(len(evs)) && i < s.win.n && s.win.at(i).f == nil; i, id = i+1, id+1 {
				ev := evs[id-first]
				s.win.at(i).f = bus.NewFrame(id, ev.typ, ev.env)
			}
		}
		return nil
	})
}

// SetLimits implements bus.Store. Limits below 1 are raised to 1.
func (s *Store) SetLimits(maxLen int, maxBytes int64) {
	defer s.j.shedBacklog()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxLen, s.maxBytes = max(maxLen, 1), max(maxBytes, 1)
	s.evictLocked()
}

// Figures returns what the bus's retained events take in the database's
// format (they may still be in the log only) and the last id known to be
// on stable storage. Under load the latter may lag the true figure, never
// lead it.
func (s *Store) Figures() (bytesOnDisk int64, lastSyncedID uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.j.wal.synced.Load() >= s.lastLSN {
		s.syncedID = s.lastID
	}
	return s.win.disk, s.syncedID
}
