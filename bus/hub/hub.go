package hub

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/share"
)

// Errors a Hub returns; the router maps them to HTTP statuses.
var (
	ErrNotFound     = errors.New("hub: no such session")
	ErrExists       = errors.New("hub: session exists")
	ErrSessionLimit = errors.New("hub: session limit reached")
	// ErrAutoSessionLimit refuses a publish that would create a session
	// past MaxAutoSessions, or past its peer's share of them (a
	// *share.Refusal of the pool "auto_sessions" that unwraps to it); it
	// wraps ErrSessionLimit.
	ErrAutoSessionLimit = fmt.Errorf("%w for sessions created by a publish", ErrSessionLimit)
	ErrClosed           = errors.New("hub: closed")
	// ErrReadOnly is returned by Publish to a session that mirrors another
	// node's session (SPEC §12): only PublishMirror writes to it.
	ErrReadOnly = errors.New("hub: session is a read-only mirror")
)

// Default limits of the SPEC (§2, §10).
const (
	DefaultMaxSessions     = 4096
	DefaultMaxAutoSessions = 1024
	// DefaultMaxRingBytesTotal bounds the rings of every bus together.
	DefaultMaxRingBytesTotal = 1 << 30
)

// Options configure a Hub. Zero values mean the defaults.
type Options struct {
	// Limits apply to every bus; a session created with its own ring size
	// keeps that size.
	Limits bus.Limits
	// MaxSessions bounds the number of sessions; default 4096.
	MaxSessions int
	// MaxAutoSessions bounds the sessions created by a publish (which
	// also count against MaxSessions); default 1024, and never more than
	// half of MaxSessions whatever is set (see AutoSessionLimit), so
	// that publishers always leave room for Create.
	MaxAutoSessions int
	// PeerShare is the fraction of each shared pool one peer other than a
	// privileged one may hold (SPEC §2, fair shares; see package share):
	// the sessions a publish creates, the remembered idempotency keys,
	// and each bus's subscribers (it overrides Limits.PeerShare). Default
	// 0, no shares; the daemon sets peer_share.
	PeerShare float64
	// AutoCreate makes a publish to a missing session create it.
	AutoCreate bool
	// MaxRingBytesTotal bounds the bytes the rings of every bus (sessions
	// and global) retain together; default 1 GiB. Past it the largest rings
	// evict their oldest events first (see Hub.TrimRings).
	MaxRingBytesTotal int64
	// GlobalEpoch is the global bus's epoch; "" means a fresh one. A
	// Journal's epoch wins.
	GlobalEpoch string
	// Journal, if set, backs every bus with durable storage (package
	// journal): New restores the sessions it holds, Create stores new ones,
	// Delete deletes their data. nil keeps everything in memory.
	Journal Journal
	// IdempotencyWindow is how long Once remembers a key; default 10 min.
	IdempotencyWindow time.Duration
	// Logger receives what the hub reports on its own: each session
	// created (by a request or by a publish) and deleted, a key it could
	// not store, a session expired; nil means slog.Default().
	Logger *slog.Logger
	// AutoSessionTTL is how long a session a publish created may go with
	// no publish and no subscriber before ExpireIdle deletes it; 0 keeps
	// them. Sessions made by Create never expire.
	AutoSessionTTL time.Duration
	// Now is the hub's clock for the idle time of sessions; nil means
	// time.Now.
	Now func() time.Time
}

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

