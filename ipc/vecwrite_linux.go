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
	iov := wb.iov[:0]
	for _, p := range bufs {
		if len(p) == 0 {
			continue
		}
		if n := len(iov); n > 0 {
			// Frames of one publish lie back to back (see bus.buildFrames):
			// a run of them is one buffer to the kernel. Each buffer stays
			// alive through bufs, whichever iovec starts it.
			last := &iov[n-1]
			if unsafe.Add(unsafe.Pointer(last.Base), last.Len) == unsafe.Pointer(&p[0]) {
				last.SetLen(int(last.Len) + len(p))
				continue
			}
		}
		v := syscall.Iovec{Base: &p[0]}
		v.SetLen(len(p))
		iov = append(iov, v)
	}
	wb.iov = iov
	defer clear(iov) // drop the pointers to the frames
	var werr error
	err := raw.Write(func(fd uintptr) bool {
		for len(iov) > 0 {
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
			iov = advance(iov, int(r))
		}
		return true
	})
	if err != nil {
		return err
	}
	return werr
}

// advance drops the first n written bytes from iov.
func advance(iov []syscall.Iovec, n int) []syscall.Iovec {
	for n > 0 && len(iov) > 0 {
		l := int(iov[0].Len)
		if n < l {
			iov[0].Base = (*byte)(unsafe.Add(unsafe.Pointer(iov[0].Base), n))
			iov[0].SetLen(l - n)
			return iov
		}
		n -= l
		iov = iov[1:]
	}
	return iov
}
