package ipc

import (
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/localbus/localbus/bus"
)

var (
	sseRetry = []byte("retry: " + strconv.Itoa(RetryMs) + "\n\n")
	ssePing  = []byte(": ping\n\n")
	crlf     = []byte("\r\n")
	// lastChunk ends a chunked body: the zero-length chunk and no trailer.
	lastChunk = []byte("0\r\n\r\n")
)

// writeBuf is a stream writer's scratch space for one wake-up: the frames
// it took, the buffers it hands to writev, and the coalescing copy where
// writev is not used. Buffers are pooled, so an idle stream holds none.
type writeBuf struct {
	frames []*bus.Frame
	bufs   [][]byte
	vec    vecState
	b      []byte
	hdrs   []byte // WebSocket frame headers
	hdr    [24]byte
}

var writeBufPool = sync.Pool{New: func() any { return new(writeBuf) }}

// Pool limits: a burst's larger scratch space is left to the garbage
// collector rather than kept.
const (
	maxPooledBuf    = 256 << 10
	maxPooledFrames = 4096
)

func getWriteBuf() *writeBuf { return writeBufPool.Get().(*writeBuf) }

func putWriteBuf(wb *writeBuf) {
	if cap(wb.b) > maxPooledBuf || cap(wb.frames) > maxPooledFrames || cap(wb.bufs) > 2*maxPooledFrames+4 {
		return
	}
	clear(wb.frames)
	clear(wb.bufs)
	wb.b, wb.frames, wb.bufs = wb.b[:0], wb.frames[:0], wb.bufs[:0]
	writeBufPool.Put(wb)
}

// setSSEHeaders sets the response headers of an SSE stream (SPEC §3.2).
func setSSEHeaders(hd http.Header) {
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no")
}

// runSSE serves a stream as Server-Sent Events (SPEC §3.2) and calls done
// once the stream is over. sub is nil when the subscription was refused,
// and refusal is then the terminal frame to send.
//
// On an HTTP/1 connection it takes the connection over from net/http and
// returns at once, leaving the stream to a goroutine of its own (see
// sseConn), so that the server's per-connection buffers and goroutine are
// released while the stream lasts; done is called from that goroutine.
// Elsewhere it streams through the ResponseWriter until the stream ends.
func (h *Handler) runSSE(w http.ResponseWriter, r *http.Request, sub *bus.Subscription, refusal *bus.Frame, done func()) {
	o := h.options()
	setSSEHeaders(w.Header())
	if sub != nil && r.ProtoMajor == 1 {
		s, err := hijackSSE(w, r)
		if err == nil {
			go func() {
				defer done()
				s.serve(sub, o)
			}()
			return
		}
		if !errors.Is(err, http.ErrNotSupported) {
			done()
			return
		}
	}
	defer done()
	h.streamSSE(w, r, sub, refusal, o)
}

// streamSSE is the stream through net/http: each wake-up writes every
// queued frame in one write and one flush.
func (h *Handler) streamSSE(w http.ResponseWriter, r *http.Request, sub *bus.Subscription, refusal *bus.Frame, o *Options) {
	rc := http.NewResponseController(w)
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

// sseConn is an SSE stream on a connection taken over from net/http. Its
// writer sends each wake-up's frames as one chunk with one writev: the
// chunk header, every frame's shared bytes (no copy), the chunk's CRLF.
// A second goroutine reads the connection only to notice the client
// leaving, as net/http's background read would, and then closes the
// subscription, so the writer waits on the queue and the keepalive alone.
type sseConn struct {
	conn    vecConn
	head    []byte // the response head, sent with the first chunk
	chunked bool   // HTTP/1.1: a chunked body; HTTP/1.0: the body ends at close
	gone    chan struct{}
}

// hijackSSE takes the connection over and prepares the response head:
// the headers set on w, Date, and Connection: close, since the connection
// cannot go back to net/http for another request after the stream.
// Anything the client sent after its request is ignored.
func hijackSSE(w http.ResponseWriter, r *http.Request) (*sseConn, error) {
	chunked := r.ProtoAtLeast(1, 1)
	head := make([]byte, 0, 256)
	if chunked {
		head = append(head, "HTTP/1.1 200 OK\r\n"...)
	} else {
		head = append(head, "HTTP/1.0 200 OK\r\n"...)
	}
	hd := w.Header().Clone()
	hd.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	hd.Set("Connection", "close")
	if chunked {
		hd.Set("Transfer-Encoding", "chunked")
	}
	hw := headerWriter{b: head}
	hd.Write(&hw)
	head = append(hw.b, "\r\n"...)

	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, err
	}
	return &sseConn{conn: newVecConn(conn), head: head, chunked: chunked, gone: make(chan struct{})}, nil
}

