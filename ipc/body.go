package ipc

import (
	"errors"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/localbus/localbus/bus/share"
	"github.com/localbus/localbus/ipc/wire"
)

// Request bodies (SPEC §2, memory budget and fair shares): a body larger
// than max_body_bytes is refused with 413 before any of it is read when its
// Content-Length says so. The bodies being read at once share
// max_inflight_body_bytes, a pool with fair shares (PoolBodyBytes): each
// byte counts on its peer's account once it is read, never before (a
// declared Content-Length reserves nothing), and a read that would pass the
// peer's share, or the pool, is refused with 503 busy and Retry-After. A
// body larger than the peer's share on its own is a 413 instead: it could
// never fit. A whole body must also keep coming: one slower than 64 KiB/s,
// averaged over each 5 s after its first 5 s, is cut with 408
// body_too_slow (a streaming publish, which may wait for its next line,
// is held to the idle limit instead).

// PoolBodyBytes names the pool of request body bytes being read, in
// refusals and metrics.
const PoolBodyBytes = "body_bytes"

// The slow-body rule: after its first window, every window of a body must
// bring at least minBodyRate bytes a second.
const (
	// DefaultSlowBodyWindow is Options.SlowBodyWindow's default.
	DefaultSlowBodyWindow = 5 * time.Second
	minBodyRate           = 64 << 10
)

// busyError refuses a body read past the in-flight pool or the peer's
// share of it (r, nil for the no-shares case of a pool full of privileged
// bodies).
func busyError(r *share.Refusal) *Error {
	e := errorf(http.StatusServiceUnavailable, wire.CodeBusy, "the daemon is reading as many request bodies as it allows at once; retry shortly")
	if r != nil && r.Kind == share.ByShare {
		e = errorf(http.StatusServiceUnavailable, wire.CodeBusy, "this peer's request bodies being read hold its share of the daemon's budget (%d bytes); retry once they are done", r.Limit)
	}
	e.refusal = r
	return e
}

// bodyAccount returns c's account of the in-flight body bytes.
func (h *Handler) bodyAccount(c Caller) *share.Account { return h.bodies.Account(c.Share) }

// bodyPool keeps publish bodies' buffers, up to maxPooledBody each: a
// batch of a thousand events is a few hundred KiB, which io.ReadAll would
// grow by doubling and leave to the collector on every request.
var bodyPool sync.Pool

const maxPooledBody = 1 << 20

// A body is a request body read whole, its bytes on its peer's account of
// the in-flight pool; done gives back its buffer and its bytes.
type body struct {
	b    []byte
	acct *share.Account
	held int64   // bytes on acct
	box  *[]byte // what bodyPool gave, to give b back in
}

func (b *body) done() {
	if b.acct != nil {
		b.acct.Release(b.held)
	}
	b.held = 0
	if buf := b.b; buf != nil && cap(buf) <= maxPooledBody {
		if b.box == nil {
			b.box = new([]byte)
		}
		*b.box = buf[:0]
		bodyPool.Put(b.box)
	}
	b.b, b.box = nil, nil
}

// take counts n more bytes of the body on its account, or refuses them.
func (b *body) take(n int64) error {
	if err := b.acct.Acquire(n); err != nil {
		var r *share.Refusal
		errors.As(err, &r)
		return busyError(r)
	}
	b.held += n
	return nil
}

// readBody reads the request body of caller c, of at most limit bytes
// (and at most c's share of the in-flight pool), counting its bytes as
// they arrive, under the slow-body rule. The caller calls done on the body
// it returns, once nothing refers to its bytes.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, c Caller, limit int64) (*body, error) {
	bd := &body{acct: h.bodyAccount(c)}
	own := bd.acct.Limit()
	if r.ContentLength > limit || (r.ContentLength > own && own < limit) {
		w.Header().Set("Connection", "close")
		return nil, tooLarge(r.ContentLength, limit, own)
	}
	limit = min(limit, max(own, 1))
	rd := &bodyReader{r: r.Body}
	rd.guarded = h.slowGuard(&rd.slow, w, r)
	if r.ContentLength < 0 || r.ContentLength > limit {
		// Of a length not known: cut it at the limit. (A known length
		// within it cannot pass it: the body ends there.)
		rd.r = http.MaxBytesReader(w, r.Body, limit)
	}
	var err error
	if r.ContentLength > 0 && r.ContentLength <= maxPooledBody {
		if p, ok := bodyPool.Get().(*[]byte); ok && cap(*p) >= int(r.ContentLength) {
			bd.b, bd.box = (*p)[:0], p
		}
	}
	if bd.b == nil {
		size := int64(64 << 10)
		if r.ContentLength >= 0 {
			size = min(max(r.ContentLength, 512), maxPooledBody)
		}
		bd.b = make([]byte, 0, size)
	}
	bd.b, err = rd.readAll(bd, bd.b, r.ContentLength)
	if err != nil {
		bd.done()
		var e *Error
		if errors.As(err, &e) && (e.Code == wire.CodeBusy || e.Code == wire.CodeBodyTooSlow) {
			w.Header().Set("Connection", "close")
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = errorf(http.StatusBadRequest, wire.CodeInvalidBody, "the body is shorter than its Content-Length")
		}
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) && mbe.Limit < h.options().MaxBodyBytes {
			err = tooLarge(-1, h.options().MaxBodyBytes, own)
		}
		return nil, err
	}
	if g := &rd.slow; rd.guarded && !g.deadline.Equal(g.timeout) {
		// Read whole: the slow-body rule is done, and a window's deadline
		// must not cut the connection while the request is answered.
		g.setReadDeadline(g.timeout)
	}
	return bd, nil
}

