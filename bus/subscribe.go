package bus

import (
	"context"
	"sort"
	"time"

	"github.com/localbus/localbus/bus/share"
	"github.com/localbus/localbus/ipc/wire/grammar"
)

// remove takes s off the subscriber list; idempotent.
func (b *Bus) remove(s *Subscription) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.removeLocked(s)
}

// removeLocked is remove with b.mu held.
func (b *Bus) removeLocked(s *Subscription) {
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
	// stream), replay included; the zero Family for none.
	Family Family
	// Filter selects event types; nil means everything (in Family).
	Filter *Filter
	// MaxQueued is the live frame limit, in [16, 2048]; 0 means the bus's.
	MaxQueued int
	// Consumer, for a stream that reads through a consumer (SPEC §2.4), is
	// what its stream:ready says of it; Cursor is then its acknowledged id
	// and Epoch that id's epoch. The bus only shows it.
	Consumer *ReadyConsumer
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
	if fam := opts.Family.name; fam != "" {
		if opts.Family.Reserved() && fam != FamilyLocalbus {
			return nil, inputError("family", fam, "reserved")
		}
		if !opts.Filter.Within(fam) {
			return nil, inputError("types", "", "outside family "+fam)
		}
	}
	if opts.MaxQueued != 0 && (opts.MaxQueued < grammar.MinMaxQueued || opts.MaxQueued > grammar.MaxMaxQueued) {
		return nil, inputError("maxQueued", "", "want 16 to 2048")
	}
	if opts.Cursor != nil && *opts.Cursor > grammar.MaxCursor {
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
		family:    opts.Family.name,
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
	ready := ReadyData{LastID: b.shown, EarliestID: nullable(earliest), Epoch: b.epoch, MaxQueued: s.maxQueued, Consumer: opts.Consumer}
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
	s.cursor = b.shown
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
	s.cursor = cursor
	if gap == GapEpochReset {
		s.cursor = 0 // nothing of the new sequence was delivered
	}
	var count int
	var lastReplayed uint64
	b.store.Scan(from, func(f *Frame) bool {
		if f.ID > b.shown {
			return false // not durable yet: Finish delivers it live
		}
		if l, ok := f.Lost(); ok {
			s.pushLostLocked(f, l, b.shown, &b.stats)
		}
		if s.matches(f.Type) {
			s.pushForcedLocked(f)
			s.cursor = f.ID
			count++
			lastReplayed = f.ID
		} else {
			s.skipped = f.ID
		}
		return true
	})
	b.stats.replayed.Add(uint64(count))
	s.pushForcedLocked(reservedFrame(TypeReplayed, s.session, ReplayedData{ReplayedCount: count, LastReplayedEventID: nullable(lastReplayed)}))
}

// CursorAt returns the cursor that starts a replay at the first retained
// event published at or after t, as SubscribeOptions.Since does: for a
// consumer created with ?sinceTime= (SPEC §2.4), whose start is an id.
func (b *Bus) CursorAt(t time.Time) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cursorAtLocked(t)
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
