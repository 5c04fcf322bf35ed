//go:build !linux

package framewriter

import (
	"net"
	"syscall"
	"time"
)

const canWritev = false

// vecState is unused where writev is not.
type vecState struct{}

func writev(syscall.RawConn, net.Conn, [][]byte, *Buf, time.Duration) error {
	panic("framewriter: writev is only used on Linux")
}
