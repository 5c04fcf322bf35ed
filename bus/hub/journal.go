package hub

import (
	"github.com/localbus/localbus/bus"
)

// A Journal stores buses durably; *journal.Journal implements it.
type Journal interface {
	// Sessions lists the ids of the sessions it holds.
	Sessions() []string
	// OpenBus returns the store, epoch and stored ring size (0: the
	// default) of session, "" for the global bus, creating it with
	// ringSize if it is not held. A store may also implement
	// DurableStore.
	OpenBus(session string, ringSize int) (st bus.Store, epoch string, storedRingSize int, err error)
	// Delete deletes a session's data.
	Delete(session string) error
}

// An AutoJournal remembers which sessions a publish created, and the peer
// whose publish did, so that they keep counting against MaxAutoSessions
// and the peer's share of them after a restart: an optional capability of
// a Journal (*journal.Journal implements it).
type AutoJournal interface {
	// OpenAutoBus is OpenBus, with the default ring size, of a session a
	// publish by peer (share.Peer's text) creates.
	OpenAutoBus(session, peer string) (st bus.Store, epoch string, storedRingSize int, err error)
	// Auto reports whether session was opened with OpenAutoBus, and the
	// peer stored with it: "" for one stored without (an older state
	// dir), which the hub counts as share.Unknown's.
	Auto(session string) (peer string, auto bool)
}

// A ConsumerJournal keeps sessions' consumers (SPEC §2.4): an optional
// capability of a Journal. A session of a Journal without it keeps its
// consumers in memory only.
type ConsumerJournal interface {
	// SessionConsumers returns what session's consumers were stored and
	// where to keep them from now on.
	SessionConsumers(session string) ([]ConsumerState, ConsumerStore, error)
}

// A DurableStore is a bus.Store that keeps its bus on stable storage and
// can say how far: an optional capability of the stores a Journal opens,
// asserted once per call of Session.Durability. A session whose store lacks
// it is kept in memory only. *journal.Store implements it.
type DurableStore interface {
	bus.Store
	// Figures returns what the bus's retained events take on disk and the
	// last id known to be on stable storage, which may lag the truth under
	// load but never leads it. It is safe for concurrent use with the
	// bus's own calls.
	Figures() (bytesOnDisk int64, lastSyncedID uint64)
}

// Durability are a durable bus's figures.
type Durability struct {
	// BytesOnDisk is what the bus's retained events take on disk.
	BytesOnDisk int64
	// LastSyncedID is the last id known to be on stable storage.
	LastSyncedID uint64
}

// Durability returns the session's durability figures; false when the
// session is kept in memory only.
func (s *Session) Durability() (Durability, bool) {
	f, ok := s.store.(DurableStore)
	if !ok {
		return Durability{}, false
	}
	var d Durability
	d.BytesOnDisk, d.LastSyncedID = f.Figures()
	return d, true
}
