package hub

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/localbus/localbus/bus/share"
)

// Consumers (SPEC §2.4): a ConsumerSet is one session's named cursors. A
// stream naming a consumer attaches to it (Attach) and holds a Lease until
// it ends; a second attach takes the consumer over and the first lease is
// replaced (its Done closes, Replaced reports true), so one live stream
// reads a consumer at a time. Under ack mode auto the lease moves the
// position as the stream writes (Lease.Wrote, stored at least once a
// second and at Lease.End); under explicit only an ack moves it
// (ConsumerSet.Ack). An ack never moves a consumer back.
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

// AckMode is how a consumer's position moves.
type AckMode string

const (
	AckAuto     AckMode = "auto"     // follows what the stream wrote (the default)
	AckExplicit AckMode = "explicit" // moves only on an ack
)

// ParseAckMode reads ?ack=: "" (the consumer's mode, auto for a new one),
// auto or explicit.
func ParseAckMode(s string) (AckMode, error) {
	switch AckMode(s) {
	case "", AckAuto, AckExplicit:
		return AckMode(s), nil
	}
	return "", fmt.Errorf("ack must be auto or explicit, not %q", s)
}

var consumerName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ValidConsumerName reports whether name is a consumer's name (SPEC §2.4).
func ValidConsumerName(name string) bool { return consumerName.MatchString(name) }

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

// autoStoreEvery is how often at most a lease under ack mode auto stores
// its position while the stream runs.
const autoStoreEvery = time.Second

type consumer struct {
	st    ConsumerState
	acct  *share.Account
	lease *Lease // the live stream's, nil for none
}

// A ConsumerSet is one session's consumers. It is safe for concurrent use.
type ConsumerSet struct {
	mu    sync.Mutex // held across the store's writes, so they land in order
	store ConsumerStore
	pool  *share.Pool
	m     map[string]*consumer
}

// NewConsumerSet returns the set of a session whose consumers store keeps
// (nil: in memory only), with restored, what store held at start, and
// limit and peerShare its max_consumers and fair share.
func NewConsumerSet(store ConsumerStore, restored []ConsumerState, limit int, peerShare float64) *ConsumerSet {
	if limit <= 0 {
		limit = DefaultMaxConsumers
	}
	s := &ConsumerSet{store: store, m: map[string]*consumer{},
		pool: share.NewPool(share.Options{Name: PoolConsumers, Limit: int64(limit), Share: peerShare, Err: ErrConsumerLimit})}
	for _, st := range restored {
		a := s.pool.Account(share.Unknown)
		a.Force(1)
		s.m[st.Name] = &consumer{st: st, acct: a}
	}
	return s
}

// SetLimit changes max_consumers and the share (on reload); consumers over
// the new limit stay.
func (s *ConsumerSet) SetLimit(limit int, peerShare float64) {
	if limit <= 0 {
		limit = DefaultMaxConsumers
	}
	s.pool.SetLimit(int64(limit), peerShare)
}

// AttachRequest is what a stream naming a consumer asks for.
type AttachRequest struct {
	Name  string
	Ack   AckMode // "" for the consumer's own (auto for a new one)
	Since *uint64 // ?since= (or what ?sinceTime= resolved to); only for a new one
	Epoch string  // the session's epoch now
	Peer  share.Peer
	Now   time.Time
}

// Attach gives a stream the consumer req names, creating it if needed; a
// stream already on it is replaced. The lease's State says where the
// stream starts: after AckedID, under Epoch (one other than the session's
// is the §2.3 epoch_reset).
func (s *ConsumerSet) Attach(req AttachRequest) (*Lease, error) {
	if !ValidConsumerName(req.Name) {
		return nil, ErrConsumerName
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.m[req.Name]
	created := !ok
	if ok {
		switch {
		case req.Since != nil:
			return nil, ErrConsumerExists
		case req.Ack != "" && req.Ack != c.st.Ack:
			return nil, ErrConsumerAckMode
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
		}
		if s.store != nil {
			if err := s.store.PutConsumer(st); err != nil {
				a.Release(1)
				return nil, err
			}
		}
		c = &consumer{st: st, acct: a}
		s.m[req.Name] = c
	}
	if c.lease != nil {
		c.lease.replace()
	}
	l := &Lease{set: s, c: c, created: created, stored: req.Now, done: make(chan struct{})}
	l.pos = c.st.AckedID
	c.lease = l
	return l, nil
}

// Ack acknowledges id for consumer name (explicit only), within epoch ("":
// any) and the session's lastID; it returns the acknowledged id once it is
// stored. A lower id than the acknowledged one moves nothing.
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
	return id, s.moveLocked(c, id, c.st.Epoch, now)
}

