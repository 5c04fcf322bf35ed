package ipc

import (
	"errors"
	"io"
	"net/http"
	"sync"

	"github.com/localbus/localbus/ipc/wire"
)

// Request bodies (SPEC §2, memory budget): a body larger than
// max_body_bytes is refused with 413 before any of it is read when its
// Content-Length says so, and the bodies being read at once share
// max_inflight_body_bytes: a request that would pass it is refused with
// 503 busy and Retry-After, so that many large requests at once cannot
// take the daemon's memory.

// errBusy refuses a body past the in-flight budget.
var errBusy = errorf(http.StatusServiceUnavailable, wire.CodeBusy, "the daemon is reading as many request bodies as it allows at once; retry shortly")

// reserveBody takes n bytes of the in-flight body budget and reports
// whether it could: a body is always allowed when no other is in flight.
func (h *Handler) reserveBody(n int64) bool {
	limit := h.options().MaxInflightBodyBytes
	for {
		cur := h.inflight.Load()
		if cur > 0 && cur+n > limit {
			return false
		}
		if h.inflight.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// releaseBody gives n bytes back to the in-flight budget.
func (h *Handler) releaseBody(n int64) { h.inflight.Add(-n) }

// bodyPool keeps publish bodies' buffers, up to maxPooledBody each: a
// batch of a thousand events is a few hundred KiB, which io.ReadAll would
// grow by doubling and leave to the collector on every request.
var bodyPool sync.Pool

const maxPooledBody = 1 << 20

// A body is a request body read whole under the in-flight budget; done
// returns its buffer and its share of the budget.
type body struct {
	b        []byte
	reserved int64
	h        *Handler
}

func (b *body) done() {
	b.h.releaseBody(b.reserved)
	b.reserved = 0
	if buf := b.b; buf != nil && cap(buf) <= maxPooledBody {
		bodyPool.Put(&buf)
	}
	b.b = nil
}

// readBody reads a request body of at most limit bytes, under the
// in-flight budget. The caller calls done on the body it returns, once
// nothing refers to its bytes.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, limit int64) (*body, error) {
	if r.ContentLength > limit {
		w.Header().Set("Connection", "close")
		return nil, errorf(http.StatusRequestEntityTooLarge, wire.CodeBodyTooLarge, "request body of %d bytes; at most %d", r.ContentLength, limit)
	}
	rd := http.MaxBytesReader(w, r.Body, limit)
	bd := &body{h: h}
	if r.ContentLength < 0 {
		// Unknown length: the budget is taken as the bytes arrive.
		b, err := io.ReadAll(&budgetReader{r: rd, bd: bd})
		if err != nil {
			bd.done()
			if errors.Is(err, errBusy) {
				w.Header().Set("Connection", "close")
			}
			return nil, err
		}
		bd.b = b
		return bd, nil
	}
	if !h.reserveBody(r.ContentLength) {
		w.Header().Set("Connection", "close")
		return nil, errBusy
	}
	bd.reserved = r.ContentLength
	if r.ContentLength > maxPooledBody {
		bd.b = make([]byte, r.ContentLength)
	} else if p, ok := bodyPool.Get().(*[]byte); ok && cap(*p) >= int(r.ContentLength) {
		bd.b = (*p)[:r.ContentLength]
	} else {
		bd.b = make([]byte, r.ContentLength, max(r.ContentLength, 64<<10))
	}
	if _, err := io.ReadFull(rd, bd.b); err != nil {
		bd.done()
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = errorf(http.StatusBadRequest, wire.CodeInvalidBody, "the body is shorter than its Content-Length")
		}
		return nil, err
	}
	// Anything past Content-Length: net/http reports it as the end of the
	// body, which is all a well-formed request has.
	return bd, nil
}

// budgetReader takes the in-flight budget for each read of a body of
// unknown length.
type budgetReader struct {
	r  io.Reader
	bd *body
}

func (br *budgetReader) Read(p []byte) (int, error) {
	n, err := br.r.Read(p)
	if n > 0 {
		if !br.bd.h.reserveBody(int64(n)) {
			return 0, errBusy
		}
		br.bd.reserved += int64(n)
	}
	return n, err
}
