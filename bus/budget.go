package bus

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
