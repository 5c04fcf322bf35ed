package framewriter

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/localbus/localbus/bus"
)

// WS writes a WebSocket stream (SPEC §3.3): one text message per frame.
// coder/websocket runs the protocol (the handshake, reading the client's
// frames, pings, pongs, the close handshake) over a wsConn, and the
// messages go out through the same wsConn without it (see wsConn).
type WS struct {
	c       *websocket.Conn
	conn    *wsConn
	timeout time.Duration
}

// EndSubscriberLimit is the reason to Close a stream whose subscription
// was refused: close code 1013, "subscriber limit".
const EndSubscriberLimit bus.EndReason = "subscriber_limit"

// AcceptWS upgrades the request with opts and takes the connection over
// from net/http. On error the request was answered (see websocket.Accept).
// A write that waits for the peer fails after timeout.
func AcceptWS(w http.ResponseWriter, r *http.Request, opts *websocket.AcceptOptions, timeout time.Duration) (*WS, error) {
	hw := &wsHijacker{ResponseWriter: w}
	c, err := websocket.Accept(hw, r, opts)
	if err != nil {
		return nil, err
	}
	if hw.conn == nil {
		// Accept took the connection some other way: nothing would keep
		// its frames and ours apart.
		c.CloseNow()
		return nil, errors.New("framewriter: websocket.Accept did not hijack through the ResponseWriter given")
	}
	return &WS{c: c, conn: hw.conn, timeout: timeout}, nil
}

// Conn is the coder/websocket connection, for reading the client's
// frames. Messages must go out through Write, never Conn's writers.
func (s *WS) Conn() *websocket.Conn { return s.c }

// Write implements Writer: every frame, then msg, as text messages.
func (s *WS) Write(wb *Buf, frames []*bus.Frame, msg []byte, _ bool) error {
	return s.conn.writeText(frames, msg, wb, s.timeout)
}

// Written implements Writer.
func (s *WS) Written() int64 { return s.conn.written.Load() }

// Ping implements Writer with coder/websocket's ping: it returns once the
// pong arrived, or fails when ctx ends first.
func (s *WS) Ping(ctx context.Context) error { return s.c.Ping(ctx) }

// Close implements Writer: the close handshake with the code and reason
// of SPEC §3.3 unless reason is bus.EndNone, then the connection is closed.
func (s *WS) Close(reason bus.EndReason) {
	if reason != bus.EndNone {
		code, text := closeFor(reason)
		s.c.Close(code, text)
	}
	s.c.CloseNow()
}

// closeFor maps why a subscription ended to the WebSocket close code and
// reason (SPEC §3.3); the same reason went in-band as the terminal frame.
func closeFor(end bus.EndReason) (websocket.StatusCode, string) {
	switch end {
	case bus.EndLagged:
		return websocket.StatusTryAgainLater, "lagged"
	case bus.EndSessionDeleted:
		return websocket.StatusNormalClosure, "session deleted"
	case bus.EndShutdown:
		return websocket.StatusGoingAway, "shutdown"
	case bus.EndReload:
		return websocket.StatusGoingAway, "reload"
	case EndSubscriberLimit:
		return websocket.StatusTryAgainLater, "subscriber limit"
	case bus.EndReplaced:
		return websocket.StatusNormalClosure, "replaced"
	}
	return websocket.StatusNormalClosure, ""
}

// wsHijacker is the ResponseWriter handed to websocket.Accept. Its Hijack
// takes the connection from net/http and gives coder/websocket a wsConn
// over it, with small buffers: net/http's 4 KiB reader and writer stay
// with the request, which ends once the stream runs on its own.
type wsHijacker struct {
	http.ResponseWriter
	conn *wsConn // set by Hijack
}

// Buffer sizes of the coder/websocket side of a wsConn. The writer's
// holds any control frame whole (a 2-byte header and at most 125 bytes),
// so each frame coder/websocket writes reaches wsConn in one Write; the
// reader's holds a typical control frame from the client.
const (
	wsWriteBuffer = 256
	wsReadBuffer  = 512
)

