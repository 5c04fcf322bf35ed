package bus

import "errors"

// Store holds the events a bus retains for replay, in id order. The bus calls
// every method with its lock held, so implementations need no locking of their
// own for the bus's sake. Ids appended are consecutive and increasing.
//
// Ring is the in-memory Store; a disk journal implements the same interface so
// that events and ids survive a restart.
type Store interface {
	// Append adds frames with consecutive ids after LastID, then evicts
	// the oldest until the retention limits hold. It is all-or-nothing: on
	// error nothing was added.
	Append(frames []*Frame) error
	// LastID is the id of the last frame ever appended (0 before any), even
	// when that frame was evicted since.
	LastID() uint64
	// Earliest is the id of the oldest retained frame, 0 when empty.
	Earliest() uint64
	// Len and Bytes are the retained frames' count and encoded size.
	Len() int
	Bytes() int64
	// Scan calls fn for every retained frame with id >= from, in order,
	// until fn returns false.
	Scan(from uint64, fn func(*Frame) bool)
	// SetLimits changes the retention limits, evicting at once if needed.
	SetLimits(maxLen int, maxBytes int64)
}

// A DeferredStore is a Store whose appends may become durable after Append
// returns, so that concurrent publishers can share the wait (group commit).
// A bus whose store is one writes a batch under its lock with
// AppendDeferred, releases the lock, waits with WaitDurable, and only then
// delivers the batch to subscribers and shows it to replays, in id order.
type DeferredStore interface {
	Store
	// AppendDeferred is Append that does not wait for the frames to be
	// durable. The frames are retained at once (the bus shows them to no
	// one before they are durable). It returns the mark to pass to
	// WaitDurable, and durable true when they already are durable (or the
	// store promises no more than a write). On error nothing was added.
	AppendDeferred(frames []*Frame) (mark uint64, durable bool, err error)
	// WaitDurable returns once everything appended up to mark is durable,
	// with the store's durable mark then, at least mark. An error means
	// that mark, and every later one, will never be durable.
	WaitDurable(mark uint64) (durable uint64, err error)
}

// A KeyStore is a DeferredStore that can store a key with a batch, in the
// same write as its frames, so that after a crash both are there or
// neither (Batch.Key).
type KeyStore interface {
	DeferredStore
	// AppendKeyed is AppendDeferred that also stores value under key.
	AppendKeyed(frames []*Frame, key string, value []byte) (mark uint64, durable bool, err error)
}

// Errors a Store's Append may return, wrapped or not, that the layers above
// the bus answer in their own terms (the router maps them to HTTP statuses)
// without knowing which Store failed. Test for them with errors.Is.
var (
	// ErrDiskFull means the store's disk has no room left (ENOSPC,
	// EDQUOT): the append it refused left nothing behind, and reads go on.
	ErrDiskFull = errors.New("bus: store: disk full")
	// ErrStoreClosed means the store was closed (the daemon is shutting
	// down) or belongs to a deleted bus: nothing more can be appended.
	ErrStoreClosed = errors.New("bus: store: closed")
)

// Ring is a circular buffer of frames bounded by count and by bytes: O(1)
// append and evict, and O(1) location of a replay start, since retained ids
// are consecutive. It grows its backing array by doubling up to its count
// limit, so a bus that holds few events costs little memory. The zero value
// is not usable; call NewRing.
type Ring struct {
	buf      []*Frame // circular; len(buf) is the capacity
	head     int      // index of the oldest frame
	n        int
	bytes    int64
	firstID  uint64 // id of buf[head] when n > 0
	lastID   uint64
	maxLen   int
	maxBytes int64
}

// NewRing returns an empty ring retaining at most maxLen frames and maxBytes
// bytes. The newest frame is always retained, even when it alone exceeds
// maxBytes, so that a resuming client can see what the last id was.
func NewRing(maxLen int, maxBytes int64) *Ring {
	r := &Ring{}
	r.SetLimits(maxLen, maxBytes)
	return r
}

// Restore sets the id the ring continues from: the next frame appended must
// have id lastID+1. It is for a store that resumes an id sequence; it panics
// if the ring is not empty.
func (r *Ring) Restore(lastID uint64) {
	if r.n != 0 {
		panic("bus: Restore on a non-empty ring")
	}
	r.lastID = lastID
}

// Append implements Store. It never fails.
func (r *Ring) Append(frames []*Frame) error {
	for _, f := range frames {
		r.push(f)
	}
	return nil
}

func (r *Ring) push(f *Frame) {
	if r.n == r.maxLen {
		r.evict()
	}
	if r.n == len(r.buf) {
		r.grow()
	}
	if r.n == 0 {
		r.firstID = f.ID
	}
	r.buf[(r.head+r.n)%len(r.buf)] = f
	r.n++
	r.bytes += int64(f.Size())
	r.lastID = f.ID
	for r.bytes > r.maxBytes && r.n > 1 {
		r.evict()
	}
}

func (r *Ring) evict() {
	f := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	r.bytes -= int64(f.Size())
	r.firstID++
}

// grow doubles the backing array, up to maxLen.
func (r *Ring) grow() {
	c := 2 * len(r.buf)
	if c < 16 {
		c = 16
	}
	if c > r.maxLen {
		c = r.maxLen
	}
	r.resize(c)
}

func (r *Ring) resize(c int) {
	nb := make([]*Frame, c)
	for i := 0; i < r.n; i++ {
		nb[i] = r.buf[(r.head+i)%len(r.buf)]
	}
	r.buf, r.head = nb, 0
}

// LastID implements Store.
func (r *Ring) LastID() uint64 { return r.lastID }

// Earliest implements Store.
func (r *Ring) Earliest() uint64 {
	if r.n == 0 {
		return 0
	}
	return r.firstID
}

// Len implements Store.
func (r *Ring) Len() int { return r.n }

// Bytes implements Store.
func (r *Ring) Bytes() int64 { return r.bytes }

// Scan implements Store in O(1) to find the start.
func (r *Ring) Scan(from uint64, fn func(*Frame) bool) {
	if r.n == 0 {
		return
	}
	start := 0
	if from > r.firstID {
		if from-r.firstID >= uint64(r.n) {
			return
		}
		start = int(from - r.firstID)
	}
	for i := start; i < r.n; i++ {
		if !fn(r.buf[(r.head+i)%len(r.buf)]) {
			return
		}
	}
}

// SetLimits implements Store. Limits below 1 are raised to 1.
func (r *Ring) SetLimits(maxLen int, maxBytes int64) {
	if maxLen < 1 {
		maxLen = 1
	}
	if maxBytes < 1 {
		maxBytes = 1
	}
	r.maxLen, r.maxBytes = maxLen, maxBytes
	for r.n > maxLen || (r.bytes > maxBytes && r.n > 1) {
		r.evict()
	}
	if len(r.buf) > maxLen {
		r.resize(maxLen)
	}
}

// TrimTo implements Trimmer.
func (r *Ring) TrimTo(maxBytes int64, keep uint64) {
	for r.n > 1 && r.bytes > maxBytes && r.firstID < keep {
		r.evict()
	}
}
