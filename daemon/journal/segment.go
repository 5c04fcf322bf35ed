//go:build unix

package journal

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

var errSegmentFull = errors.New("journal: segment full")

// segment is a log segment file, preallocated to its full size and mapped
// into memory: appending is a copy into the mapping, with no system call.
// The mapping is shared with the kernel's page cache, so what is copied
// survives a crash of the process; Sync makes it survive a power loss.
type segment struct {
	f    *os.File
	data []byte
	high int // past the last byte written
}

// createSegment creates path with size bytes allocated on disk, so that
// writing into the mapping can never run out of space (which a mapping
// can only report as SIGBUS).
func createSegment(path string, size int64) (*segment, error) {
	f, err := openRegular(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, classify(err)
	}
	fail := func(err error) (*segment, error) {
		f.Close()
		os.Remove(path)
		return nil, classify(err)
	}
	if err := preallocate(f, size); err != nil {
		return fail(err)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(err)
	}
	return &segment{f: f, data: data}, nil
}

// bigWrite is the size from which a write goes through pwrite rather than
// the mapping: copying into fresh pages of a mapping costs a page fault per
// page, which a large write pays many times over.
const bigWrite = 32 << 10

func (s *segment) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(s.data)) {
		return 0, errSegmentFull
	}
	n := len(p)
	if n >= bigWrite {
		// The same page cache backs the mapping and the file.
		var err error
		if n, err = s.f.WriteAt(p, off); err != nil {
			s.high = max(s.high, int(off)+n)
			return n, err
		}
	} else {
		copy(s.data[off:], p)
	}
	s.high = max(s.high, int(off)+n)
	return n, nil
}

// Truncate zeroes everything written from size on: the segment keeps its
// length, and a zero header marks the end of the log.
func (s *segment) Truncate(size int64) error {
	if size < int64(s.high) {
		clear(s.data[size:s.high])
		s.high = int(size)
	}
	return nil
}

// Sync writes the segment's dirty pages to stable storage: fdatasync covers
// pages dirtied through a shared mapping.
func (s *segment) Sync() error { return unix.Fdatasync(int(s.f.Fd())) }

func (s *segment) Close() error {
	err := unix.Munmap(s.data)
	s.data = nil
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	return err
}
