package bus

import (
	"sync/atomic"
)

// counters are the bus's cumulative figures, read without the lock.
type counters struct {
	published       atomic.Uint64
	delivered       atomic.Uint64
	slowWarnings    atomic.Uint64
	slowBytes       atomic.Uint64 // of slowWarnings, those the byte figure set off
	evictedQueue    atomic.Uint64
	evictedBytes    atomic.Uint64
	gapRingEvicted  atomic.Uint64
	gapEpochReset   atomic.Uint64
	gapUpstreamLost atomic.Uint64
	replayed        atomic.Uint64
}

// Stats are a bus's figures at one instant. Counters are cumulative.
type Stats struct {
	Session         string
	Epoch           string
	LastID          uint64
	EarliestID      uint64 // 0 when the ring is empty
	RingLen         int
	RingBytes       int64
	Subscribers     int
	Published       uint64 // events that got an id
	Delivered       uint64 // live frames queued to subscribers
	SlowWarnings    uint64 // stream:slow sent, for either figure
	SlowBytes       uint64 // of SlowWarnings, those sent because live bytes reached 75% (and frames had not)
	EvictedQueue    uint64 // stream:lagged, queue_overflow
	EvictedBytes    uint64 // stream:lagged, queue_bytes_overflow
	GapRingEvicted  uint64 // stream:gap served, ring_evicted
	GapEpochReset   uint64 // stream:gap served, epoch_reset
	GapUpstreamLost uint64 // stream:gap served, upstream_lost (a mirror's origin lost events)
	Replayed        uint64 // events queued by replays
	Limits          Limits
}

// Counters returns the bus's cumulative counts of events published and of
// live frames delivered to its subscribers' queues, without taking its
// lock.
func (b *Bus) Counters() (published, delivered uint64) {
	return b.stats.published.Load(), b.stats.delivered.Load()
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
	s.GapUpstreamLost = b.stats.gapUpstreamLost.Load()
	s.Replayed = b.stats.replayed.Load()
	return s
}
