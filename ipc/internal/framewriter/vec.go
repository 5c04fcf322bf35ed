package framewriter

import (
	"net"
	"syscall"
	"time"
)

// vecConn writes a list of buffers to a connection in as few system calls
// as it can: one writev(2) for up to 1024 buffers where the platform and
// the connection allow it, else one Write of their concatenation. Stream
// writers hand it the shared bytes of every queued frame, so a wake-up
// costs one system call and no copy.
type vecConn struct {
	net.Conn
	raw syscall.RawConn // nil: copy into one buffer
}

func newVecConn(c net.Conn) vecConn {
	v := vecConn{Conn: c}
	if canWritev {
		if sc, ok := c.(syscall.Conn); ok {
			if raw, err := sc.SyscallConn(); err == nil {
				v.raw = raw
			}
		}
	}
	return v
}

// writeBuffers writes every buffer in order, or fails. A write that has to
// wait for the peer to read fails after timeout. wb lends the scratch
// space (iovecs or the copy) so that nothing is allocated per call.
//
// A write that the socket takes at once sets no deadline: setting one
// costs two timer updates per wake-up, which a busy stream notices. The
// connection is left without a write deadline.
func (v vecConn) writeBuffers(bufs [][]byte, wb *Buf, timeout time.Duration) error {
	if v.raw == nil {
		b := wb.b[:0]
		for _, p := range bufs {
			b = append(b, p...)
		}
		wb.b = b
		v.Conn.SetWriteDeadline(time.Now().Add(timeout))
		_, err := v.Conn.Write(b)
		v.Conn.SetWriteDeadline(time.Time{})
		return err
	}
	return writev(v.raw, v.Conn, bufs, wb, timeout)
}

// totalLen is how many bytes bufs hold.
func totalLen(bufs [][]byte) int64 {
	var n int64
	for _, b := range bufs {
		n += int64(len(b))
	}
	return n
}
