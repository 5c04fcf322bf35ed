package bus

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/localbus/localbus/bus/share"
)

// EndReason says why a subscription ended.
type EndReason string

// The reasons a subscription ends.
const (
	EndNone           EndReason = ""                // still open
	EndLagged         EndReason = "lagged"          // evicted as a slow reader: stream:lagged was queued
	EndSessionDeleted EndReason = "session_deleted" // the bus was closed: stream:closed was queued
	EndShutdown       EndReason = "shutdown"        // the daemon is stopping: stream:closed was queued
	EndReload         EndReason = "reload"          // the daemon is reloading: stream:closed was queued
	EndCancelled      EndReason = "cancelled"       // Close or the context: queued frames were dropped
	// EndReplaced: another stream took over the stream's consumer, or the
	// consumer was deleted (SPEC §2.4): stream:closed was queued, without
	// retryMs, since reconnecting would take the consumer back.
	EndReplaced EndReason = "replaced"
)

// A Subscription is one subscriber's queue of frames. It is safe for
// concurrent use, but it is meant to have one writer goroutine that loops on
// Ready and Take.
type Subscription struct {
	bus       *Bus
	family    string // fixed restriction to one family; "" for none
	maxQueued int
	maxBytes  int64
	session   string // for the reserved frames it gets
	ready     chan struct{}
	filter    atomic.Pointer[Filter]
	index     int            // position in bus.subs; -1 once removed. Guarded by bus.mu.
	acct      *share.Account // its unit of the bus's subscribers; nil once removed. Guarded by bus.mu.
	slowSent  atomic.Uint32  // stream:slow frames queued, for the writer's log

	mu        sync.Mutex  // guards the fields below
	stopCtx   func() bool // stops the context.AfterFunc; nil until set by Subscribe
	q         []entry
	live      int    // queued live frames
	liveBytes int64  // their encoded size
	waiting   bool   // the writer's last Take returned nothing
	warned    bool   // stream:slow sent; re-armed at 37.5%
	lagReason string // stream:lagged's reason, once evicted
	cursor    uint64 // the last event id queued, or where the stream started: a gap's lastDeliveredId
	skipped   uint64 // the last event id the filter kept from the stream
	through   uint64 // Through's: max(cursor, skipped) at the last Take
	end       EndReason
	dropped   bool // Close was called: Take returns nothing more
}

// detachLocked marks s removed from its bus's subscribers and gives back
// its unit of them, once. bus.mu must be held.
func (s *Subscription) detachLocked() {
	s.index = -1
	if s.acct != nil {
		s.acct.Release(1)
		s.acct = nil
	}
}

// entry is a queued frame. counted reports whether it counts toward the live
// limits (a live frame that was buffered); forced and handed-off frames do not.
type entry struct {
	f       *Frame
	counted bool
}

// largeQueue is the capacity above which a drained queue's array is released,
// so that a replay of thousands of frames does not pin memory on an idle stream.
const largeQueue = 256

// Ready returns a channel that has a value when frames may be waiting or the
// stream has ended. After receiving from it, call Take.
func (s *Subscription) Ready() <-chan struct{} { return s.ready }

func (s *Subscription) notify() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// Take appends every queued frame to dst and returns it, emptying the queue.
// ended reports that the stream is over: the frames returned are the last
// (the terminal frame, if any, is the final one) and the writer should stop.
// Take never blocks on anything but the subscription's own lock.
func (s *Subscription) Take(dst []*Frame) (frames []*Frame, ended bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dropped {
		return dst, true
	}
	for i := range s.q {
		dst = append(dst, s.q[i].f)
	}
	took := len(s.q)
	if cap(s.q) > largeQueue {
		s.q = nil
	} else {
		clear(s.q)
		s.q = s.q[:0]
	}
	s.live, s.liveBytes = 0, 0
	s.rearmLocked()
	s.through = max(s.cursor, s.skipped)
	ended = s.end != EndNone
	s.waiting = took == 0 && !ended
	return dst, ended
}

// Through returns the id through which, as of the last Take, every event
// of the bus was either returned by a Take or kept from the stream by its
// filter (0 before any): once the writer has written what Take returned,
// the stream has passed every event up to it. A consumer's position under
// ack mode auto follows it (SPEC §2.4), so events a filter skips move it
// too. Events are delivered in id order and Take empties the queue, so no
// event at or below it is still queued. Call it from the writer, after
// Take.
func (s *Subscription) Through() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.through
}

