//go:build unix && !linux

package journal

import "os"

// preallocate sets f's length to size: a sparse file, whose pages are
// allocated as they are flushed.
func preallocate(f *os.File, size int64) error { return f.Truncate(size) }
