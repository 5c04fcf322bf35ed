package journal

import (
	"os"
	"path/filepath"
	"time"

	"github.com/localbus/localbus/bus"
)

// DefaultBacklogBytes bounds the export backlogs of every bus together
// (SPEC §12, [upstream] backlog_bytes).
const DefaultBacklogBytes = 1 << 30

// The export backlog of a session is what the journal keeps of it beyond
// its ring for the upstream exporter: the events after the last one NATS
// confirmed. The bus never sees it (its Earliest, Len, Bytes and Scan are
// the ring's); the exporter reads it with ReadExport.
//
// A session's backlog is held from the moment SetExported names it: from
// the oldest event the journal retains of it then, and from its first
// event for a session created afterwards, so that nothing of a burst into
// a new session escapes before its exporter starts. The exporter then
// moves the hold to its cursor (HoldExport) as NATS confirms. Events
// restored at Open are all held for a session SetExported names, until
// its exporter says where its cursor is: a restart, clean or killed,
// keeps what export owes, since checkpoints and compactions copy what the
// window retains, backlog included.
//
// Every backlog together is bounded (SetBacklogBytes). Past the bound the
// oldest held events of any session are dropped first (shedBacklog), by
// the order of their appends: each held store notes a journal-wide stamp
// per append (marks). An append the disk has no room for makes the
// backlogs give way first: the oldest half, then the rest, each time with
// a compaction that frees what they took (makeRoom), before it is refused.
// The exporter finds the ids missing when it reads past them, and counts
// and announces them.

// ageMark says that a held store's events from id on, up to the next
// mark, were appended at the journal's stamp at; 0 is older than every
// append since Open.
type ageMark struct{ id, at uint64 }

// SetBacklogBytes sets the bound of every bus's export backlog together;
// n < 1 means DefaultBacklogBytes.
func (j *Journal) SetBacklogBytes(n int64) {
	if n < 1 {
		n = DefaultBacklogBytes
	}
	j.backlogMax.Store(n)
	j.shedBacklog()
}

// BacklogBytes returns what the export backlogs of every bus take
// together, in the database's format.
func (j *Journal) BacklogBytes() int64 { return j.backlog.Load() }

// SetExported names the sessions whose export backlog the journal holds:
// those match reports true for (nil: none). A session it names that was
// not held is held from the oldest event retained of it; a session
// created later is held from its first event; a session it no longer
// names is released, its backlog dropped. Call it after Open and before
// the buses are restored (OpenBus, then SetLimits), so that the backlog
// an earlier run held is kept. match is called with Journal.mu held.
func (j *Journal) SetExported(match func(session string) bool) {
	j.mu.Lock()
	j.exported = match
	stores := make([]*Store, 0, len(j.stores))
	for _, s := range j.stores {
		if s.session != "" {
			stores = append(stores, s)
		}
	}
	j.mu.Unlock()
	if match != nil {
		j.keepReserve()
	} else {
		j.dropReserve()
	}
	for _, s := range stores {
		want := match != nil && match(s.session)
		s.mu.Lock()
		switch {
		case s.deleted:
		case want && !s.held:
			s.hold()
		case !want && s.held:
			s.release()
		}
		s.mu.Unlock()
	}
	j.shedBacklog()
}

