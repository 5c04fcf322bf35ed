package framewriter

import (
	"net"
	"syscall"
	"time"
	"unsafe"
)

const canWritev = true

// maxIovecs is IOV_MAX on Linux: the most buffers one writev takes.
const maxIovecs = 1024

// vecState is writev's scratch space, kept in a pooled Buf so that a
// write allocates nothing: the iovecs, the progress through bufs, and the
// callbacks for syscall.RawConn.Write, bound once.
type vecState struct {
	iov         []syscall.Iovec
	bufs        [][]byte
	done, total int
	full        bool // the socket took less than everything
	err         error
	step, try   func(fd uintptr) bool
}

// writev writes bufs with writev(2), resuming after partial writes. The
// first attempt sets no deadline and stops when the socket is full; only
// then does it set the write deadline (timeout from now) and wait through
// the poller, clearing the deadline after.
func writev(raw syscall.RawConn, conn net.Conn, bufs [][]byte, wb *Buf, timeout time.Duration) error {
	s := &wb.vec
	if s.step == nil {
		s.step = s.write
		s.try = func(fd uintptr) bool { return s.write(fd) || s.full }
	}
	s.bufs, s.done, s.total, s.full, s.err = bufs, 0, 0, false, nil
	for _, p := range bufs {
		s.total += len(p)
	}
	s.iov = fillIovecs(s.iov[:0], bufs, 0)
	defer func() {
		clear(s.iov[:cap(s.iov)]) // drop the pointers to the frames
		s.iov, s.bufs = s.iov[:0], nil
	}()
	err := raw.Write(s.try)
	if err == nil && s.err == nil && s.full {
		s.full = false
		conn.SetWriteDeadline(time.Now().Add(timeout))
		err = raw.Write(s.step)
		conn.SetWriteDeadline(time.Time{})
	}
	if err != nil {
		return err
	}
	return s.err
}

// write is one attempt: it reports true when everything is written or an
// error is in s.err, false when the socket is full.
func (s *vecState) write(fd uintptr) bool {
	for s.done < s.total {
		n := min(len(s.iov), maxIovecs)
		r, _, e := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&s.iov[0])), uintptr(n))
		switch e {
		case 0:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			s.full = true
			return false
		default:
			s.err = e
			return true
		}
		s.done += int(r)
		if s.done < s.total {
			// A partial write: start again from the first byte not
			// written, from the Go slices (an iovec may span frames, so no
			// pointer arithmetic on it).
			s.iov = fillIovecs(s.iov[:0], s.bufs, s.done)
		}
	}
	return true
}

// fillIovecs appends iovecs for bufs, skipping their first skip bytes.
// Frames of one publish lie back to back (see bus.buildFrames), so a run
// of them becomes one iovec: one buffer for the kernel to copy. Every
// buffer stays alive through bufs, whichever iovec starts it.
func fillIovecs(iov []syscall.Iovec, bufs [][]byte, skip int) []syscall.Iovec {
	for _, p := range bufs {
		if skip >= len(p) {
			skip -= len(p)
			continue
		}
		p = p[skip:]
		skip = 0
		if n := len(iov); n > 0 {
			last := &iov[n-1]
			if uintptr(unsafe.Pointer(last.Base))+uintptr(last.Len) == uintptr(unsafe.Pointer(&p[0])) {
				last.SetLen(int(last.Len) + len(p))
				continue
			}
		}
		v := syscall.Iovec{Base: &p[0]}
		v.SetLen(len(p))
		iov = append(iov, v)
	}
	return iov
}
