package ipc

import (
	"syscall"
	"unsafe"
)

const canWritev = true

// maxIovecs is IOV_MAX on Linux: the most buffers one writev takes.
const maxIovecs = 1024

// iovecs is the scratch space of writev, kept in a pooled writeBuf.
type iovecs = []syscall.Iovec

// writev writes bufs with writev(2), resuming after partial writes and
// waiting through the poller (which applies the write deadline) while the
// socket is full.
func writev(raw syscall.RawConn, bufs [][]byte, wb *writeBuf) error {
	total := 0
	for _, p := range bufs {
		total += len(p)
	}
	done := 0
	iov := fillIovecs(wb.iov[:0], bufs, 0)
	defer func() {
		clear(wb.iov[:cap(wb.iov)]) // drop the pointers to the frames
		wb.iov = wb.iov[:0]
	}()
	var werr error
	err := raw.Write(func(fd uintptr) bool {
		for done < total {
			n := min(len(iov), maxIovecs)
			r, _, e := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(n))
			switch e {
			case 0:
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait until writable, or the deadline
			default:
				werr = e
				return true
			}
			done += int(r)
			if done < total {
				// A partial write: start again from the first byte not
				// written, from the Go slices (an iovec may span frames, so
				// no pointer arithmetic on it).
				iov = fillIovecs(iov[:0], bufs, done)
			}
		}
		return true
	})
	wb.iov = iov
	if err != nil {
		return err
	}
	return werr
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