// A Hub is the set of sessions and the global bus. All methods are safe for
// concurrent use.
type Hub struct {
	global *bus.Bus
	log    *slog.Logger // nil for none

	mu       sync.Mutex // guards the fields below
	closed   bool
	opts     Options
	sessions map[string]*Session
	// deleting holds a tombstone for each session being deleted, closed
	// once the journal has forgotten it: until then nothing may create the
	// id again, or the journal would hand the new session the old one's
	// store and epoch (and then delete them under it).
	deleting map[string]chan struct{}
	retired  bus.Stats // counters of deleted sessions, so totals never go down
	// autos holds one unit per session a publish created, on the
	// account of the peer whose publish did (MaxAutoSessions, PeerShare).
	autos *share.Pool

	readOnly atomic.Pointer[func(id string) bool] // see SetReadOnly

	ringBytes  atomic.Int64 // retained by every bus's ring together
	ringBudget atomic.Int64 // Options.MaxRingBytesTotal
	trimMu     sync.Mutex   // one TrimRings at a time

	keys keyTable // idempotency keys (Once)
}

// SetReadOnly makes Publish refuse, with ErrReadOnly, every session id for
// which readOnly reports true; nil makes every session writable again. The
// upstream bridge sets it to recognise its mirrors before the daemon serves.
func (h *Hub) SetReadOnly(readOnly func(id string) bool) {
	if readOnly == nil {
		h.readOnly.Store(nil)
		return
	}
	h.readOnly.Store(&readOnly)
}

// ReadOnly reports whether Publish refuses session id as a mirror.
func (h *Hub) ReadOnly(id string) bool {
	f := h.readOnly.Load()
	return f != nil && (*f)(id)
}

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
	store     bus.Store      // the bus's store when journaled, else nil
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

// New returns a hub with an empty set of sessions.
func New(opts Options) (*Hub, error) {
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = DefaultMaxSessions
	}
	if opts.MaxAutoSessions <= 0 {
		opts.MaxAutoSessions = DefaultMaxAutoSessions
	}
	if opts.MaxRingBytesTotal <= 0 {
		opts.MaxRingBytesTotal = DefaultMaxRingBytesTotal
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	h := &Hub{opts: opts, sessions: make(map[string]*Session), deleting: make(map[string]chan struct{})}
	h.ringBudget.Store(opts.MaxRingBytesTotal)
	h.autos = share.NewPool(share.Options{Name: PoolAutoSessions, Err: ErrAutoSessionLimit})
	h.setShares(opts)
	l := h.busLimits()
	gopts := bus.Options{
		Epoch: opts.GlobalEpoch, RingSize: l.RingSize, RingMaxBytes: l.RingMaxBytes,
		MaxQueued: l.MaxQueued, MaxQueuedBytes: l.MaxQueuedBytes, MaxSubscribers: l.MaxSubscribers, PeerShare: l.PeerShare,
		OnRingBytes: h.addRingBytes,
	}
	if j := opts.Journal; j != nil {
		st, epoch, _, err := j.OpenBus("", 0)
		if err != nil {
			return nil, err
		}
		gopts.Store, gopts.Epoch = st, epoch
	}
	g, err := bus.New(gopts)
	if err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	h.global, h.log, h.opts.Logger = g, opts.Logger, opts.Logger
	h.setKeyWindow(opts.IdempotencyWindow)
	if err := h.loadKeys(time.Now()); err != nil {
		return nil, err
	}
	if opts.Journal != nil {
		// Restored sessions are not announced: they were opened before.
		for _, id := range opts.Journal.Sessions() {
			if _, err := h.createLocked(id, 0, byRestore, share.Unknown); err != nil {
				return nil, err
			}
		}
	}
	return h, nil
}