// End reports why the subscription ended, or EndNone while it is open. It is
// final once Take has reported ended.
func (s *Subscription) End() EndReason {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.end
}

// LagReason returns the reason of the subscription's stream:lagged
// (LagQueueOverflow or LagQueueBytesOverflow) once it was evicted, else "".
func (s *Subscription) LagReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lagReason
}

// SlowWarnings returns how many stream:slow frames the subscription has
// been sent. It takes no lock, so a writer may check it after every Take.
func (s *Subscription) SlowWarnings() int { return int(s.slowSent.Load()) }

// Close removes the subscriber from its bus at once and drops its queued
// frames. It is idempotent and safe to call from any goroutine; it is what
// cancelling the context given to Subscribe does.
func (s *Subscription) Close() {
	// Under s.mu: with a context that is already done, the AfterFunc runs
	// Close while Subscribe is still storing stopCtx.
	s.mu.Lock()
	stop := s.stopCtx
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
	s.bus.remove(s)
	s.mu.Lock()
	if s.end == EndNone {
		s.end = EndCancelled
	}
	s.dropped = true
	s.q = nil
	s.live, s.liveBytes = 0, 0
	s.mu.Unlock()
	s.notify()
}

// Filter returns the subscription's current type filter; nil means
// everything (within its family, for a family stream).
func (s *Subscription) Filter() *Filter { return s.filter.Load() }

// SetFilter replaces the type filter for live events from now on; it replays
// nothing. On a family stream every entry must lie in that family, else it
// is an *InputError and the filter is unchanged.
func (s *Subscription) SetFilter(f *Filter) error {
	if s.family != "" && !f.Within(s.family) {
		return inputError("types", "", "outside family "+s.family)
	}
	s.filter.Store(f)
	return nil
}

// Family returns the family a family stream is restricted to, or the zero
// Family.
func (s *Subscription) Family() Family { return Family{s.family} }

// MaxQueued is the subscription's live frame limit.
func (s *Subscription) MaxQueued() int { return s.maxQueued }

// Stats are a subscription's queue figures at one instant.
type SubscriptionStats struct {
	Queued    int   // frames queued, forced ones included
	Live      int   // live frames counted toward maxQueued
	LiveBytes int64 // their bytes
	Warned    bool  // a stream:slow was sent and has not re-armed
	End       EndReason
}

// Stats returns the subscription's queue figures.
func (s *Subscription) Stats() SubscriptionStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SubscriptionStats{Queued: len(s.q), Live: s.live, LiveBytes: s.liveBytes, Warned: s.warned, End: s.end}
}

// matches reports whether the subscriber wants an event of type t.
func (s *Subscription) matches(t string) bool {
	if s.family != "" && FamilyOf(t) != s.family {
		return false
	}
	return s.filter.Load().Match(t)
}

// pushForcedLocked queues a frame outside the live limits. s.mu must be held.
func (s *Subscription) pushForcedLocked(f *Frame) {
	s.q = append(s.q, entry{f: f})
}

// pushLiveLocked queues a live event, applying the limits, the slow warning
// and eviction. It reports whether the subscriber was evicted. s.mu must be
// held, and the subscription must not have ended.
func (s *Subscription) pushLiveLocked(f *Frame, st *counters) (evicted bool) {
	if s.waiting && len(s.q) == 0 {
		// Handed straight to a writer that is waiting: no accounting.
		s.q = append(s.q, entry{f: f})
		s.waiting = false
		return false
	}
	size := int64(f.Size())
	if s.live > 0 {
		if s.live+1 > s.maxQueued {
			s.evictLocked(LagQueueOverflow, 0)
			st.evictedQueue.Add(1)
			return true
		}
		if s.liveBytes+size > s.maxBytes {
			s.evictLocked(LagQueueBytesOverflow, size)
			st.evictedBytes.Add(1)
			return true
		}
	}
	s.q = append(s.q, entry{f: f, counted: true})
	s.live++
	s.liveBytes += size
	if !s.warned && (s.live*4 >= s.maxQueued*3 || s.liveBytes*4 >= s.maxBytes*3) {
		s.warned = true
		st.slowWarnings.Add(1)
		if s.live*4 < s.maxQueued*3 {
			st.slowBytes.Add(1)
		}
		s.slowSent.Add(1)
		s.pushForcedLocked(reservedFrame(TypeSlow, s.session, SlowData{
			Queued: s.live, MaxQueued: s.maxQueued, QueuedBytes: s.liveBytes, MaxQueuedBytes: s.maxBytes,
		}))
	}
	return false
}

