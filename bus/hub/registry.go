package hub

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/share"
)

// A Session is one named bus in the hub.
type Session struct {
	ID string
	// Bus is the session's event bus.
	Bus *bus.Bus
	// RingSize is the ring size the session was created with, 0 for the
	// daemon's default.
	RingSize int

	auto      bool           // created by a publish; fixed
	autoAcct  *share.Account // auto's unit in Hub.autos; nil once unlinked. Guarded by Hub.mu.
	creator   share.Peer     // whose publish created it (auto); fixed
	publishMu sync.Mutex     // orders the session's events onto the global bus
	active    time.Time      // guarded by publishMu: creation or last publish
	frames    []*bus.Frame   // guarded by publishMu: scratch for Publish
	copies    [1]bus.Copies  // guarded by publishMu: scratch for the global copy's batch
	store     bus.Store      // the bus's store when journaled, else nil
	consumers *ConsumerSet   // fixed
	rates     rateWindow     // SampleRates's, and the rates it computed
}

// Consumers returns the session's consumers (SPEC §2.4).
func (s *Session) Consumers() *ConsumerSet { return s.consumers }

// Session returns the session named id.
func (h *Hub) Session(id string) (*Session, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.sessions[id]
	return s, ok
}

// Sessions returns every session, sorted by id.
func (h *Hub) Sessions() []*Session {
	h.mu.Lock()
	out := make([]*Session, 0, len(h.sessions))
	for _, s := range h.sessions {
		out = append(out, s)
	}
	h.mu.Unlock()
	slices.SortFunc(out, func(a, b *Session) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Len returns the number of sessions.
func (h *Hub) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sessions)
}

// Create makes a new session. ringSize 0 means the hub's ring size. It
// returns ErrExists, ErrSessionLimit, or an *bus.InputError for a bad ring
// size.
func (h *Hub) Create(id bus.SessionID, ringSize int) (*Session, error) {
	if ringSize < 0 || ringSize > bus.MaxRingSize {
		return nil, &bus.InputError{Field: "ringSize", Reason: "want 1 to 1000000"}
	}
	h.lockSettled(id.String())
	s, err := h.createLocked(id, ringSize, byCreate, share.Privileged)
	h.mu.Unlock()
	if err != nil {
		return nil, err
	}
	h.announce(bus.TypeSessionOpened, s.ID)
	h.logSession("session created", s.ID, "ring_size", s.Bus.Stats().Limits.RingSize)
	return s, nil
}

// lockSettled locks h.mu once no delete of session id is under way: it
// waits for the tombstone of a delete to go. It returns with h.mu held.
func (h *Hub) lockSettled(id string) {
	h.mu.Lock()
	for {
		done, ok := h.deleting[id]
		if !ok {
			return
		}
		h.mu.Unlock()
		<-done
		h.mu.Lock()
	}
}

// How a session comes to be, for createLocked.
type creation int

const (
	byCreate  creation = iota // Create (POST /api/v1/sessions)
	byPublish                 // a publish to a missing session (AutoCreate)
	byRestore                 // held by the journal at New
)

// createLocked makes session id. A restored session is never refused by
// the limits; one a publish by peer creates also counts against
// MaxAutoSessions and peer's share of them (a restored one, against the
// share of the peer the journal stored with it). h.mu must be held.
func (h *Hub) createLocked(id bus.SessionID, ringSize int, how creation, peer share.Peer) (*Session, error) {
	restore := how == byRestore
	if h.closed {
		return nil, ErrClosed
	}
	if _, ok := h.sessions[id.String()]; ok {
		return nil, ErrExists
	}
	if len(h.sessions) >= h.opts.MaxSessions && !restore {
		return nil, ErrSessionLimit
	}
	var autoAcct *share.Account
	if how == byPublish {
		autoAcct = h.autos.Account(peer)
		if err := autoAcct.Acquire(1); err != nil {
			return nil, err
		}
	}
	s, err := h.openLocked(id, ringSize, how, peer)
	if err != nil {
		if autoAcct != nil {
			autoAcct.Release(1)
		}
		return nil, err
	}
	if s.auto {
		if autoAcct == nil { // restored
			autoAcct = h.autos.Account(s.creator)
			autoAcct.Force(1)
		}
		s.autoAcct = autoAcct
	}
	h.sessions[s.ID] = s
	h.order, h.orderGen = nil, h.orderGen+1
	return s, nil
}