// Global returns the global bus.
func (h *Hub) Global() *bus.Bus { return h.global }

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
// returns ErrExists, ErrSessionLimit, or an *bus.InputError for a bad id or
// ring size.
func (h *Hub) Create(id string, ringSize int) (*Session, error) {
	if err := bus.ValidateSessionID(id); err != nil {
		return nil, err
	}
	if ringSize < 0 || ringSize > bus.MaxRingSize {
		return nil, &bus.InputError{Field: "ringSize", Reason: "want 1 to 1000000"}
	}
	h.lockSettled(id)
	s, err := h.createLocked(id, ringSize, byCreate, share.Privileged)
	h.mu.Unlock()
	if err != nil {
		return nil, err
	}
	h.announce("localbus:session-opened", id)
	h.logSession("session created", id, "ring_size", s.Bus.Stats().Limits.RingSize)
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
type origin int

const (
	byCreate  origin = iota // Create (POST /api/v1/sessions)
	byPublish               // a publish to a missing session (AutoCreate)
	byRestore               // held by the journal at New
)

// createLocked makes session id. A restored session is never refused by
// the limits; one a publish by peer creates also counts against
// MaxAutoSessions and peer's share of them (a restored one, against the
// share of the peer the journal stored with it). h.mu must be held.
func (h *Hub) createLocked(id string, ringSize int, how origin, peer share.Peer) (*Session, error) {
	restore := how == byRestore
	if h.closed {
		return nil, ErrClosed
	}
	if _, ok := h.sessions[id]; ok {
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
	h.sessions[id] = s
	return s, nil
}

// openLocked opens the store and bus of session id for createLocked.
// h.mu must be held.
func (h *Hub) openLocked(id string, ringSize int, how origin, peer share.Peer) (*Session, error) {
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
		Session: id, RingSize: l.RingSize, RingMaxBytes: l.RingMaxBytes,
		MaxQueued: l.MaxQueued, MaxQueuedBytes: l.MaxQueuedBytes, MaxSubscribers: l.MaxSubscribers, PeerShare: l.PeerShare,
		Store: st, Epoch: epoch, OnRingBytes: h.addRingBytes,
	})
	if err != nil {
		if st != nil && !restore {
			h.opts.Journal.Delete(id)
		}
		return nil, err
	}
	return &Session{ID: id, Bus: b, RingSize: ringSize, store: st, auto: auto, active: h.opts.Now(), creator: peer}, nil
}

// Delete closes a session's bus (its streams get stream:closed with reason
// session_deleted), forgets it and deletes its journal data. It returns
// ErrNotFound for an unknown id, or the journal's error (the session is
// gone from the hub all the same).
//
// No publish or Create interleaves with it: from the moment the session
// leaves the map until the journal has forgotten it, a tombstone stands in
// its place, and a publish or Create of the id waits for it to go. A
// publish that found the session before that gets ErrNotFound (its bus is
// closed) or succeeded before the close; either way the id created again
// afterwards is a new session on a new epoch, and the deleted one's store
// is never reused.
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
	h.announceReason("localbus:session-closed", id, reason)
	if reason == "" {
		h.logSession("session deleted", id)
	} else {
		h.logSession("session expired", id, "reason", reason)
	}
	return err
}

// ExpireIdle deletes, as Delete does, every session a publish created that
// has had no publish since now minus AutoSessionTTL and has no
// subscriber, and returns their ids, sorted. Their
// localbus:session-closed carries reason "expired". It does nothing when
// AutoSessionTTL is 0.
//
// A publish racing it either lands first, and the session is kept, or
// gets ErrNotFound, as when it races Delete: the idle check and the close
// of the bus happen under the session's publishMu, which a publish holds
// from its stage until it records its time.
func (h *Hub) ExpireIdle(now time.Time) []string {
	h.mu.Lock()
	ttl := h.opts.AutoSessionTTL
	var candidates []*Session
	if ttl > 0 && !h.closed {
		for _, s := range h.sessions {
			if s.auto {
				candidates = append(candidates, s)
			}
		}
	}
	h.mu.Unlock()
	slices.SortFunc(candidates, func(a, b *Session) int { return strings.Compare(a.ID, b.ID) })
	var expired []string
	for _, s := range candidates {
		if h.expire(s, now.Add(-ttl)) {
			expired = append(expired, s.ID)
		}
	}
	return expired
}

