package framewriter

import (
	"sync"

	"github.com/localbus/localbus/bus"
)

// Buf is a stream writer's scratch space for one wake-up: the frames it
// took (Frames, for bus.Subscription.Take), the buffers handed to writev,
// and the coalescing copy where writev is not used. Bufs are pooled, so an
// idle stream holds none: take one with GetBuf and give it back with
// PutBuf once the write returned.
type Buf struct {
	// Frames is the caller's: the frames of this wake-up.
	Frames []*bus.Frame

	bufs [][]byte
	vec  vecState
	b    []byte
	hdrs []byte // WebSocket frame headers
	hdr  [24]byte
}

var bufPool = sync.Pool{New: func() any { return new(Buf) }}

// Pool limits: a burst's larger scratch space is left to the garbage
// collector rather than kept.
const (
	maxPooledBuf    = 256 << 10
	maxPooledFrames = 4096
)

// GetBuf takes a Buf from the pool.
func GetBuf() *Buf { return bufPool.Get().(*Buf) }

// PutBuf returns wb to the pool, dropping its pointers to frames.
func PutBuf(wb *Buf) {
	if cap(wb.b) > maxPooledBuf || cap(wb.Frames) > maxPooledFrames || cap(wb.bufs) > 2*maxPooledFrames+4 {
		return
	}
	clear(wb.Frames)
	clear(wb.bufs)
	wb.b, wb.Frames, wb.bufs = wb.b[:0], wb.Frames[:0], wb.bufs[:0]
	bufPool.Put(wb)
}