// pushAllLocked queues a batch of live frames of the given total size at
// once, when that changes nothing pushLiveLocked would do one frame at a
// time: they all fit within both limits and stay below the slow warning.
// It reports false, having queued nothing, otherwise. s.mu must be held,
// and the subscription must not have ended.
func (s *Subscription) pushAllLocked(frames []*Frame, size int64) bool {
	first := 0
	if s.waiting && len(s.q) == 0 {
		// The first frame is handed straight to the waiting writer: no
		// accounting, as in pushLiveLocked.
		first = 1
		size -= int64(frames[0].Size())
	}
	live, bytes := s.live+len(frames)-first, s.liveBytes+size
	if live > s.maxQueued || bytes > s.maxBytes || (!s.warned && (live*4 >= s.maxQueued*3 || bytes*4 >= s.maxBytes*3)) {
		return false
	}
	for i, f := range frames {
		s.q = append(s.q, entry{f: f, counted: i >= first})
	}
	s.waiting = false
	s.live, s.liveBytes = live, bytes
	return true
}

// pushLostLocked queues, before the event f that records a loss at a
// mirror's origin, the stream:gap (upstream_lost) that announces it. It is
// queued whatever the subscriber's filter, since nobody knows the types of
// the events that were lost. s.mu must be held.
func (s *Subscription) pushLostLocked(f *Frame, l Lost, lastID uint64, st *counters) {
	id := f.ID
	s.pushForcedLocked(reservedFrame(TypeGap, s.session, GapData{
		Reason: GapUpstreamLost, LastDeliveredID: s.cursor, EarliestAvailableID: &id, LastID: lastID,
		OriginFrom: l.From, OriginTo: l.To,
	}))
	st.gapUpstreamLost.Add(1)
}

// rearmLocked re-arms the slow warning once both figures are at 37.5% or below.
func (s *Subscription) rearmLocked() {
	if s.warned && s.live*8 <= s.maxQueued*3 && s.liveBytes*8 <= s.maxBytes*3 {
		s.warned = false
	}
}

// evictLocked ends the stream with stream:lagged. eventBytes is the size of
// the frame that did not fit, for a bytes overflow.
func (s *Subscription) evictLocked(reason string, eventBytes int64) {
	d := LaggedData{Reason: reason, QueueSize: s.live, MaxQueued: s.maxQueued, QueuedBytes: s.liveBytes, MaxQueuedBytes: s.maxBytes}
	if reason == LagQueueBytesOverflow {
		d.EventBytes = &eventBytes
	}
	s.pushForcedLocked(reservedFrame(TypeLagged, s.session, d))
	s.lagReason = reason
	s.end = EndLagged
}

// closeLocked ends the stream with stream:closed after what is queued.
// The frame carries a reconnect hint, but for EndReplaced, which is
// final.
func (s *Subscription) closeLocked(reason EndReason) {
	if s.end != EndNone {
		return
	}
	d := ClosedData{Reason: string(reason)}
	if reason != EndReplaced {
		d.RetryMs = retryHint()
	}
	s.pushForcedLocked(reservedFrame(TypeClosed, s.session, d))
	s.end = reason
}

// EndReplaced ends the stream with stream:closed, reason replaced and no
// retryMs, after what it has queued, and removes it from its bus: another
// stream took its consumer over, or the consumer was deleted (SPEC §2.4).
// A stream that has ended already is left as it is. It is safe to call
// from any goroutine.
func (s *Subscription) EndReplaced() {
	b := s.bus
	b.mu.Lock()
	s.mu.Lock()
	s.closeLocked(EndReplaced)
	s.mu.Unlock()
	b.removeLocked(s)
	b.mu.Unlock()
	s.notify()
}

// retryHint is stream:closed's retryMs: 500 ms to 1.5 s, jittered so that
// thousands of clients do not come back in the same millisecond.
func retryHint() int { return 500 + rand.IntN(1000) }