// expire deletes session s if it has been idle since before cutoff and has
// no subscriber; it reports whether it did.
func (h *Hub) expire(s *Session, cutoff time.Time) bool {
	s.publishMu.Lock()
	if s.active.After(cutoff) || s.Bus.Stats().Subscribers > 0 {
		s.publishMu.Unlock()
		return false
	}
	h.mu.Lock()
	if h.closed || h.sessions[s.ID] != s {
		// Deleted (or deleted and created again) meanwhile.
		h.mu.Unlock()
		s.publishMu.Unlock()
		return false
	}
	done := h.unlinkLocked(s)
	h.mu.Unlock()
	// Closed before publishMu is let go: a publish waiting for it stages
	// onto a closed bus and gets ErrNotFound.
	s.Bus.Close()
	s.publishMu.Unlock()
	if err := h.forget(s, done, "expired"); err != nil {
		h.opts.Logger.Error("deleting an expired session", "session", s.ID, "err", err)
	}
	return true
}

// Totals are the figures of every session's bus added up, and the global
// bus's apart.
type Totals struct {
	// Sessions adds up the session buses: cumulative counters include
	// deleted sessions; gauges (Subscribers, RingLen, RingBytes) only live ones.
	Sessions bus.Stats
	// Global is the global bus.
	Global bus.Stats
	// Count is the number of sessions.
	Count int
}

// Totals returns the hub's figures, for metrics.
func (h *Hub) Totals() Totals {
	var t Totals
	h.mu.Lock()
	t.Sessions = h.retired
	h.mu.Unlock()
	for _, s := range h.Sessions() {
		st := s.Bus.Stats()
		addCounters(&t.Sessions, &st)
		t.Sessions.Subscribers += st.Subscribers
		t.Sessions.RingLen += st.RingLen
		t.Sessions.RingBytes += st.RingBytes
		t.Count++
	}
	t.Global = h.global.Stats()
	return t
}

func addCounters(dst, src *bus.Stats) {
	dst.Published += src.Published
	dst.Delivered += src.Delivered
	dst.SlowWarnings += src.SlowWarnings
	dst.SlowBytes += src.SlowBytes
	dst.EvictedQueue += src.EvictedQueue
	dst.EvictedBytes += src.EvictedBytes
	dst.GapRingEvicted += src.GapRingEvicted
	dst.GapEpochReset += src.GapEpochReset
	dst.Replayed += src.Replayed
}

// announce publishes a localbus:* event about a session on the global bus.
func (h *Hub) announce(typ, id string) { h.announceReason(typ, id, "") }

// announceReason is announce with a reason, left out when "".
func (h *Hub) announceReason(typ, id, reason string) {
	data, _ := json.Marshal(struct {
		Session string `json:"session"`
		Reason  string `json:"reason,omitempty"`
	}{id, reason})
	// The global bus is closed only by Close; nothing to report then.
	h.global.PublishDaemon(bus.Event{Type: typ, Data: data})
}

// Publish is PublishAs for the daemon itself (share.Privileged): for
// in-process publishers, never for a request's.
func (h *Hub) Publish(id string, events []bus.Event) (first, last uint64, err error) {
	return h.PublishAs(share.Privileged, id, events)
}

// PublishAs appends events, published by peer, to session id as one
// all-or-nothing batch, then their copies to the global bus (see the
// package doc). It sets the Time of events that have none, one time for
// the batch. It creates the session first when it is missing and
// AutoCreate is on, on peer's share of MaxAutoSessions; otherwise a
// missing session is ErrNotFound. It returns the session ids assigned.
func (h *Hub) PublishAs(peer share.Peer, id string, events []bus.Event) (first, last uint64, err error) {
	if err := bus.ValidateSessionID(id); err != nil {
		return 0, 0, err
	}
	if h.ReadOnly(id) {
		return 0, 0, ErrReadOnly
	}
	return h.publish(peer, id, events, false)
}

// PublishMirror is Publish for the upstream bridge, which alone writes to
// mirrors: it ignores SetReadOnly and creates a missing session whatever
// AutoCreate says (within the session limit). Each event's Origin should
// be set.
func (h *Hub) PublishMirror(id string, events []bus.Event) (first, last uint64, err error) {
	if err := bus.ValidateSessionID(id); err != nil {
		return 0, 0, err
	}
	return h.publish(share.Privileged, id, events, true)
}

