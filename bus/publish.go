package bus

import (
	"slices"
)

// pendingBatch is a batch on its way to durability.
type pendingBatch struct {
	mark    uint64 // the store's mark past it
	durable bool   // durable when written (behind a batch that was not)
	frames  []*Frame
}

// A Batch is the input of one publish, for [Bus.Stage]: the variants of
// the one publish path are its named fields.
type Batch struct {
	// Events are validated and encoded as one all-or-nothing batch.
	Events []Event
	// Daemon admits the reserved family localbus (never stream) in
	// Events: the daemon's own events.
	Daemon bool
	// Copies, instead of Events and only on the global bus (a bus with no
	// Session), are frames that session buses published, copied in order
	// as one batch: each copy is built from its frame's bytes, with the
	// global bus's id and a "seq" that is the frame's id, and carries its
	// [Origin]. Nothing is validated or encoded again.
	Copies []Copies
	// KeepFrames makes Stage append the batch's frames, in id order, to
	// Frames and return the extended slice as [Staged.Frames]: what Copies
	// take. The frames are shared with the ring and every subscriber; they
	// must not be modified.
	KeepFrames bool
	Frames     []*Frame
	// Key, when not empty, names the batch for its store, and KeyValue
	// says what to store under it once the batch has its ids: a store
	// that is a KeyStore writes both with the events, so that a crash
	// keeps the events and the key or neither (the hub's idempotency keys,
	// SPEC §6). Stage calls KeyValue under the bus lock; it must not call
	// the bus. Other stores ignore them, and so does a batch of Copies.
	Key      string
	KeyValue func(first, last uint64) []byte
}

// A Staged is a batch that has its ids and is written to the bus's store,
// on its way to durability: [Bus.Finish] waits for it and delivers it.
type Staged struct {
	// First and Last are the ids assigned.
	First, Last uint64
	// Frames are Batch.Frames with the batch's frames appended, when
	// Batch.KeepFrames; else nil.
	Frames []*Frame
	mark   uint64
	wait   bool // the batch was not durable when written
}

// Publish validates, encodes and appends events as one all-or-nothing batch,
// then queues them to every subscriber whose filter matches. It returns the
// first and last id assigned. Bad input is an *InputError and burns no id;
// on a closed bus it returns ErrClosed. Publish never blocks on a subscriber:
// one that cannot keep up is evicted. With a DeferredStore it returns once
// the batch is durable and delivered. It is [Bus.Stage] of Batch{Events:
// events} followed by [Bus.Finish].
func (b *Bus) Publish(events ...Event) (first, last uint64, err error) {
	st, err := b.Stage(Batch{Events: events})
	if err != nil {
		return 0, 0, err
	}
	return st.First, st.Last, b.Finish(st)
}

// Stage is the first half of a publish: it validates and encodes the
// batch's events (or builds its copies), gives them their ids and writes
// them to the store, under the bus lock, and returns. When the store is a
// DeferredStore that did not make them durable at once, nobody sees them
// until [Bus.Finish] has waited for them: concurrent publishers then share
// that wait (group commit), and subscribers get every batch in id order once
// it is durable. Otherwise they are delivered before Stage returns. Every
// successful Stage must be followed by Finish.
//
// It returns an *InputError, burning no id, for an empty batch, one with
// both Events and Copies, bad events, copies on a bus with a Session, or a
// copied frame that is not an event its Copies' From encoded; ErrClosed on
// a closed bus; or the store's error.
func (b *Bus) Stage(p Batch) (Staged, error) {
	if len(p.Copies) > 0 {
		if len(p.Events) > 0 {
			return Staged{}, inputError("events", "", "events and copies in one batch")
		}
		return b.stageCopies(p.Copies)
	}
	if len(p.Events) == 0 {
		return Staged{}, inputError("events", "", "empty batch")
	}
	var one [1]prepared
	preps := one[:0]
	if len(p.Events) > 1 {
		preps = make([]prepared, 0, len(p.Events))
	}
	defer func() {
		for _, pr := range preps {
			pr.release()
		}
	}()
	for i := range p.Events {
		pr, err := prepare(&p.Events[i], b.session, p.Daemon)
		if err != nil {
			return Staged{}, err
		}
		preps = append(preps, pr)
	}
	return b.commit(preps, p)
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

// commit gives preps, the prepared events of p, their ids and appends
// their frames to the store, under b.mu. When they are durable (and no
// earlier batch is waiting) it queues them to the subscribers at once;
// otherwise Finish does, once they are. With p.KeepFrames it appends the
// frames to p.Frames and returns the result in st.Frames; otherwise it
// builds them in the bus's scratch slice. p.Key and p.KeyValue go to a
// KeyStore.
func (b *Bus) commit(preps []prepared, p Batch) (st Staged, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return Staged{}, ErrClosed
	}
	if b.failed != nil {
		return Staged{}, b.failed
	}
	dst := p.Frames
	if !p.KeepFrames {
		dst = b.frames[:0]
	}
	frames := buildFrames(dst, preps, b.lastID+1)
	batch := frames[len(dst):]
	durable := true
	var mark uint64
	if ks, ok := b.store.(KeyStore); ok && p.Key != "" && p.KeyValue != nil {
		mark, durable, err = ks.AppendKeyed(batch, p.Key, p.KeyValue(b.lastID+1, b.lastID+uint64(len(preps))))
	} else if ds, ok := b.store.(DeferredStore); ok {
		mark, durable, err = ds.AppendDeferred(batch)
	} else {
		err = b.store.Append(batch)
	}
	if err != nil {
		clear(batch)
		return Staged{}, err
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
	if p.KeepFrames {
		st.Frames = frames
		return st, nil
	}
	clear(frames)
	b.frames = frames[:0]
	return st, nil
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
	lost := false // a frame records a loss at a mirror's origin
	for _, f := range frames {
		if f.meta != nil && f.meta.lost.From != 0 {
			lost = true
			break
		}
	}
	for _, s := range b.subs {
		s.mu.Lock()
		n := len(s.q)
		all := len(frames) > 1 && !lost && s.family == "" && s.filter.Load() == nil
		if all && cap(s.q)-n < len(frames) {
			// It takes every frame (or is evicted on the way): grow the
			// queue once, not once per doubling.
			s.q = slices.Grow(s.q, min(len(frames), s.maxQueued+1))
		}
		if all && s.end == EndNone && s.pushAllLocked(frames, size) {
			s.cursor = frames[len(frames)-1].ID
			delivered += uint64(len(frames))
			s.mu.Unlock()
			s.notify()
			continue
		}
		for _, f := range frames {
			if s.end != EndNone {
				break
			}
			if lost {
				if l, ok := f.Lost(); ok {
					s.pushLostLocked(f, l, b.shown, &b.stats)
				}
			}
			if !s.matches(f.Type) {
				s.skipped = f.ID // an auto consumer moves past it (Through)
				continue
			}
			if s.pushLiveLocked(f, &b.stats) {
				evicted = true // f was not queued
			} else {
				s.cursor = f.ID
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