// moveLocked stores c at id under epoch. s.mu must be held.
func (s *ConsumerSet) moveLocked(c *consumer, id uint64, epoch string, now time.Time) error {
	next := c.st
	next.AckedID, next.Epoch, next.LastActive = id, epoch, now
	if s.store != nil {
		if err := s.store.PutConsumer(next); err != nil {
			return err
		}
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
	if s.store != nil {
		if err := s.store.DeleteConsumer(name); err != nil {
			return err
		}
	}
	delete(s.m, name)
	c.acct.Release(1)
	if c.lease != nil {
		c.lease.replace()
	}
	return nil
}

// ConsumerInfo is a consumer as GET …/consumers lists it.
type ConsumerInfo struct {
	ConsumerState
	Connected bool
}

// List returns the consumers, sorted by name.
func (s *ConsumerSet) List() []ConsumerInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ConsumerInfo, 0, len(s.m))
	for _, c := range s.m {
		out = append(out, ConsumerInfo{ConsumerState: c.st, Connected: c.lease != nil})
	}
	slices.SortFunc(out, func(a, b ConsumerInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Len returns how many consumers the set holds.
func (s *ConsumerSet) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// A Lease is a live stream's hold on its consumer.
type Lease struct {
	set     *ConsumerSet
	c       *consumer
	created bool
	done    chan struct{} // closed when replaced

	// guarded by set.mu
	pos      uint64    // under auto: the last id written (or skipped)
	stored   time.Time // when pos was last stored
	replaced bool
	ended    bool
}

// State returns the consumer as the stream starts on it.
func (l *Lease) State() ConsumerState {
	l.set.mu.Lock()
	defer l.set.mu.Unlock()
	return l.c.st
}

// Created reports whether this stream created the consumer.
func (l *Lease) Created() bool { return l.created }

// Done is closed when another stream took the consumer over, or it was
// deleted: the stream ends with stream:closed replaced.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Replaced reports whether Done is closed.
func (l *Lease) Replaced() bool {
	l.set.mu.Lock()
	defer l.set.mu.Unlock()
	return l.replaced
}

// replace ends l's hold. set.mu must be held.
func (l *Lease) replace() {
	if !l.replaced {
		l.replaced = true
		close(l.done)
	}
	if l.c.lease == l {
		l.c.lease = nil
	}
}

// Wrote tells an auto lease that the stream wrote (or its filter skipped)
// every id up to id, under epoch; the position is stored when a second has
// passed since it last was. An explicit lease, or one replaced, ignores it.
func (l *Lease) Wrote(id uint64, epoch string, now time.Time) error {
	l.set.mu.Lock()
	defer l.set.mu.Unlock()
	if l.replaced || l.ended || l.c.st.Ack != AckAuto || id <= l.pos && epoch == l.c.st.Epoch {
		return nil
	}
	l.pos = id
	if now.Sub(l.stored) < autoStoreEvery && epoch == l.c.st.Epoch {
		return nil
	}
	l.stored = now
	return l.set.moveLocked(l.c, id, epoch, now)
}

// End ends the stream's hold: an auto lease stores its position. A lease
// replaced meanwhile stores nothing (the stream that took over owns the
// position).
func (l *Lease) End(now time.Time) error {
	l.set.mu.Lock()
	defer l.set.mu.Unlock()
	if l.ended || l.replaced {
		l.ended = true
		return nil
	}
	l.ended = true
	if l.c.lease == l {
		l.c.lease = nil
	}
	if l.c.st.Ack != AckAuto || l.pos == l.c.st.AckedID {
		return nil
	}
	return l.set.moveLocked(l.c, l.pos, l.c.st.Epoch, now)
}
