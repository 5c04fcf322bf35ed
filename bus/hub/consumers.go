package hub

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/localbus/localbus/bus/share"
	"github.com/localbus/localbus/ipc/wire/grammar"
)

// Consumers (SPEC §2.4): a ConsumerSet is one session's named cursors. A
// stream naming a consumer attaches to it (Attach) and holds a Lease until
// it ends; a second attach takes the consumer over and the first lease is
// replaced (its Done closes, Replaced reports true), so one live stream
// reads a consumer at a time. Under ack mode auto the stream's writer
// tells the lease how far it got (Lease.Wrote, in memory) and stores that
// at most once a second (Lease.Sync) and at its end (Lease.End); under
// explicit only an ack moves the position (ConsumerSet.Ack). An ack never
// moves a consumer back. Positions are ids of one epoch of the session:
// a consumer whose epoch is not the session's any more is moved to the
// session's epoch, at 0, by the next attach, whose stream starts with the
// §2.3 epoch_reset.
//
// Every consumer holds a unit of the set's pool (max_consumers, fair
// shares by peer; PoolConsumers in refusals), on the account of the peer
// whose stream created it. One restored from storage was granted before
// the restart and is forced onto share.Unknown's account, since storage
// does not keep who created it.

// PoolConsumers names the pool of a session's consumers.
const PoolConsumers = "consumers"

// DefaultMaxConsumers is max_consumers' default.
const DefaultMaxConsumers = 64

// AckMode is how a consumer's position moves: grammar.AckAuto (the
// default of a new consumer) or grammar.AckExplicit.
type AckMode = grammar.AckMode

// The ack modes.
const (
	AckAuto     = grammar.AckAuto     // follows what the stream wrote (the default)
	AckExplicit = grammar.AckExplicit // moves only on an ack
)

// The refusals of consumer calls; the router maps them to statuses.
var (
	ErrConsumerExists      = errors.New("the consumer exists; since applies only to a new one")      // 409 consumer_exists
	ErrConsumerAckMode     = errors.New("the consumer was created with the other ack mode")          // 409 consumer_ack_mode
	ErrConsumerNotExplicit = errors.New("the consumer acknowledges automatically")                   // 409 consumer_not_explicit
	ErrEpochMismatch       = errors.New("the ack's epoch is not the consumer's")                     // 409 epoch_mismatch
	ErrAckAboveLastID      = errors.New("the ack names an id above the session's last")              // 400
	ErrNoConsumer          = errors.New("no such consumer")                                          // 404
	ErrConsumerLimit       = errors.New("the session has as many consumers as max_consumers allows") // 429 consumer_limit
	ErrConsumerName        = errors.New("a consumer's name is [A-Za-z0-9][A-Za-z0-9_.-]{0,63}")      // 400
)

// ConsumerState is a consumer as stored.
type ConsumerState struct {
	Name       string
	Ack        AckMode
	AckedID    uint64 // the last id acknowledged, 0 for none
	Epoch      string // the session's epoch AckedID belongs to
	Created    time.Time
	LastActive time.Time // when a stream of it last stored its position or ended
}

// A ConsumerStore keeps one session's consumers: the journal's, or none
// (memory mode keeps them in the set only). Each call returns once what it
// wrote is durable.
type ConsumerStore interface {
	PutConsumer(c ConsumerState) error
	DeleteConsumer(name string) error
}

// SyncEvery is how often at most a stream under ack mode auto stores its
// consumer's position while it runs (Lease.Sync); it also stores it when
// it ends.
const SyncEvery = time.Second

type consumer struct {
	st    ConsumerState // as stored
	acct  *share.Account
	lease *Lease // the live stream's, nil for none
}

// A ConsumerSet is one session's consumers. It is safe for concurrent use.
type ConsumerSet struct {
	mu     sync.Mutex // held across the store's writes, so they land in order
	store  ConsumerStore
	pool   *share.Pool
	m      map[string]*consumer
	closed bool // the session was deleted: nothing is stored any more
}

