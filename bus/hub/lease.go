package hub

import (
	"sync/atomic"
	"time"
)

// A Lease is a live stream's hold on its consumer. Wrote, Sync and End
// are the stream's writer's to call; Done, Replaced and the rest may be
// called from any goroutine.
type Lease struct {
	set     *ConsumerSet
	c       *consumer
	start   ConsumerState
	created bool
	epoch   string        // the session's epoch the stream reads: its positions'
	done    chan struct{} // closed when replaced

	// pos is, under auto, the id up to which the stream passed every
	// event (Wrote). Written by the writer alone; read under set.mu by a
	// takeover too.
	pos atomic.Uint64

	// guarded by set.mu
	replaced bool
	ended    bool
}

// Start returns the consumer as the stream found it: the stream starts
// after Start().AckedID, in Start().Epoch.
func (l *Lease) Start() ConsumerState { return l.start }

// Ack returns the consumer's ack mode.
func (l *Lease) Ack() AckMode { return l.start.Ack }

// Name returns the consumer's name.
func (l *Lease) Name() string { return l.start.Name }

// Epoch returns the session's epoch the stream reads, which every
// position it reports or acknowledges belongs to.
func (l *Lease) Epoch() string { return l.epoch }

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

// Wrote tells the lease that the stream wrote (or its filter skipped)
// every event up to id, in the lease's epoch: under auto the position,
// in memory, follows; nothing is stored (see Sync). It reports whether
// the position moved. It costs an atomic load and store, and takes no
// lock. Only the stream's writer calls it.
func (l *Lease) Wrote(id uint64) bool {
	if id <= l.pos.Load() {
		return false
	}
	l.pos.Store(id)
	return true
}

// Sync stores the position under auto, if Wrote moved it: the writer
// calls it at most once every SyncEvery while the stream runs, so a
// consumer costs at most one store a second. An explicit lease, or one
// replaced or ended, stores nothing.
func (l *Lease) Sync(now time.Time) error {
	l.set.mu.Lock()
	defer l.set.mu.Unlock()
	return l.syncLocked(now)
}

// syncLocked is Sync with set.mu held.
func (l *Lease) syncLocked(now time.Time) error {
	pos, ok := l.autoPositionLocked()
	if l.replaced || l.ended || !ok {
		return nil
	}
	return l.set.moveLocked(l.c, pos, now)
}

// autoPositionLocked returns the position the writer reached, and whether
// it is one to store: the consumer's ack mode is auto, the stream reads
// the consumer's epoch and the position is past its acknowledged id.
// set.mu is held.
func (l *Lease) autoPositionLocked() (uint64, bool) {
	pos := l.pos.Load()
	return pos, l.c.st.Ack == AckAuto && l.c.st.Epoch == l.epoch && pos > l.c.st.AckedID
}

// End ends the stream's hold and stores the consumer once more, with its
// last activity and under auto the position, unless nothing moved since a
// store less than SyncEvery ago (whose last activity is recent enough for
// consumer_ttl): a consumer is stored at most once a second. A lease
// replaced meanwhile stores nothing: the stream that took over, or the
// delete, owns the consumer.
func (l *Lease) End(now time.Time) error {
	l.set.mu.Lock()
	defer l.set.mu.Unlock()
	if l.ended || l.replaced {
		l.ended = true
		return nil
	}
	l.ended = true
	l.c.lease = nil
	next := l.c.st
	next.LastActive = now
	moved := false
	if pos, ok := l.autoPositionLocked(); ok {
		next.AckedID, moved = pos, true
	}
	if !moved && now.Sub(l.c.st.LastActive) < SyncEvery {
		return nil
	}
	if err := l.set.putLocked(next); err != nil {
		return err
	}
	l.c.st = next
	return nil
}
