package ipc

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/localbus/localbus/bus"
)

var (
	sseRetry = []byte("retry: " + strconv.Itoa(RetryMs) + "\n\n")
	ssePing  = []byte(": ping\n\n")
)

// writeBuf is a stream writer's coalescing buffer. Buffers are pooled, so an
// idle stream holds none.
type writeBuf struct {
	b      []byte
	frames []*bus.Frame
}

var writeBufPool = sync.Pool{New: func() any { return &writeBuf{b: make([]byte, 0, 16<<10)} }}

// maxPooledBuf is the largest buffer returned to the pool; a burst's larger
// buffer is left to the garbage collector.
const maxPooledBuf = 256 << 10

func getWriteBuf() *writeBuf { return writeBufPool.Get().(*writeBuf) }

func putWriteBuf(wb *writeBuf) {
	if cap(wb.b) > maxPooledBuf || cap(wb.frames) > 4096 {
		return
	}
	clear(wb.frames)
	wb.b, wb.frames = wb.b[:0], wb.frames[:0]
	writeBufPool.Put(wb)
}

// setSSEHeaders sets the response headers of an SSE stream (SPEC §3.2).
func setSSEHeaders(hd http.Header) {
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no")
}

// runSSE serves a stream as Server-Sent Events (SPEC §3.2). sub is nil when
// the subscription was refused, and refusal is then the terminal frame to
// send. Each wake-up writes every queued frame in one write and one flush.
func (h *Handler) runSSE(w http.ResponseWriter, r *http.Request, sub *bus.Subscription, refusal *bus.Frame) {
	o := h.options()
	rc := http.NewResponseController(w)
	setSSEHeaders(w.Header())
	w.WriteHeader(http.StatusOK)
	if sub == nil {
		w.Write(sseRetry)
		w.Write(refusal.SSE())
		rc.Flush()
		return
	}

	write := func(p []byte) bool {
		rc.SetWriteDeadline(time.Now().Add(o.WriteTimeout))
		if _, err := w.Write(p); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	keepalive := time.NewTimer(o.Keepalive)
	defer keepalive.Stop()
	first := true
	ctx := r.Context()
	for {
		wb := getWriteBuf()
		var ended bool
		wb.frames, ended = sub.Take(wb.frames)
		if first {
			wb.b = append(wb.b, sseRetry...)
			first = false
		}
		for _, f := range wb.frames {
			wb.b = append(wb.b, f.SSE()...)
		}
		ok := len(wb.b) == 0 || write(wb.b)
		n := len(wb.b)
		putWriteBuf(wb)
		if !ok || ended {
			return
		}
		if n > 0 {
			keepalive.Reset(o.Keepalive)
		}
		select {
		case <-sub.Ready():
		case <-keepalive.C:
			if !write(ssePing) {
				return
			}
			keepalive.Reset(o.Keepalive)
		case <-ctx.Done():
			return
		}
	}
}