// openLocked opens the store and bus of session id for createLocked.
// h.mu must be held.
func (h *Hub) openLocked(sid bus.SessionID, ringSize int, how creation, peer share.Peer) (*Session, error) {
	id := sid.String()
	restore := how == byRestore
	var st bus.Store
	epoch := ""
	auto := how == byPublish
	if j := h.opts.Journal; j != nil {
		var err error
		aj, remembers := j.(AutoJournal)
		switch {
		case auto && remembers:
			st, epoch, ringSize, err = aj.OpenAutoBus(id, peer.String())
		default:
			st, epoch, ringSize, err = j.OpenBus(id, ringSize)
		}
		if err != nil {
			return nil, err
		}
		if restore && remembers {
			var stored string
			stored, auto = aj.Auto(id)
			peer = restoredPeer(stored)
		}
	}
	l := h.busLimits()
	if ringSize > 0 {
		l.RingSize = ringSize
	}
	b, err := bus.New(bus.Options{
		Session: sid, RingSize: l.RingSize, RingMaxBytes: l.RingMaxBytes,
		MaxQueued: l.MaxQueued, MaxQueuedBytes: l.MaxQueuedBytes, MaxSubscribers: l.MaxSubscribers, PeerShare: l.PeerShare,
		Store: st, Epoch: epoch, OnRingBytes: h.addRingBytes,
	})
	if err != nil {
		if st != nil && !restore {
			h.opts.Journal.Delete(id)
		}
		return nil, err
	}
	var restored []ConsumerState
	var cstore ConsumerStore
	if cj, ok := h.opts.Journal.(ConsumerJournal); ok {
		if restored, cstore, err = cj.SessionConsumers(id); err != nil {
			b.Close()
			if !restore {
				h.opts.Journal.Delete(id)
			}
			return nil, err
		}
	}
	cs := NewConsumerSet(cstore, restored, h.opts.MaxConsumers, h.opts.PeerShare)
	return &Session{ID: id, Bus: b, RingSize: ringSize, store: st, auto: auto, active: h.opts.Now(), creator: peer, consumers: cs}, nil
}

// Delete closes a session's bus (its streams get stream:closed with reason
// session_deleted), forgets it and deletes its journal data. It returns
// ErrNotFound for an unknown id, or the journal's error (the session is
// gone from the hub all the same).
//
// No publish or Create interleaves with it: from the moment the session
// leaves the map until the journal has forgotten it, a tombstone stands in
// its place, and a publish or Create of the id waits for it to go. A
// publish that found the session before that succeeded before the close,
// or finds its bus closed and, with AutoCreate, lands in the session made
// anew (ErrNotFound without it; ErrRetry if that one too is deleted under
// it, again and again); either way the id created again afterwards is a
// new session on a new epoch, and the deleted one's store is never reused.
func (h *Hub) Delete(id string) error {
	h.mu.Lock()
	s, ok := h.sessions[id]
	if !ok {
		h.mu.Unlock()
		return ErrNotFound
	}
	done := h.unlinkLocked(s)
	h.mu.Unlock()
	s.Bus.Close()
	// A publish past the session's bus may still be putting its copies on
	// the global bus, whose journal record refers to the session's: let it
	// finish before the session's records go.
	s.publishMu.Lock()
	s.publishMu.Unlock()
	return h.forget(s, done, "")
}

// unlinkLocked takes session s out of the map and puts a tombstone in its
// place, which forget takes away. h.mu must be held.
func (h *Hub) unlinkLocked(s *Session) chan struct{} {
	done := make(chan struct{})
	delete(h.sessions, s.ID)
	h.order, h.orderGen = nil, h.orderGen+1
	if s.autoAcct != nil {
		s.autoAcct.Release(1)
		s.autoAcct = nil
	}
	h.deleting[s.ID] = done
	return done
}

// forget finishes the delete of session s, whose bus is closed and which
// no publish is writing: it retires its counters, deletes its journal data
// and keys, announces localbus:session-closed (with reason, if any) and
// lifts the tombstone done.
func (h *Hub) forget(s *Session, done chan struct{}, reason string) error {
	id := s.ID
	s.consumers.close()
	defer func() {
		h.mu.Lock()
		delete(h.deleting, id)
		h.mu.Unlock()
		close(done)
	}()
	st := s.Bus.Stats()
	h.mu.Lock()
	addCounters(&h.retired, &st)
	h.mu.Unlock()
	var err error
	if j := h.opts.Journal; j != nil {
		err = j.Delete(id)
	}
	h.dropSessionKeys(id)
	h.announceReason(bus.TypeSessionClosed, id, reason)
	if reason == "" {
		h.logSession("session deleted", id)
	} else {
		h.logSession("session expired", id, "reason", reason)
	}
	return err
}

// open returns the session, creating it, on o.peer's share, if AutoCreate
// (or o.mirror) allows and the events are valid: a batch that would be
// refused creates nothing.
func (h *Hub) open(sid bus.SessionID, events []bus.Event, o publishOptions) (*Session, error) {
	id := sid.String()
	h.lockSettled(id)
	if s, ok := h.sessions[id]; ok {
		h.mu.Unlock()
		return s, nil
	}
	auto := h.opts.AutoCreate || o.mirror
	h.mu.Unlock()
	if !auto {
		return nil, ErrNotFound
	}
	for i := range events {
		if err := bus.ValidateEvent(&events[i]); err != nil {
			return nil, err
		}
	}
	h.lockSettled(id)
	if s, ok := h.sessions[id]; ok {
		h.mu.Unlock()
		return s, nil
	}
	s, err := h.createLocked(sid, 0, byPublish, o.peer)
	h.mu.Unlock()
	if err != nil {
		return nil, err
	}
	h.announce(bus.TypeSessionOpened, id)
	h.logSession("session created", id, "by", "publish")
	return s, nil
}