// NewConsumerSet returns the set of a session whose consumers store keeps
// (nil: in memory only), with restored, what store held at start, and
// limit and peerShare its max_consumers (at least 1: a hub passes its
// Options.MaxConsumers, filled) and fair share.
func NewConsumerSet(store ConsumerStore, restored []ConsumerState, limit int, peerShare float64) *ConsumerSet {
	s := &ConsumerSet{store: store, m: map[string]*consumer{},
		pool: share.NewPool(share.Options{Name: PoolConsumers, Limit: int64(limit), Share: peerShare, Err: ErrConsumerLimit})}
	for _, st := range restored {
		a := s.pool.Account(share.Unknown)
		a.Force(1)
		s.m[st.Name] = &consumer{st: st, acct: a}
	}
	return s
}

// SetLimit changes max_consumers (at least 1, as for NewConsumerSet) and
// the share (on reload); consumers over the new limit stay.
func (s *ConsumerSet) SetLimit(limit int, peerShare float64) {
	s.pool.SetLimit(int64(limit), peerShare)
}

// AttachRequest is what a stream naming a consumer asks for.
type AttachRequest struct {
	Name string
	Ack  AckMode // "" for the consumer's own (auto for a new one)
	// Since is where a new consumer starts, after that id (?since=, or
	// what ?sinceTime= resolved to); nil for 0, the whole ring. On an
	// existing consumer it is ErrConsumerExists.
	Since *uint64
	// SinceEpoch is the epoch Since belongs to (?epoch=); "" for the
	// session's.
	SinceEpoch string
	// Epoch and LastID are the session's epoch and last id now.
	Epoch  string
	LastID uint64
	Peer   share.Peer
	Now    time.Time
}

// Attach gives a stream the consumer req names, creating it if needed; a
// stream already on it is replaced, after the position it wrote under
// ack mode auto is stored. The lease's Start says where the stream
// starts: after Start().AckedID, in Start().Epoch. When that epoch is not
// the session's (or the id is above the session's last), the stream's
// resume is the §2.3 epoch_reset, and the consumer is moved, and stored,
// at 0 in the session's epoch, where the stream's positions belong.
//
// It returns ErrConsumerName, ErrConsumerExists, ErrConsumerAckMode, a
// *share.Refusal that unwraps to ErrConsumerLimit, or the store's error.
func (s *ConsumerSet) Attach(req AttachRequest) (*Lease, error) {
	if !grammar.ValidConsumer(req.Name) {
		return nil, ErrConsumerName
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrNotFound
	}
	c, ok := s.m[req.Name]
	created := !ok
	if ok {
		switch {
		case req.Since != nil:
			return nil, ErrConsumerExists
		case req.Ack != "" && req.Ack != c.st.Ack:
			return nil, ErrConsumerAckMode
		}
		if old := c.lease; old != nil && old.c.st.Ack == AckAuto {
			// The stream taking over starts after what the old one wrote.
			if err := old.syncLocked(req.Now); err != nil {
				return nil, err
			}
		}
	} else {
		a := s.pool.Account(req.Peer)
		if err := a.Acquire(1); err != nil {
			return nil, err
		}
		st := ConsumerState{Name: req.Name, Ack: req.Ack, Epoch: req.Epoch, Created: req.Now, LastActive: req.Now}
		if st.Ack == "" {
			st.Ack = AckAuto
		}
		if req.Since != nil {
			st.AckedID = *req.Since
			if req.SinceEpoch != "" {
				st.Epoch = req.SinceEpoch
			}
		}
		c = &consumer{st: st, acct: a}
	}
	start := c.st
	if start.Epoch != req.Epoch || start.AckedID > req.LastID {
		next := c.st
		next.AckedID, next.Epoch = 0, req.Epoch
		c.st = next
	}
	if created || c.st != start {
		next := c.st
		next.LastActive = req.Now
		if err := s.putLocked(next); err != nil {
			if created {
				c.acct.Release(1)
			} else {
				c.st = start
			}
			return nil, err
		}
		c.st = next
	}
	if created {
		s.m[req.Name] = c
	}
	if c.lease != nil {
		c.lease.replace()
	}
	l := &Lease{set: s, c: c, start: start, created: created, epoch: c.st.Epoch, done: make(chan struct{})}
	l.pos.Store(c.st.AckedID)
	c.lease = l
	return l, nil
}

// putLocked stores st, if the set has a store and its session was not
// deleted. s.mu must be held.
func (s *ConsumerSet) putLocked(st ConsumerState) error {
	if s.store == nil || s.closed {
		return nil
	}
	return s.store.PutConsumer(st)
}

