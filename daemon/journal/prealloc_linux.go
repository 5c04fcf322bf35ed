package journal

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// preallocate allocates size bytes of disk to f and sets its length.
func preallocate(f *os.File, size int64) error {
	err := unix.Fallocate(int(f.Fd()), 0, 0, size)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		// A filesystem without fallocate: a sparse file, written pages are
		// allocated as they are flushed.
		return f.Truncate(size)
	}
	return err
}
