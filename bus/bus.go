package bus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/localbus/localbus/bus/share"
)

// Defaults of the SPEC (§2.1, §2.2, §10).
const (
	DefaultRingSize       = 8000
	DefaultRingMaxBytes   = 64 << 20
	DefaultMaxQueued      = 256
	DefaultMaxQueuedBytes = 2 << 20
	DefaultMaxSubscribers = 64
	MaxRingSize           = 1_000_000
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
	// Session is the name put in every envelope's "session"; "" for the
	// global bus, whose events carry their own (Event.Session).
	Session string
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

// Limits are the settings that may change while a bus runs (on reload).
type Limits struct {
	RingSize       int
	RingMaxBytes   int64
	MaxQueued      int
	MaxQueuedBytes int64
	MaxSubscribers int
	PeerShare      float64
}

func (o *Options) limits() Limits {
	return Limits{o.RingSize, o.RingMaxBytes, o.MaxQueued, o.MaxQueuedBytes, o.MaxSubscribers, o.PeerShare}
}

func (l *Limits) fill() {
	if l.RingSize <= 0 {
		l.RingSize = DefaultRingSize
	}
	if l.RingMaxBytes <= 0 {
		l.RingMaxBytes = DefaultRingMaxBytes
	}
	if l.MaxQueued <= 0 {
		l.MaxQueued = DefaultMaxQueued
	}
	if l.MaxQueuedBytes <= 0 {
		l.MaxQueuedBytes = DefaultMaxQueuedBytes
	}
	if l.MaxSubscribers <= 0 {
		l.MaxSubscribers = DefaultMaxSubscribers
	}
}

// validate checks limits as given, before fill: zero means the default, a
// negative value is an error rather than a silent default.
func (l Limits) validate() error {
	if l.RingSize > MaxRingSize {
		return inputError("ringSize", strconv.Itoa(l.RingSize), "above 1000000")
	}
	for _, v := range []struct {
		field string
		n     int64
	}{
		{"ringSize", int64(l.RingSize)},
		{"ringMaxBytes", l.RingMaxBytes},
		{"maxQueued", int64(l.MaxQueued)},
		{"maxQueuedBytes", l.MaxQueuedBytes},
		{"maxSubscribers", int64(l.MaxSubscribers)},
	} {
		if v.n < 0 {
			return inputError(v.field, strconv.FormatInt(v.n, 10), "negative (0 means the default)")
		}
	}
	if !(l.PeerShare >= 0 && l.PeerShare <= 1) {
		return inputError("peerShare", strconv.FormatFloat(l.PeerShare, 'g', -1, 64), "want 0 to 1")
	}
	return nil
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

// pendingBatch is a batch on its way to durability.
type pendingBatch struct {
	mark    uint64 // the store's mark past it
	durable bool   // durable when written (behind a batch that was not)
	frames  []*Frame
}

// A Staged is a batch that has its ids and is written to the bus's store,
// on its way to durability: [Bus.Finish] waits for it and delivers it.
type Staged struct {
	// First and Last are the ids assigned.
	First, Last uint64
	mark        uint64
	wait        bool // the batch was not durable when written
}

// counters are the bus's cumulative figures, read without the lock.
type counters struct {
	published      atomic.Uint64
	delivered      atomic.Uint64
	slowWarnings   atomic.Uint64
	slowBytes      atomic.Uint64 // of slowWarnings, those the byte figure set off
	evictedQueue   atomic.Uint64
	evictedBytes   atomic.Uint64
	gapRingEvicted atomic.Uint64
	gapEpochReset  atomic.Uint64
	replayed       atomic.Uint64
}

// New returns a bus. It fails with an *InputError when a limit is out of
// range or the session name is invalid.
func New(opts Options) (*Bus, error) {
	if opts.Session != "" {
		if err := ValidateSessionID(opts.Session); err != nil {
			return nil, err
		}
	}
	l := opts.limits()
	if err := l.validate(); err != nil {
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
	b := &Bus{session: opts.Session, epoch: epoch, store: st, lastID: last, shown: last, limits: l, onRingBytes: opts.OnRingBytes}
	b.subPool = share.NewPool(share.Options{Name: PoolSubscribers, Limit: int64(l.MaxSubscribers), Share: l.PeerShare, Err: ErrSubscriberLimit})
	b.noteRingBytesLocked()
	return b, nil
}

// noteRingBytesLocked reports a change of the store's retained bytes to
// onRingBytes. b.mu must be held (or the bus not yet shared).
func (b *Bus) noteRingBytesLocked() {
	n := b.store.Bytes()
	d := n - b.ringBytes
	if d == 0 {
		return
	}
	b.ringBytes = n
	b.ringBytesA.Store(n)
	if b.onRingBytes != nil {
		b.onRingBytes(d)
	}
}

// RingBytes returns the bytes the ring retains, as of the last change,
// without taking the bus's lock.
func (b *Bus) RingBytes() int64 { return b.ringBytesA.Load() }

// A Trimmer is a Store that can evict its oldest frames on demand, beyond
// its own limits: what [Bus.TrimTo] needs. Ring implements it.
type Trimmer interface {
	// TrimTo evicts the oldest frames while the retained bytes exceed
	// maxBytes and the oldest frame's id is below keep. Its limits stay.
	TrimTo(maxBytes int64, keep uint64)
}

// TrimTo evicts the ring's oldest events until it retains at most maxBytes,
// whatever its own limits, and returns the bytes it retains then. It never
// evicts the last event published nor any still on its way to durability,
// so it may stay above maxBytes. A store that is no Trimmer, or a closed
// bus, is left alone. Resumers from an evicted id get stream:gap
// (ring_evicted), as with any eviction. It costs O(events evicted).
func (b *Bus) TrimTo(maxBytes int64) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t, ok := b.store.(Trimmer); ok && !b.closed && b.shown > 0 {
		t.TrimTo(maxBytes, b.shown)
		b.noteRingBytesLocked()
	}
	return b.ringBytes
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

// Publish validates, encodes and appends events as one all-or-nothing batch,
// then queues them to every subscriber whose filter matches. It returns the
// first and last id assigned. Bad input is an *InputError and burns no id;
// on a closed bus it returns ErrClosed. Publish never blocks on a subscriber:
// one that cannot keep up is evicted. With a DeferredStore it returns once
// the batch is durable and delivered (see [Bus.Stage]).
func (b *Bus) Publish(events ...Event) (first, last uint64, err error) {
	_, st, err := b.publish(events, false, nil, false)
	if err != nil {
		return 0, 0, err
	}
	return st.First, st.Last, b.Finish(st)
}

// PublishDaemon is Publish for the daemon's own events: it also accepts the
// reserved family localbus (never stream).
func (b *Bus) PublishDaemon(events ...Event) (first, last uint64, err error) {
	_, st, err := b.publish(events, true, nil, false)
	if err != nil {
		return 0, 0, err
	}
	return st.First, st.Last, b.Finish(st)
}

// PublishFrames is Publish that also appends the events' frames, in id
// order, to dst and returns the extended slice (dst unchanged on error):
// what [Bus.PublishCopies] takes to copy a session's events onto the
// global bus. The frames are shared with the ring and every subscriber;
// they must not be modified.
func (b *Bus) PublishFrames(dst []*Frame, events ...Event) ([]*Frame, error) {
	frames, st, err := b.StageFrames(dst, events...)
	if err != nil {
		return dst, err
	}
	if err := b.Finish(st); err != nil {
		return dst, err
	}
	return frames, nil
}

// StageFrames is the first half of PublishFrames: it validates and encodes
// events, gives them their ids and writes them to the store, under the bus
// lock, and returns. When the store is a DeferredStore that did not make
// them durable at once, nobody sees them until [Bus.Finish] has waited for
// them: concurrent publishers then share that wait (group commit), and
// subscribers get every batch in id order once it is durable. Otherwise
// they are delivered before StageFrames returns. Every successful
// StageFrames must be followed by Finish.
func (b *Bus) StageFrames(dst []*Frame, events ...Event) ([]*Frame, Staged, error) {
	frames, st, err := b.publish(events, false, dst, true)
	if err != nil {
		return dst, Staged{}, err
	}
	return frames, st, nil
}

// Finish waits until the staged batch is durable, then delivers it and
// every earlier batch that is durable, in id order, and returns. An error
// means the batch never became durable: it is delivered to no one, its
// ids are not reused, and the bus refuses every publish from then on.
func (b *Bus) Finish(st Staged) error {
	if !st.wait {
		return nil
	}
	durable, err := b.store.(DeferredStore).WaitDurable(st.mark)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		if b.failed == nil {
			b.failed = err
		}
		// No batch from this one on will be durable: drop them.
		keep := b.pending[:0]
		for _, p := range b.pending {
			if p.mark < st.mark {
				keep = append(keep, p)
			}
		}
		clear(b.pending[len(keep):])
		b.pending = keep
		return err
	}
	b.deliverDurableLocked(durable)
	return nil
}

// deliverDurableLocked delivers, in order, the pending batches that are
// durable up to the store's mark durable. b.mu must be held.
func (b *Bus) deliverDurableLocked(durable uint64) {
	n := 0
	for ; n < len(b.pending); n++ {
		p := &b.pending[n]
		if !p.durable && p.mark > durable {
			break
		}
		b.shown = p.frames[len(p.frames)-1].ID
		b.deliverLocked(p.frames)
	}
	if n == 0 {
		return
	}
	rest := copy(b.pending, b.pending[n:])
	clear(b.pending[rest:])
	b.pending = b.pending[:rest]
}

// publish prepares events and commits them; see commit for dst and keep.
func (b *Bus) publish(events []Event, allowLocalbus bool, dst []*Frame, keep bool) (frames []*Frame, st Staged, err error) {
	if len(events) == 0 {
		return nil, Staged{}, inputError("events", "", "empty batch")
	}
	var one [1]prepared
	preps := one[:0]
	if len(events) > 1 {
		preps = make([]prepared, 0, len(events))
	}
	defer func() {
		for _, p := range preps {
			p.release()
		}
	}()
	for i := range events {
		p, err := prepare(&events[i], b.session, allowLocalbus)
		if err != nil {
			return nil, Staged{}, err
		}
		preps = append(preps, p)
	}
	return b.commit(preps, dst, keep)
}

// commit gives preps their ids and appends their frames to the store,
// under b.mu. When they are durable (and no earlier batch is waiting) it
// queues them to the subscribers at once; otherwise Finish does, once they
// are. With keep it appends the frames to dst and returns the result;
// otherwise it builds them in the bus's scratch slice and returns nil.
func (b *Bus) commit(preps []prepared, dst []*Frame, keep bool) (frames []*Frame, st Staged, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, Staged{}, ErrClosed
	}
	if b.failed != nil {
		return nil, Staged{}, b.failed
	}
	if !keep {
		dst = b.frames[:0]
	}
	frames = buildFrames(dst, preps, b.lastID+1)
	batch := frames[len(dst):]
	durable := true
	var mark uint64
	if ds, ok := b.store.(DeferredStore); ok {
		mark, durable, err = ds.AppendDeferred(batch)
	} else {
		err = b.store.Append(batch)
	}
	if err != nil {
		clear(batch)
		return nil, Staged{}, err
	}
	st = Staged{First: b.lastID + 1, Last: b.lastID + uint64(len(preps)), mark: mark}
	b.lastID = st.Last
	b.noteRingBytesLocked()
	b.stats.published.Add(uint64(len(preps)))
	if durable && len(b.pending) == 0 {
		b.shown = st.Last
		b.deliverLocked(batch)
	} else {
		st.wait = true
		b.pending = append(b.pending, pendingBatch{mark: mark, durable: durable, frames: slices.Clone(batch)})
	}
	if keep {
		return frames, st, nil
	}
	clear(frames)
	b.frames = frames[:0]
	return nil, st, nil
}

// deliverLocked queues frames to every matching subscriber, evicting those
// that cannot take them. b.mu must be held.
func (b *Bus) deliverLocked(frames []*Frame) {
	var delivered uint64
	evicted := false
	var size int64 // of every frame, for pushAllLocked
	if len(frames) > 1 {
		for _, f := range frames {
			size += int64(f.Size())
		}
	}
	for _, s := range b.subs {
		s.mu.Lock()
		n := len(s.q)
		all := len(frames) > 1 && s.family == "" && s.filter.Load() == nil
		if all && cap(s.q)-n < len(frames) {
			// It takes every frame (or is evicted on the way): grow the
			// queue once, not once per doubling.
			s.q = slices.Grow(s.q, min(len(frames), s.maxQueued+1))
		}
		if all && s.end == EndNone && s.pushAllLocked(frames, size) {
			delivered += uint64(len(frames))
			s.mu.Unlock()
			s.notify()
			continue
		}
		for _, f := range frames {
			if s.end != EndNone {
				break
			}
			if !s.matches(f.Type) {
				continue
			}
			if s.pushLiveLocked(f, &b.stats) {
				evicted = true // f was not queued
			} else {
				delivered++
			}
		}
		grew := len(s.q) > n
		s.mu.Unlock()
		if grew {
			s.notify()
		}
	}
	b.stats.delivered.Add(delivered)
	if evicted {
		b.dropEndedLocked()
	}
}

// dropEndedLocked removes subscribers whose stream has ended. b.mu must be held.
func (b *Bus) dropEndedLocked() {
	keep := b.subs[:0]
	for _, s := range b.subs {
		s.mu.Lock()
		ended := s.end != EndNone
		s.mu.Unlock()
		if ended {
			s.detachLocked()
			continue
		}
		s.index = len(keep)
		keep = append(keep, s)
	}
	clear(b.subs[len(keep):])
	b.subs = keep
}

// remove takes s off the subscriber list; idempotent.
func (b *Bus) remove(s *Subscription) {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := s.index
	if i < 0 {
		return
	}
	last := len(b.subs) - 1
	b.subs[i] = b.subs[last]
	b.subs[i].index = i
	b.subs[last] = nil
	b.subs = b.subs[:last]
	s.detachLocked()
}

// SubscribeOptions say where a stream starts and what it carries.
type SubscribeOptions struct {
	// Cursor is the last id the client received; nil means live only.
	Cursor *uint64
	// Since, when not zero and Cursor is nil, starts the stream at the
	// first retained event published at or after Since (to the
	// millisecond of the envelope's timestamp): the bus turns it into the
	// cursor just before that event, found by binary search over the
	// retained events, which are in time order as long as the clock does
	// not step back. When every retained event is that recent and older
	// ones were evicted, the ring may not reach back so far: the cursor is
	// 0, so the client gets a stream:gap (ring_evicted) and the whole ring.
	// When no retained event is that recent, the stream is live from
	// lastId. Epoch is ignored: a time belongs to no id sequence.
	Since time.Time
	// CursorIgnored reports that the client sent a malformed Last-Event-ID
	// that was ignored; with no Cursor, stream:ready then shows cursor null.
	CursorIgnored bool
	// Epoch is the epoch the client saw; "" means unknown. It only matters
	// with a Cursor: a different epoch means a new id sequence.
	Epoch string
	// Family restricts the stream to one family for its whole life (a family
	// stream), replay included; "" for none.
	Family string
	// Filter selects event types; nil means everything (in Family).
	Filter *Filter
	// MaxQueued is the live frame limit, in [16, 2048]; 0 means the bus's.
	MaxQueued int
	// Peer is who subscribes, for the bus's fair shares of its
	// subscribers (see Options.PeerShare); the zero value is
	// share.Unknown. In-process readers that must never be refused
	// because of other peers pass share.Privileged.
	Peer share.Peer
}

// PoolSubscribers names a bus's pool of subscribers in refusals and
// metrics.
const PoolSubscribers = "subscribers"

// Subscribe registers a subscriber and queues its opening frames: stream:ready,
// then for a resuming client (Cursor set) any stream:gap, the replay and
// stream:replayed, per SPEC §2.3. It registers synchronously: every event
// published after Subscribe returns is delivered. Cancelling ctx is the same
// as calling Close on the subscription. It fails with an *InputError for bad
// options, ErrSubscriberLimit (a *share.Refusal that unwraps to it), or
// ErrClosed.
func (b *Bus) Subscribe(ctx context.Context, opts SubscribeOptions) (*Subscription, error) {
	if opts.Family != "" {
		if err := ValidateFamily(opts.Family); err != nil {
			return nil, err
		}
		if IsReservedFamily(opts.Family) && opts.Family != FamilyLocalbus {
			return nil, inputError("family", opts.Family, "reserved")
		}
		if !opts.Filter.Within(opts.Family) {
			return nil, inputError("types", "", "outside family "+opts.Family)
		}
	}
	if opts.MaxQueued != 0 && (opts.MaxQueued < MinMaxQueued || opts.MaxQueued > MaxMaxQueued) {
		return nil, inputError("maxQueued", "", "want 16 to 2048")
	}
	if opts.Cursor != nil && *opts.Cursor > MaxCursor {
		return nil, inputError("cursor", "", "larger than 2^53-1")
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	acct := b.subPool.Account(opts.Peer)
	if err := acct.Acquire(1); err != nil {
		return nil, err
	}
	s := &Subscription{
		bus:       b,
		acct:      acct,
		family:    opts.Family,
		maxQueued: opts.MaxQueued,
		maxBytes:  b.limits.MaxQueuedBytes,
		session:   b.session,
		ready:     make(chan struct{}, 1),
	}
	if s.maxQueued == 0 {
		s.maxQueued = b.limits.MaxQueued
	}
	s.filter.Store(opts.Filter)
	s.mu.Lock()
	b.openLocked(s, opts)
	s.mu.Unlock()
	s.index = len(b.subs)
	b.subs = append(b.subs, s)
	s.notify()
	if ctx != nil && ctx.Done() != nil {
		stop := context.AfterFunc(ctx, s.Close)
		s.mu.Lock()
		s.stopCtx = stop
		s.mu.Unlock()
	}
	return s, nil
}

// openLocked queues stream:ready and the resume frames. b.mu and s.mu must
// be held.
func (b *Bus) openLocked(s *Subscription, opts SubscribeOptions) {
	if opts.Cursor == nil && !opts.Since.IsZero() {
		c := b.cursorAtLocked(opts.Since)
		opts.Cursor, opts.Epoch = &c, ""
	}
	earliest := b.earliestLocked()
	ready := ReadyData{LastID: b.shown, EarliestID: nullable(earliest), Epoch: b.epoch, MaxQueued: s.maxQueued}
	if f := opts.Filter; f != nil {
		ready.Types = f.Types()
	} else if s.family != "" {
		ready.Types = []string{s.family + ":*"}
	}
	switch {
	case opts.Cursor != nil:
		c := *opts.Cursor
		ready.Cursor = &c
	case !opts.CursorIgnored:
		c := b.shown
		ready.Cursor = &c
	}
	s.pushForcedLocked(reservedFrame(TypeReady, s.session, ready))
	if opts.Cursor == nil {
		return
	}

	cursor := *opts.Cursor
	from := cursor + 1
	gap := ""
	switch {
	case cursor > b.shown || (opts.Epoch != "" && opts.Epoch != b.epoch):
		gap, from = GapEpochReset, 0
		b.stats.gapEpochReset.Add(1)
	case earliest > from || (earliest == 0 && cursor < b.shown):
		gap = GapRingEvicted
		b.stats.gapRingEvicted.Add(1)
	}
	if gap != "" {
		s.pushForcedLocked(reservedFrame(TypeGap, s.session, GapData{
			Reason: gap, LastDeliveredID: cursor, EarliestAvailableID: nullable(earliest), LastID: b.shown,
		}))
	}
	var count int
	var lastReplayed uint64
	b.store.Scan(from, func(f *Frame) bool {
		if f.ID > b.shown {
			return false // not durable yet: Finish delivers it live
		}
		if s.matches(f.Type) {
			s.pushForcedLocked(f)
			count++
			lastReplayed = f.ID
		}
		return true
	})
	b.stats.replayed.Add(uint64(count))
	s.pushForcedLocked(reservedFrame(TypeReplayed, s.session, ReplayedData{ReplayedCount: count, LastReplayedEventID: nullable(lastReplayed)}))
}

// cursorAtLocked returns the cursor that starts a replay at the first
// retained event published at or after t (SubscribeOptions.Since). b.mu
// must be held.
func (b *Bus) cursorAtLocked(t time.Time) uint64 {
	t = t.Truncate(time.Millisecond)
	earliest, n := b.earliestLocked(), b.store.Len()
	if earliest == 0 || n == 0 {
		return 0
	}
	n = min(n, int(b.shown-earliest+1)) // what is shown, not what is on its way
	before := func(id uint64) bool {
		var ts time.Time
		b.store.Scan(id, func(f *Frame) bool {
			ts = f.Time()
			return false
		})
		return ts.Before(t)
	}
	if !before(earliest) {
		return 0
	}
	// Every id in [earliest, earliest+i) is before t; find the first that
	// is not.
	i := sort.Search(n, func(i int) bool { return !before(earliest + uint64(i)) })
	return earliest + uint64(i) - 1
}

func nullable(id uint64) *uint64 {
	if id == 0 {
		return nil
	}
	return &id
}

// EndStreams ends every current subscription with a terminal stream:closed
// frame carrying reason (after what each has queued), and removes them. The
// bus stays open: this is what shutdown and reload do, since rings and ids
// survive them. reason is EndShutdown, EndReload or EndSessionDeleted; any
// other is taken as EndShutdown, so that every stream still ends.
func (b *Bus) EndStreams(reason EndReason) {
	switch reason {
	case EndShutdown, EndReload, EndSessionDeleted:
	default:
		// EndNone would remove streams without ending them: their writers
		// would wait for ever.
		reason = EndShutdown
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.endStreamsLocked(reason)
}

func (b *Bus) endStreamsLocked(reason EndReason) {
	for _, s := range b.subs {
		s.mu.Lock()
		s.closeLocked(reason)
		s.mu.Unlock()
		s.detachLocked()
		s.notify()
	}
	clear(b.subs)
	b.subs = b.subs[:0]
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

// SetLimits applies new limits: the ring evicts at once if it must; queue
// limits apply to subscribers that join from now on. Zero fields keep the
// defaults.
func (b *Bus) SetLimits(l Limits) error {
	if err := l.validate(); err != nil {
		return err
	}
	l.fill()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.limits = l
	b.subPool.SetLimit(int64(l.MaxSubscribers), l.PeerShare)
	b.store.SetLimits(l.RingSize, l.RingMaxBytes)
	b.noteRingBytesLocked()
	return nil
}

// Stats are a bus's figures at one instant. Counters are cumulative.
type Stats struct {
	Session        string
	Epoch          string
	LastID         uint64
	EarliestID     uint64 // 0 when the ring is empty
	RingLen        int
	RingBytes      int64
	Subscribers    int
	Published      uint64 // events that got an id
	Delivered      uint64 // live frames queued to subscribers
	SlowWarnings   uint64 // stream:slow sent, for either figure
	SlowBytes      uint64 // of SlowWarnings, those sent because live bytes reached 75% (and frames had not)
	EvictedQueue   uint64 // stream:lagged, queue_overflow
	EvictedBytes   uint64 // stream:lagged, queue_bytes_overflow
	GapRingEvicted uint64 // stream:gap served, ring_evicted
	GapEpochReset  uint64 // stream:gap served, epoch_reset
	Replayed       uint64 // events queued by replays
	Limits         Limits
}

// Stats returns the bus's figures.
func (b *Bus) Stats() Stats {
	b.mu.Lock()
	s := Stats{
		Session: b.session, Epoch: b.epoch, LastID: b.shown, EarliestID: b.earliestLocked(),
		RingLen: b.store.Len(), RingBytes: b.store.Bytes(), Subscribers: len(b.subs), Limits: b.limits,
	}
	b.mu.Unlock()
	s.Published = b.stats.published.Load()
	s.Delivered = b.stats.delivered.Load()
	// The part first, then the whole, which is counted first: SlowBytes
	// never exceeds SlowWarnings.
	s.SlowBytes = b.stats.slowBytes.Load()
	s.SlowWarnings = b.stats.slowWarnings.Load()
	s.EvictedQueue = b.stats.evictedQueue.Load()
	s.EvictedBytes = b.stats.evictedBytes.Load()
	s.GapRingEvicted = b.stats.gapRingEvicted.Load()
	s.GapEpochReset = b.stats.gapEpochReset.Load()
	s.Replayed = b.stats.replayed.Load()
	return s
}
