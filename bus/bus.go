package bus

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/localbus/localbus/bus/share"
)

// ErrClosed is returned by Publish and Subscribe on a closed bus.
var ErrClosed = errors.New("bus: closed")

// ErrSubscriberLimit is returned by Subscribe when the bus already has
// MaxSubscribers subscribers, or the peer its share of them: the error is
// then a *share.Refusal of the pool "subscribers", which unwraps to it.
// The router turns it into a stream:error frame.
var ErrSubscriberLimit = errors.New("bus: subscriber limit reached")

// Options configure a Bus. Zero values mean the defaults.
type Options struct {
	// Session is the name put in every envelope's "session"; zero for the
	// global bus, whose events carry their own (Event.Session).
	Session SessionID
	// Epoch names this run of the id sequence; "" means a fresh random one.
	Epoch string
	// RingSize is the replay ring's count limit; default 8000.
	RingSize int
	// RingMaxBytes is the replay ring's byte limit; default 64 MiB.
	RingMaxBytes int64
	// MaxQueued is the default live frame limit per subscriber; default 256.
	MaxQueued int
	// MaxQueuedBytes is the live byte limit per subscriber; default 2 MiB.
	MaxQueuedBytes int64
	// MaxSubscribers limits concurrent subscribers; default 64.
	MaxSubscribers int
	// PeerShare is the fraction of MaxSubscribers one peer other than a
	// privileged one may hold (SPEC §2, fair shares; see package share);
	// default 0, no shares. The daemon sets peer_share.
	PeerShare float64
	// Store retains events for replay; nil means a new in-memory Ring. A
	// store that already holds events continues their id sequence.
	Store Store
	// OnRingBytes, if set, is called with the change of the ring's
	// retained bytes each time it changes (first with what the store holds
	// at New), under the bus's lock: it must be cheap and must not call
	// the bus. Close reports the ring as emptied and calls it no more. A
	// hub sums it across buses to enforce a memory budget.
	OnRingBytes func(delta int64)
}

// A Bus is one event sequence with its ring and subscribers. All methods are
// safe for concurrent use.
type Bus struct {
	session string
	epoch   string
	stats   counters

	mu     sync.Mutex // guards the fields below; taken before any Subscription.mu
	closed bool
	store  Store
	lastID uint64 // last id assigned
	shown  uint64 // last id durable and delivered: what subscribers and replays see
	limits Limits
	subs   []*Subscription
	// subPool counts subs by peer (MaxSubscribers, PeerShare): each
	// subscriber holds one unit from Subscribe until it leaves subs.
	subPool *share.Pool
	frames  []*Frame // scratch for Publish, reused under mu

	// pending are batches written to a DeferredStore and not yet known to
	// be durable, in id order; failed is the error that made one of them
	// undurable, after which the bus refuses every publish.
	pending []pendingBatch
	failed  error

	ringBytes   int64 // store.Bytes() as last reported to onRingBytes
	onRingBytes func(delta int64)
	ringBytesA  atomic.Int64 // ringBytes, for RingBytes without the lock
}

// New returns a bus. It fails with an *InputError when a limit is out of
// range.
func New(opts Options) (*Bus, error) {
	l := opts.limits()
	if err := l.Validate(); err != nil {
		return nil, err
	}
	l.fill()
	epoch := opts.Epoch
	if epoch == "" {
		epoch = NewEpoch()
	}
	st := opts.Store
	if st == nil {
		st = NewRing(l.RingSize, l.RingMaxBytes)
	} else {
		st.SetLimits(l.RingSize, l.RingMaxBytes)
	}
	last := st.LastID()
	b := &Bus{session: opts.Session.id, epoch: epoch, store: st, lastID: last, shown: last, limits: l, onRingBytes: opts.OnRingBytes}
	b.subPool = share.NewPool(share.Options{Name: PoolSubscribers, Limit: int64(l.MaxSubscribers), Share: l.PeerShare, Err: ErrSubscriberLimit})
	b.noteRingBytesLocked()
	return b, nil
}

// NewEpoch returns a fresh random epoch name.
func NewEpoch() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Session returns the bus's session name, "" for the global bus.
func (b *Bus) Session() string { return b.session }

// Epoch returns the name of this run of the bus's id sequence.
func (b *Bus) Epoch() string { return b.epoch }

// LastID returns the last id published, 0 before any: with a
// DeferredStore, the last id that is durable and delivered (an id assigned
// to a batch still on its way to durability is not shown).
func (b *Bus) LastID() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.shown
}

// LastFrame returns the frame of the last id published (as LastID) while
// the ring still holds it, else nil.
func (b *Bus) LastFrame() *Frame {
	b.mu.Lock()
	defer b.mu.Unlock()
	var last *Frame
	if b.shown > 0 {
		b.store.Scan(b.shown, func(f *Frame) bool {
			last = f
			return false
		})
	}
	return last
}

// EarliestID returns the oldest id in the ring, 0 when the ring is empty.
func (b *Bus) EarliestID() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.earliestLocked()
}

// earliestLocked is the oldest id in the ring that is shown, 0 when there
// is none. b.mu must be held.
func (b *Bus) earliestLocked() uint64 {
	e := b.store.Earliest()
	if e > b.shown {
		return 0
	}
	return e
}

// Close closes the bus: every subscriber gets stream:closed with reason
// session_deleted after what it has queued, and Publish and Subscribe return
// ErrClosed from then on. It is idempotent.
func (b *Bus) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	b.endStreamsLocked(EndSessionDeleted)
	if b.onRingBytes != nil {
		// The bus's memory is no longer the owner's to count.
		b.onRingBytes(-b.ringBytes)
		b.onRingBytes = nil
	}
}