// headerWriter collects http.Header.Write's output.
type headerWriter struct{ b []byte }

func (hw *headerWriter) Write(p []byte) (int, error) {
	hw.b = append(hw.b, p...)
	return len(p), nil
}

// serve writes the stream until it ends, the client leaves or a write
// fails, then closes the connection.
func (s *sseConn) serve(sub *bus.Subscription, o *Options) {
	go s.watch(sub)
	defer func() {
		s.conn.Close()
		<-s.gone
	}()
	keepalive := newKeepalive(o.Keepalive)
	defer keepalive.stop()
	first := true
	for {
		wb := getWriteBuf()
		var ended bool
		wb.frames, ended = sub.Take(wb.frames)
		n := len(wb.frames)
		err := s.write(wb, first, ended, nil, o.WriteTimeout)
		putWriteBuf(wb)
		if err != nil || ended {
			return
		}
		if n > 0 || first {
			keepalive.wrote()
		}
		first, s.head = false, nil
		select {
		case <-sub.Ready():
		case <-keepalive.C():
			if !keepalive.due() {
				continue
			}
			wb := getWriteBuf()
			err := s.write(wb, false, false, ssePing, o.WriteTimeout)
			putWriteBuf(wb)
			if err != nil {
				return
			}
			keepalive.wrote()
		}
	}
}

// keepalive times the pings of a quiet stream: one every interval of
// silence. Writes only note their time; the timer is moved when it fires
// early, not on every write, which would cost a timer update per wake-up.
type keepalive struct {
	t        *time.Timer
	interval time.Duration
	last     time.Time
}

func newKeepalive(interval time.Duration) *keepalive {
	return &keepalive{t: time.NewTimer(interval), interval: interval, last: time.Now()}
}

func (k *keepalive) C() <-chan time.Time { return k.t.C }
func (k *keepalive) stop()               { k.t.Stop() }

// wrote notes that the stream just sent something.
func (k *keepalive) wrote() { k.last = time.Now() }

// due reports, after the timer fired, whether a ping is due; if not, it
// sets the timer for the end of the current silence. When a ping is due
// the timer is set for the next interval.
func (k *keepalive) due() bool {
	if quiet := time.Since(k.last); quiet < k.interval {
		k.t.Reset(k.interval - quiet)
		return false
	}
	k.t.Reset(k.interval)
	return true
}

// write sends one chunk: the head and retry: line first, then extra or
// the frames in wb, then the last chunk when the stream ended.
func (s *sseConn) write(wb *writeBuf, first, ended bool, extra []byte, timeout time.Duration) error {
	size := len(extra)
	if first {
		size += len(sseRetry)
	}
	for _, f := range wb.frames {
		size += len(f.SSE())
	}
	bufs := wb.bufs[:0]
	if first {
		bufs = append(bufs, s.head)
	}
	if s.chunked && size > 0 {
		hdr := strconv.AppendInt(wb.hdr[:0], int64(size), 16)
		bufs = append(bufs, append(hdr, '\r', '\n'))
	}
	if first {
		bufs = append(bufs, sseRetry)
	}
	if extra != nil {
		bufs = append(bufs, extra)
	}
	for _, f := range wb.frames {
		bufs = append(bufs, f.SSE())
	}
	if s.chunked {
		if size > 0 {
			bufs = append(bufs, crlf)
		}
		if ended {
			bufs = append(bufs, lastChunk)
		}
	}
	wb.bufs = bufs
	if len(bufs) == 0 {
		return nil
	}
	return s.conn.writeBuffers(bufs, wb, timeout)
}

// watch reads the connection until the client closes it (or shuts down
// its side), or serve closes it; then it closes the subscription, which
// wakes the writer to end the stream (and frees the subscriber's place at
// once), and closes gone.
func (s *sseConn) watch(sub *bus.Subscription) {
	defer close(s.gone)
	buf := make([]byte, 64)
	for {
		if _, err := s.conn.Read(buf); err != nil {
			sub.Close()
			return
		}
	}
}
