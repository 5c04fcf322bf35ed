//go:build !linux

package ipc

import "syscall"

const canWritev = false

// iovecs is unused where writev is not.
type iovecs = struct{}

func writev(syscall.RawConn, [][]byte, *writeBuf) error {
	panic("ipc: writev is only used on Linux")
}
