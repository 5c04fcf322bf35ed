package journal

import (
	"github.com/localbus/localbus/bus"
)

// DefaultBacklogBytes bounds the export backlogs of every bus together
// (SPEC §12, [upstream] backlog_bytes).
const DefaultBacklogBytes = 1 << 30

// The export backlog of a bus is what the journal keeps of it beyond its
// ring for the upstream exporter: the events after the last one NATS
// confirmed (HoldExport), up to the journal's bound (SetBacklogBytes) for
// every bus together. The bus never sees the backlog (its Earliest, Len,
// Bytes and Scan are the ring's); the exporter reads it with ReadExport.
// Past the bound, the oldest held events of the bus being appended to are
// dropped, and the exporter finds the ids missing.

// SetBacklogBytes sets the bound of every bus's export backlog together;
// n < 1 means DefaultBacklogBytes.
func (j *Journal) SetBacklogBytes(n int64) {
	if n < 1 {
		n = DefaultBacklogBytes
	}
	j.backlogMax.Store(n)
}

// BacklogBytes returns what the export backlogs of every bus take
// together, in the database's format.
func (j *Journal) BacklogBytes() int64 { return j.backlog.Load() }

func (j *Journal) storeOf(session string) *Store {
	j.mu.Lock()
	defer j.mu.Unlock()
	num, ok := j.names[session]
	if !ok || session == "" {
		return nil
	}
	return j.stores[num]
}

// HoldExport keeps session's events after id beyond its ring, if epoch is
// its epoch, and drops what the hold no longer needs. A session the
// journal does not hold is no error.
func (j *Journal) HoldExport(session, epoch string, id uint64) {
	s := j.storeOf(session)
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleted || (epoch != "" && epoch != s.epoch) {
		return
	}
	s.held, s.holdID = true, id
	s.measureRing()
	s.dropBacklog()
}

// ReleaseExport ends session's hold: its backlog is dropped.
func (j *Journal) ReleaseExport(session string) {
	s := j.storeOf(session)
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = false
	s.measureRing()
	s.dropBacklog()
}

// ReadExport appends to into up to max of session's retained events, ring
// or backlog, from id from on, if epoch is its epoch, and returns it. The
// first event returned is after from when the backlog no longer held the
// events between.
func (j *Journal) ReadExport(session, epoch string, from uint64, max int, into []*bus.Frame) []*bus.Frame {
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

// dropBacklog drops the backlog's events that no hold needs, and past the
// journal's bound the oldest held ones. s.mu must be held.
func (s *Store) dropBacklog() {
	var lostFrom, lostTo uint64
	for s.win.n > s.ringN {
		id := s.win.first
		if s.held && id > s.holdID {
			if s.j.backlog.Load() <= s.j.backlogMax.Load() {
				break
			}
			if lostFrom == 0 {
				lostFrom = id
			}
			lostTo = id
		}
		d := s.win.at(0).disk
		s.win.pop()
		s.j.backlog.Add(-int64(d))
	}
	if lostFrom != 0 {
		s.j.logger.Warn("journal: the export backlog is over its bound; dropping the oldest unexported events",
			"session", s.session, "from", lostFrom, "to", lostTo, "backlog_bytes", s.j.backlogMax.Load())
	}
}

// releaseBacklog forgets the backlog of a deleted bus. s.mu must be held.
func (s *Store) releaseBacklog() {
	if s.ringSet {
		s.j.backlog.Add(-(s.win.disk - s.ringDisk))
	}
}