// Hijack implements http.Hijacker.
func (w *wsHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	wc := &wsConn{Conn: conn, vc: newVecConn(conn)}
	if n := brw.Reader.Buffered(); n > 0 {
		// What the client sent right after its upgrade request.
		p, _ := brw.Reader.Peek(n)
		wc.pending = append([]byte(nil), p...)
	}
	w.conn = wc
	return wc, bufio.NewReadWriter(bufio.NewReaderSize(wc, wsReadBuffer), bufio.NewWriterSize(wc, wsWriteBuffer)), nil
}

// Unwrap lets http.ResponseController reach the ResponseWriter beneath.
func (w *wsHijacker) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// wsConn is the connection under a coder/websocket Conn. coder/websocket
// handles the handshake, the client's frames, pings, pongs and the close
// handshake, and writes only control frames, each in one Write. The
// stream writer sends text messages itself with writeText: every queued
// frame of a wake-up in one writev, the frame headers it builds and the
// envelopes' shared bytes, where coder/websocket would copy and flush each
// message on its own. mu keeps the two writers' frames whole and in order.
type wsConn struct {
	net.Conn
	vc      vecConn
	pending []byte // read past the upgrade request: only the reading goroutine uses it

	mu        sync.Mutex // held across every write to Conn
	closeSent bool       // a close frame went out: no message may follow
	written   atomic.Int64
}

// Read implements net.Conn, returning what was read past the upgrade
// request first.
func (c *wsConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		if len(c.pending) == 0 {
			c.pending = nil
		}
		return n, nil
	}
	return c.Conn.Read(p)
}

// Write implements net.Conn for coder/websocket's frames.
func (c *wsConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(p) > 0 && p[0]&0x0f == wsOpClose {
		c.closeSent = true
	}
	return c.Conn.Write(p)
}

// WebSocket opcodes (RFC 6455 §5.2).
const (
	wsOpText  = 0x1
	wsOpClose = 0x8
	wsFin     = 0x80
)

// appendTextHeader appends the header of an unmasked, final text frame of
// n bytes.
func appendTextHeader(dst []byte, n int) []byte {
	switch {
	case n < 126:
		return append(dst, wsFin|wsOpText, byte(n))
	case n < 1<<16:
		return binary.BigEndian.AppendUint16(append(dst, wsFin|wsOpText, 126), uint16(n))
	}
	return binary.BigEndian.AppendUint64(append(dst, wsFin|wsOpText, 127), uint64(n))
}

// writeText sends text messages, one final frame each: every frame's
// envelope, then msg if it is not nil, with as few system calls as writev
// allows; a write that waits for the peer fails after timeout. It fails
// with net.ErrClosed once a close frame was sent. wb lends the scratch
// space: the headers go in wb.hdrs.
func (c *wsConn) writeText(frames []*bus.Frame, msg []byte, wb *Buf, timeout time.Duration) error {
	n := len(frames)
	if msg != nil {
		n++
	}
	if n == 0 {
		return nil
	}
	// The headers go in one buffer that does not move while bufs points
	// into it: at most 10 bytes each.
	hdrs := wb.hdrs[:0]
	if cap(hdrs) < 10*n {
		hdrs = make([]byte, 0, 10*n)
	}
	bufs := wb.bufs[:0]
	add := func(p []byte) {
		start := len(hdrs)
		hdrs = appendTextHeader(hdrs, len(p))
		bufs = append(bufs, hdrs[start:len(hdrs):len(hdrs)], p)
	}
	for _, f := range frames {
		add(f.JSON())
	}
	if msg != nil {
		add(msg)
	}
	wb.hdrs, wb.bufs = hdrs, bufs
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closeSent {
		return net.ErrClosed
	}
	if err := c.vc.writeBuffers(bufs, wb, timeout); err != nil {
		return err
	}
	c.written.Add(totalLen(bufs))
	return nil
}
