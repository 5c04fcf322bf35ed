package ipc

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"time"
)

// wsHijacker is the ResponseWriter handed to websocket.Accept. Its Hijack
// takes the connection from net/http and gives coder/websocket a wsConn
// over it, with small buffers: net/http's 4 KiB reader and writer stay
// with the request, which ends once the stream runs on its own.
type wsHijacker struct {
	http.ResponseWriter
	conn *wsConn // set by Hijack
}

// Buffer sizes of the coder/websocket side of a wsConn. The writer's is
// the smallest bufio allows that holds a frame header, so a message goes
// through to wsConn almost at once (wsConn batches); the reader's holds a
// typical control frame.
const (
	wsWriteBuffer = 16
	wsReadBuffer  = 512
)

// Hijack implements http.Hijacker.
func (w *wsHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	wc := &wsConn{Conn: conn}
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

// wsConn is the connection coder/websocket writes to. Between begin and
// end (a batch: the writer sending what it took from its queue) writes
// are gathered in a pooled buffer, which end sends in one write; outside a
// batch (pings, pongs, close frames, replies) they pass straight through.
// coder/websocket flushes each message, so without this every frame
// would cost a system call.
type wsConn struct {
	net.Conn
	pending []byte // read before the connection: only the reading goroutine uses it

	mu       sync.Mutex // guards the fields below; held across writes to Conn, so they stay in order
	batching bool
	deadline time.Time // the batch's write deadline
	wb       *writeBuf // the batch's buffer, in wb.b
}

// wsFlushAt is the size at which a batch is written out before it ends,
// so that a long replay does not gather megabytes.
const wsFlushAt = 256 << 10

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

// Write implements net.Conn.
func (c *wsConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.batching {
		return c.Conn.Write(p)
	}
	c.wb.b = append(c.wb.b, p...)
	if len(c.wb.b) >= wsFlushAt {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// begin starts a batch whose writes must be done by deadline.
func (c *wsConn) begin(deadline time.Time) {
	c.mu.Lock()
	c.batching, c.deadline, c.wb = true, deadline, getWriteBuf()
	c.mu.Unlock()
}

// end writes what the batch gathered and ends it.
func (c *wsConn) end() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.flushLocked()
	putWriteBuf(c.wb)
	c.batching, c.wb = false, nil
	return err
}

func (c *wsConn) flushLocked() error {
	if len(c.wb.b) == 0 {
		return nil
	}
	c.Conn.SetWriteDeadline(c.deadline)
	_, err := c.Conn.Write(c.wb.b)
	// Writes outside a batch keep their own timeouts (coder/websocket
	// closes the connection when their context ends).
	c.Conn.SetWriteDeadline(time.Time{})
	c.wb.b = c.wb.b[:0]
	return err
}
