//go:build unix

package daemon

import (
	"os"
	"syscall"
)

// openNonBlocking opens path for reading with O_NONBLOCK: opening a FIFO
// for reading would otherwise wait for a writer.
func openNonBlocking(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
}
