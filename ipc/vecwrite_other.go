//go:build !linux

package ipc

import (
	"net"
	"syscall"
	"time"
)

const canWritev = false

// vecState is unused where writev is not.
type vecState struct{}

func writev(syscall.RawConn, net.Conn, [][]byte, *writeBuf, time.Duration) error {
	panic("ipc: writev is only used on Linux")
}