func (h *Hub) publish(peer share.Peer, id string, events []bus.Event, mirror bool) (first, last uint64, err error) {
	s, err := h.open(peer, id, events, mirror)
	if err != nil {
		return 0, 0, err
	}
	now := time.Now()
	for i := range events {
		if events[i].Time.IsZero() {
			events[i].Time = now
		}
	}
	// publishMu orders the session's batches onto the global bus; it is
	// held while they are written, not while they are made durable, so
	// concurrent publishers to one session share a sync (group commit).
	s.publishMu.Lock()
	frames, st, err := s.Bus.StageFrames(s.frames[:0], events...)
	if err != nil {
		s.publishMu.Unlock()
		if errors.Is(err, bus.ErrClosed) {
			// Deleted between lookup and publish: as if it never existed.
			return 0, 0, ErrNotFound
		}
		return 0, 0, err
	}
	// The frames are the session bus's own events, so the copies fail only
	// when the global bus is closed (by Close) or its journal refuses the
	// append: the session keeps the events, the global bus goes without
	// them (they get no global id, so no client misses them).
	gst, gerr := h.global.StageCopies(bus.Copies{From: s.Bus, Frames: frames})
	first, last = st.First, st.Last
	s.active = h.opts.Now()
	// Kept for the next publish, but not the frames (the ring decides how
	// long they live) nor a large batch's array.
	clear(frames)
	if cap(frames) <= 64 {
		s.frames = frames[:0]
	}
	s.publishMu.Unlock()
	// The session's record was written before the global bus's, so the
	// sync that makes it durable usually covers both.
	if err := s.Bus.Finish(st); err != nil {
		if gerr == nil {
			h.global.Finish(gst)
		}
		return 0, 0, err
	}
	if gerr == nil {
		h.global.Finish(gst)
	}
	h.TrimRings()
	return first, last, nil
}

// addRingBytes is every bus's OnRingBytes.
func (h *Hub) addRingBytes(delta int64) { h.ringBytes.Add(delta) }

// RingBytes returns the bytes the rings of every bus retain together.
func (h *Hub) RingBytes() int64 { return h.ringBytes.Load() }

// TrimRings enforces MaxRingBytesTotal: when the rings together retain
// more, the largest are trimmed, oldest events first, down to a common cap
// chosen so that the total fits (water-filling); smaller rings keep every
// event. A ring keeps at least its last event, so the total may stay above
// the budget by up to one event per ring. Publish calls it; it costs an
// atomic load when the total fits.
func (h *Hub) TrimRings() {
	budget := h.ringBudget.Load()
	if h.ringBytes.Load() <= budget {
		return
	}
	h.trimMu.Lock()
	defer h.trimMu.Unlock()
	if h.ringBytes.Load() <= budget {
		return
	}
	sessions := h.Sessions()
	buses := make([]*bus.Bus, 0, len(sessions)+1)
	buses = append(buses, h.global)
	for _, s := range sessions {
		buses = append(buses, s.Bus)
	}
	sizes := make([]int64, len(buses))
	for i, b := range buses {
		sizes[i] = b.RingBytes()
	}
	// Trim a little below the budget, so that a full budget is not
	// enforced again on every publish.
	limit := waterLevel(sizes, budget-budget/64)
	for i, b := range buses {
		if sizes[i] > limit {
			b.TrimTo(limit)
		}
	}
}

// waterLevel returns the largest cap such that the sizes, each cut to it,
// sum to at most total.
func waterLevel(sizes []int64, total int64) int64 {
	sorted := slices.Clone(sizes)
	slices.Sort(sorted)
	left := total
	for i, n := range sorted {
		k := int64(len(sorted) - i)
		if n*k > left {
			return max(left/k, 0)
		}
		left -= n
	}
	return sorted[len(sorted)-1]
}