// HoldExport moves session's hold to id, the last event of epoch NATS
// confirmed: the backlog drops what it no longer owes. It returns the hold
// in force, the session's epoch and the id after which its events are
// owed, which is where an exporter without a cursor of that epoch starts;
// held is false when session's backlog is not held (SetExported does not
// name it, or the journal does not hold it). An epoch that is not the
// session's leaves the hold where it is.
func (j *Journal) HoldExport(session, epoch string, id uint64) (holdEpoch string, holdID uint64, held bool) {
	s := j.storeOf(session)
	if s == nil {
		return "", 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleted || !s.held {
		return "", 0, false
	}
	if epoch == s.epoch && id <= s.lastID {
		s.holdID = id
		s.measureRing()
		s.dropBacklog()
	}
	return s.epoch, s.holdID, true
}

// ReadExport appends to into up to max of session's retained events, ring
// or backlog, from id from up to id upTo, if epoch is its epoch, and
// returns it. upTo is the last id the session's bus shows (with
// SyncAlways, a durable one), which the journal cannot tell from its own
// appends. The first event returned is after from when the backlog no
// longer held the events between.
func (j *Journal) ReadExport(session, epoch string, from, upTo uint64, max int, into []*bus.Frame) []*bus.Frame {
	s := j.storeOf(session)
	if s == nil {
		return into
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleted || epoch != s.epoch {
		return into
	}
	n := 0
	s.scanLocked(from, func(f *bus.Frame) bool {
		if f.ID > upTo {
			return false
		}
		into = append(into, f)
		n++
		return n < max
	})
	return into
}

// ExportBacklog returns what session's export backlog takes in the
// database's format.
func (j *Journal) ExportBacklog(session string) int64 {
	s := j.storeOf(session)
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.measureRing()
	return s.win.disk - s.ringDisk
}

func (j *Journal) storeOf(session string) *Store {
	j.mu.Lock()
	defer j.mu.Unlock()
	num, ok := j.names[session]
	if !ok || session == "" {
		return nil
	}
	return j.stores[num]
}

// hold starts holding the store's backlog, from its oldest retained event
// (after its last id when it retains none). s.mu must be held, or the
// store not yet shared.
func (s *Store) hold() {
	s.held = true
	s.holdID = s.lastID
	if s.win.n > 0 {
		s.holdID = s.win.first - 1
	}
	s.marks = append(s.marks[:0], ageMark{id: s.holdID + 1})
	s.j.holdMu.Lock()
	s.j.holders[s] = struct{}{}
	s.j.holdMu.Unlock()
}

// release ends the store's hold: its backlog is dropped. s.mu must be held.
func (s *Store) release() {
	s.held, s.holdID, s.marks = false, 0, nil
	s.j.holdMu.Lock()
	delete(s.j.holders, s)
	s.j.holdMu.Unlock()
	s.measureRing()
	s.dropBacklog()
}

// measureRing counts the window restored at Open as the ring. s.mu must
// be held.
func (s *Store) measureRing() {
	if !s.ringSet {
		s.ringN, s.ringBytes, s.ringDisk, s.ringSet = s.win.n, s.win.bytes, s.win.disk, true
	}
}

// ringEarliest is the oldest id of the ring, 0 when empty. s.mu must be
// held.
func (s *Store) ringEarliest() uint64 {
	if s.ringN == 0 {
		return 0
	}
	return s.win.first + uint64(s.win.n-s.ringN)
}

// leaveRing moves the ring's oldest event into the backlog. s.mu must be
// held.
func (s *Store) leaveRing() {
	e := s.win.at(s.win.n - s.ringN)
	s.ringN--
	s.ringBytes -= int64(e.size)
	s.ringDisk -= int64(e.disk)
	s.j.backlog.Add(int64(e.disk))
}

// dropBacklog drops the backlog's events that no hold needs. s.mu must be
// held.
func (s *Store) dropBacklog() {
	for s.win.n > s.ringN && (!s.held || s.win.first <= s.holdID) {
		s.popOldest()
	}
}

// popOldest drops the backlog's oldest event. s.mu must be held.
func (s *Store) popOldest() {
	d := s.win.at(0).disk
	s.win.pop()
	s.j.backlog.Add(-int64(d))
	for len(s.marks) > 1 && s.marks[1].id <= s.win.first {
		s.marks = s.marks[1:]
	}
}

// markAge notes that the store's events from id on are appended now.
// s.mu must be held.
func (s *Store) markAge(id uint64) {
	m := ageMark{id: id, at: s.j.stamp.Add(1)}
	if n := len(s.marks); n > 0 && s.marks[n-1].id == id {
		s.marks[n-1] = m // the hold started at this id
		return
	}
	s.marks = append(s.marks, m)
}

// releaseBacklog forgets the backlog of a deleted bus. s.mu must be held.
func (s *Store) releaseBacklog() {
	if s.ringSet {
		s.j.backlog.Add(-(s.win.disk - s.ringDisk))
	}
	s.j.holdMu.Lock()
	delete(s.j.holders, s)
	s.j.holdMu.Unlock()
}

// shedBacklog drops the oldest held events, of any bus, while the
// backlogs are over their bound. The caller must hold no store's lock.
func (j *Journal) shedBacklog() {
	if j.backlog.Load() <= j.backlogMax.Load() {
		return
	}
	j.shedMu.Lock()
	defer j.shedMu.Unlock()
	j.shedTo(j.backlogMax.Load(), "the export backlog is over backlog_bytes")
}

// shedTo drops the oldest held events, of any bus, until the backlogs
// take at most bound bytes together. j.shedMu must be held.
func (j *Journal) shedTo(bound int64, why string) {
	for j.backlog.Load() > bound {
		s := j.oldestHolder()
		if s == nil {
			return
		}
		s.mu.Lock()
		from, to := s.shed(bound)
		s.mu.Unlock()
		if to < from {
			return // nothing to drop after all
		}
		j.noteShed(s.session, from, to, why)
	}
}

// oldestHolder returns the held store whose oldest backlog event is the
// oldest appended, nil when no store holds a backlog. It takes each
// store's lock in turn.
func (j *Journal) oldestHolder() *Store {
	j.holdMu.Lock()
	holders := make([]*Store, 0, len(j.holders))
	for s := range j.holders {
		holders = append(holders, s)
	}
	j.holdMu.Unlock()
	var oldest *Store
	var at uint64
	for _, s := range holders {
		s.mu.Lock()
		if !s.deleted && s.held && s.win.n > s.ringN && len(s.marks) > 0 && (oldest == nil || s.marks[0].at < at) {
			oldest, at = s, s.marks[0].at
		}
		s.mu.Unlock()
	}
	return oldest
}

// shed drops the store's oldest backlog events appended at the same time
// (up to its next mark) while the backlogs take more than bound bytes,
// and returns the ids it dropped (to < from: none). s.mu must be held.
func (s *Store) shed(bound int64) (from, to uint64) {
	end := s.lastID + 1
	for _, m := range s.marks {
		if m.id > s.win.first {
			end = m.id
			break
		}
	}
	from = s.win.first
	for s.win.n > s.ringN && s.win.first < end && s.j.backlog.Load() > bound {
		s.popOldest()
	}
	return from, s.win.first - 1
}

// noteShed logs dropped backlog events: the first drop at once, later
// ones at most once per shedLogEvery, with the count since the last line.
// j.shedMu must be held.
func (j *Journal) noteShed(session string, from, to uint64, why string) {
	j.shedUnlogged += to - from + 1
	if now := time.Now(); now.Sub(j.shedLogged) >= shedLogEvery {
		j.logger.Warn("journal: "+why+"; dropping the oldest unexported events",
			"session", session, "from", from, "to", to, "dropped", j.shedUnlogged, "backlog_bytes", j.backlogMax.Load())
		j.shedLogged, j.shedUnlogged = now, 0
	}
}

// shedLogEvery is the least time between two log lines of noteShed.
const shedLogEvery = time.Second

// makeRoom makes the export backlogs give way to an append the disk had
// no room for (SPEC §12): it drops their oldest half (all of them when
// all is set), deletes them from the database, and removes every log
// segment once the database holds what they hold (the current one too:
// starting a new segment first is what fails on a full disk; the next
// append starts one). It reports whether the append is worth trying
// again: something was dropped, or room was made since gen, the value of
// roomGen when the append failed. The caller must hold no store's lock.
func (j *Journal) makeRoom(gen uint64, all bool) bool {
	j.shedMu.Lock()
	defer j.shedMu.Unlock()
	if j.roomGen.Load() != gen {
		return true
	}
	held := j.backlog.Load()
	if held == 0 {
		return false
	}
	bound := held / 2
	if all {
		bound = 0
	}
	j.shedLogged = time.Time{} // logged at once
	j.shedTo(bound, "the disk is full")
	// The database's transactions below need a few pages of room: the
	// reserve's.
	j.dropReserve()
	defer j.keepReserve()
	j.ckptMu.Lock()
	defer j.ckptMu.Unlock()
	err := j.trimEvicted()
	if err == nil {
		var seq uint64
		if seq, err = j.wal.detach(); err == nil {
			err = j.countCheckpoint(j.checkpointThrough(seq))
		}
	}
	if err != nil {
		j.logger.Warn("journal: freeing the space of the export backlog dropped", "err", err)
	}
	j.rearm(j.logBound(), err)
	j.roomGen.Add(1)
	return true
}

// reserveName is a file of reserveBytes the journal keeps beside the
// database while it may hold export backlogs: on a full disk, removing it
// gives room to the database transactions that free the backlog's space
// (makeRoom). keepReserve creates it again when there is room.
const (
	reserveName  = "reserve"
	reserveBytes = 256 << 10
)

// keepReserve creates the reserve file if it is missing and the disk has
// room for it.
func (j *Journal) keepReserve() {
	path := filepath.Join(j.dir, reserveName)
	f, err := openRegular(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return // there already, or no room for it yet
	}
	err = preallocate(f, reserveBytes)
	f.Close()
	if err != nil {
		os.Remove(path)
	}
}

// dropReserve removes the reserve file.
func (j *Journal) dropReserve() {
	os.Remove(filepath.Join(j.dir, reserveName))
}