// tooLarge refuses a body of n bytes (-1: its length is not known) past
// limit, or past a peer's share of the in-flight pool, own.
func tooLarge(n, limit, own int64) *Error {
	if own < limit {
		if n < 0 {
			return errorf(http.StatusRequestEntityTooLarge, wire.CodeBodyTooLarge, "request body larger than %d bytes, this peer's share of the bodies the daemon reads at once (peer_share)", own)
		}
		return errorf(http.StatusRequestEntityTooLarge, wire.CodeBodyTooLarge, "request body of %d bytes; at most %d for this peer, its share of the bodies the daemon reads at once (peer_share)", n, own)
	}
	return errorf(http.StatusRequestEntityTooLarge, wire.CodeBodyTooLarge, "request body of %d bytes; at most %d", n, limit)
}

// bodyReader reads a whole body into a buffer that grows as its bytes
// arrive, counting each read on the body's account.
type bodyReader struct {
	r       io.Reader
	slow    slowGuard
	guarded bool // slow applies (false: the connection has no deadlines)
}

// readAll appends the body to buf: want bytes when want ≥ 0 (a shorter
// body is io.ErrUnexpectedEOF), else up to its end.
func (br *bodyReader) readAll(bd *body, buf []byte, want int64) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			grow := max(cap(buf), 512)
			if want >= 0 {
				grow = int(min(int64(grow), want-int64(len(buf))))
				if grow == 0 {
					return buf, nil // all of Content-Length: anything past it is not the body
				}
			}
			buf = slices.Grow(buf, grow)
		}
		n, err := br.r.Read(buf[len(buf):cap(buf)])
		if n > 0 {
			if terr := bd.take(int64(n)); terr != nil {
				return buf, terr
			}
			buf = buf[:len(buf)+n]
		}
		if br.guarded {
			if serr := br.slow.check(n, err); serr != nil {
				return buf, serr
			}
		}
		switch {
		case err == io.EOF && want >= 0 && int64(len(buf)) < want:
			return buf, io.ErrUnexpectedEOF
		case err == io.EOF:
			return buf, nil
		case err != nil:
			return buf, err
		}
	}
}

// slowGuard applies the slow-body rule to one body with its connection's
// read deadline: window 0 (the first Options.SlowBodyWindow once the
// headers arrived) asks nothing; each window after it must bring
// minBodyRate bytes a second. The deadline is the end of the first window
// not yet satisfied (or the body timeout's, if sooner), so a read blocked
// past it is a window that failed.
type slowGuard struct {
	w        http.ResponseWriter
	start    time.Time
	window   time.Duration
	need     int64     // bytes a window must bring
	timeout  time.Time // the body timeout's deadline; zero for none
	cur      int       // the window bytes are counted for
	got      int64     // bytes of window cur
	deadline time.Time // the read deadline set; it cuts a slow body when before timeout
}

// slowGuard sets g to the guard of r's body and reports whether it has
// one: false when its connection has no read deadlines to enforce it
// with.
func (h *Handler) slowGuard(g *slowGuard, w http.ResponseWriter, r *http.Request) bool {
	tb, ok := r.Body.(*timedBody)
	if !ok {
		return false
	}
	win := h.options().SlowBodyWindow
	*g = slowGuard{
		w: w, start: tb.start, window: win, timeout: tb.deadline, deadline: tb.deadline,
		need: int64(win.Seconds() * minBodyRate),
	}
	g.arm(time.Now())
	return true
}

// setReadDeadline sets the connection's read deadline.
func (g *slowGuard) setReadDeadline(d time.Time) { setReadDeadline(g.w, d) }

// arm sets the read deadline for the window after the last satisfied one.
func (g *slowGuard) arm(now time.Time) {
	w := g.cur + 1
	if g.cur == 0 || g.got >= g.need {
		w = g.cur + 2 // cur is satisfied: the next one must be by its end
	}
	d := g.start.Add(time.Duration(w) * g.window)
	if !g.timeout.IsZero() && g.timeout.Before(d) {
		d = g.timeout
	}
	if !d.Equal(g.deadline) {
		g.deadline = d
		g.setReadDeadline(d)
	}
}

// check counts a read of n bytes that returned err, and returns the 408
// body_too_slow error when the body broke the rule.
func (g *slowGuard) check(n int, err error) error {
	now := time.Now()
	w := int(now.Sub(g.start) / g.window)
	if w > g.cur {
		// A window ended: the one counted, and any skipped, must have
		// been satisfied (window 0 needs nothing).
		if (g.cur > 0 && g.got < g.need) || w > g.cur+1 {
			return g.tooSlow()
		}
		g.cur, g.got = w, 0
	}
	if g.cur > 0 {
		g.got += int64(n)
	}
	if isTimeout(err) {
		if g.timeout.IsZero() || g.deadline.Before(g.timeout) {
			return g.tooSlow()
		}
		return nil // the body timeout's: timedBody's error stands
	}
	if err == nil {
		g.arm(now)
	}
	return nil
}

func (g *slowGuard) tooSlow() error {
	return errorf(http.StatusRequestTimeout, wire.CodeBodyTooSlow, "the request body came slower than %d KiB/s over %v", minBodyRate>>10, g.window)
}

// isTimeout reports whether err is a read that hit the connection's read
// deadline (timedBody reports it as body_timeout).
func isTimeout(err error) bool {
	if err == nil || err == io.EOF {
		return false
	}
	var e *Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &e) && e.Code == wire.CodeBodyTimeout
}