// open returns the session, creating it if AutoCreate (or mirror) allows and the events
// are valid: a batch that would be refused creates nothing.
func (h *Hub) open(peer share.Peer, id string, events []bus.Event, mirror bool) (*Session, error) {
	h.lockSettled(id)
	if s, ok := h.sessions[id]; ok {
		h.mu.Unlock()
		return s, nil
	}
	auto := h.opts.AutoCreate || mirror
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
	s, err := h.createLocked(id, 0, byPublish, peer)
	h.mu.Unlock()
	if err != nil {
		return nil, err
	}
	h.announce("localbus:session-opened", id)
	h.logSession("session created", id, "by", "publish")
	return s, nil
}

// logSession logs a session's creation or deletion, if the hub has a
// logger.
func (h *Hub) logSession(msg, id string, attrs ...any) {
	if h.log != nil {
		h.log.Info(msg, append([]any{"session", id}, attrs...)...)
	}
}

// AutoSessionTTL returns the idle time after which ExpireIdle deletes a
// session a publish created; 0 when they are kept.
func (h *Hub) AutoSessionTTL() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.opts.AutoSessionTTL
}

// EndStreams ends every stream of every bus, global included, with
// stream:closed and reason (shutdown or reload). Buses, rings and ids stay.
func (h *Hub) EndStreams(reason bus.EndReason) {
	for _, s := range h.Sessions() {
		s.Bus.EndStreams(reason)
	}
	h.global.EndStreams(reason)
}

// Subscribers returns the number of subscribers across every bus.
func (h *Hub) Subscribers() int {
	n := h.global.Stats().Subscribers
	for _, s := range h.Sessions() {
		n += s.Bus.Stats().Subscribers
	}
	return n
}

// SetOptions applies new limits and settings (on reload). Ring limits apply
// at once to every bus; a session created with its own ring size keeps it.
func (h *Hub) SetOptions(opts Options) error {
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = DefaultMaxSessions
	}
	if opts.MaxAutoSessions <= 0 {
		opts.MaxAutoSessions = DefaultMaxAutoSessions
	}
	opts.Limits.PeerShare = opts.PeerShare
	if err := h.global.SetLimits(opts.Limits); err != nil {
		return err
	}
	h.mu.Lock()
	h.opts.Limits, h.opts.MaxSessions, h.opts.AutoCreate = opts.Limits, opts.MaxSessions, opts.AutoCreate
	h.opts.MaxAutoSessions, h.opts.PeerShare = opts.MaxAutoSessions, opts.PeerShare
	h.setShares(h.opts)
	if opts.MaxRingBytesTotal <= 0 {
		opts.MaxRingBytesTotal = DefaultMaxRingBytesTotal
	}
	h.opts.MaxRingBytesTotal = opts.MaxRingBytesTotal
	h.ringBudget.Store(opts.MaxRingBytesTotal)
	h.opts.AutoSessionTTL = opts.AutoSessionTTL
	h.mu.Unlock()
	h.setKeyWindow(opts.IdempotencyWindow)
	for _, s := range h.Sessions() {
		l := opts.Limits
		if s.RingSize > 0 {
			l.RingSize = s.RingSize
		}
		if err := s.Bus.SetLimits(l); err != nil {
			return err
		}
	}
	h.TrimRings()
	return nil
}

// Close closes every bus; Publish, Create and Subscribe fail from then on.
// Streams still open get stream:closed with reason session_deleted, so the
// daemon calls EndStreams with the real reason first.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	sessions := h.sessions
	h.sessions = map[string]*Session{}
	h.mu.Unlock()
	for _, s := range sessions {
		s.Bus.Close()
	}
	h.global.Close()
}

// logKeyError reports a failure to store or forget an idempotency key.
func (h *Hub) logKeyError(err error) {
	h.opts.Logger.Error("hub: idempotency key", "err", err)
}