// close marks the set's session deleted: its journal data is going, with
// its consumers, so the streams that end afterwards store nothing, and
// every call but List and Len finds no consumer.
func (s *ConsumerSet) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	clear(s.m)
}

// Ack acknowledges id for consumer name (explicit only), within epoch ("":
// the consumer's) and the session's lastID; it returns the acknowledged
// id once it is stored. A lower id than the acknowledged one moves
// nothing and returns the acknowledged id. Ids are compared within the
// consumer's epoch only: an epoch other than the consumer's is
// ErrEpochMismatch and moves nothing.
func (s *ConsumerSet) Ack(name string, id uint64, epoch string, lastID uint64, now time.Time) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.m[name]
	switch {
	case !ok:
		return 0, ErrNoConsumer
	case c.st.Ack != AckExplicit:
		return 0, ErrConsumerNotExplicit
	case epoch != "" && epoch != c.st.Epoch:
		return 0, ErrEpochMismatch
	case id > lastID:
		return 0, ErrAckAboveLastID
	case id <= c.st.AckedID:
		return c.st.AckedID, nil
	}
	return id, s.moveLocked(c, id, now)
}

// moveLocked stores c at id, in its epoch. s.mu must be held.
func (s *ConsumerSet) moveLocked(c *consumer, id uint64, now time.Time) error {
	next := c.st
	next.AckedID, next.LastActive = id, now
	if err := s.putLocked(next); err != nil {
		return err
	}
	c.st = next
	return nil
}

// Delete forgets consumer name; its live stream is replaced.
func (s *ConsumerSet) Delete(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.m[name]
	if !ok {
		return ErrNoConsumer
	}
	return s.deleteLocked(c)
}

// deleteLocked forgets c. s.mu must be held.
func (s *ConsumerSet) deleteLocked(c *consumer) error {
	if s.store != nil {
		if err := s.store.DeleteConsumer(c.st.Name); err != nil {
			return err
		}
	}
	delete(s.m, c.st.Name)
	c.acct.Release(1)
	if c.lease != nil {
		c.lease.replace()
	}
	return nil
}

// Expire forgets every consumer with no stream whose last activity is
// older than ttl before now (consumer_ttl), and returns their names,
// sorted; ttl 0 keeps them all. A consumer it could not delete from the
// store stays, and the first such error is returned.
func (s *ConsumerSet) Expire(now time.Time, ttl time.Duration) ([]string, error) {
	if ttl <= 0 {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	var first error
	for _, c := range s.m {
		if c.lease != nil || now.Sub(c.st.LastActive) < ttl {
			continue
		}
		if err := s.deleteLocked(c); err != nil {
			first = cmpOr(first, err)
			continue
		}
		names = append(names, c.st.Name)
	}
	slices.Sort(names)
	return names, first
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// ConsumerInfo is a consumer as GET …/consumers lists it.
type ConsumerInfo struct {
	ConsumerState
	Connected bool
	// Pending is how many events the session has after AckedID (every
	// event, when the consumer's epoch is not the session's).
	Pending uint64
}

// pending is how many of a session's events, on epoch with lastID, come
// after st's acknowledged id.
func pending(st ConsumerState, lastID uint64, epoch string) uint64 {
	if st.Epoch != epoch {
		return lastID
	}
	if st.AckedID >= lastID {
		return 0
	}
	return lastID - st.AckedID
}

// List returns the consumers, sorted by name, with what they have pending
// of a session on epoch whose last id is lastID.
func (s *ConsumerSet) List(lastID uint64, epoch string) []ConsumerInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ConsumerInfo, 0, len(s.m))
	for _, c := range s.m {
		out = append(out, ConsumerInfo{ConsumerState: c.st, Connected: c.lease != nil, Pending: pending(c.st, lastID, epoch)})
	}
	slices.SortFunc(out, func(a, b ConsumerInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Pending returns how many events the consumers have pending together, of
// a session on epoch whose last id is lastID.
func (s *ConsumerSet) Pending(lastID uint64, epoch string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n uint64
	for _, c := range s.m {
		n += pending(c.st, lastID, epoch)
	}
	return n
}

// Len returns how many consumers the set holds.
func (s *ConsumerSet) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
