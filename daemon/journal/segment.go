//go:build unix

package journal

import (
	"errors"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

var errSegmentFull = errors.New("journal: segment full")

// segment is a log segment file mapped into memory: appending is a copy
// into the mapping, with no system call. The mapping is shared with the
// kernel's page cache, so what is copied survives a crash of the process;
// Sync makes it survive a power loss. The file starts small and is
// allocated on disk ahead of every write that needs more room, so that a
// log costs little disk until it is used and writing into the mapping can
// never run out of space (which a mapping can only report as SIGBUS).
type segment struct {
	f    *os.File
	data []byte // maps the segment's whole size; only [:alloc] is backed by the file
	// alloc is the bytes allocated on disk, the file's length, and high
	// is past the last byte written. Atomic: with fsync "always" the
	// goroutine that syncs writes what was reserved (Reserve, under the
	// log's lock) while appends reserve more.
	alloc atomic.Int64
	high  atomic.Int64
	// pwriteFrom is the size from which a write goes through pwrite
	// rather than the mapping (see bigWrite); 0 sends every write there.
	pwriteFrom int
}

// firstAlloc is how much of a segment is allocated when it is created;
// each growth at least doubles it.
const firstAlloc = 64 << 10

// createSegment creates path, a segment of size bytes with its first
// firstAlloc bytes (or size, if smaller) allocated on disk.
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
	alloc := min(size, firstAlloc)
	if err := preallocate(f, alloc); err != nil {
		return fail(err)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(err)
	}
	seg := &segment{f: f, data: data, pwriteFrom: bigWrite}
	seg.alloc.Store(alloc)
	return seg, nil
}

// grow allocates the segment on disk up to end at least: twice what it
// has, or end if more, within the segment's size; on a disk without room
// for that, end rounded up to a page. On error nothing changed.
func (s *segment) grow(end int64) error {
	const page = 4 << 10
	want := min(int64(len(s.data)), max(2*s.alloc.Load(), (end+page-1)/page*page))
	err := preallocate(s.f, want)
	if errors.Is(classify(err), ErrDiskFull) && want > end {
		want = min(int64(len(s.data)), (end+page-1)/page*page)
		err = preallocate(s.f, want)
	}
	if err != nil {
		return classify(err)
	}
	s.alloc.Store(want)
	return nil
}

// bigWrite is the size from which a write goes through pwrite rather than
// the mapping: copying into fresh pages of a mapping costs a page fault per
// page, which a large write pays many times over.
//
// A log synced after every append (fsync "always") writes everything
// through pwrite: each fdatasync leaves the page being filled clean and
// write-protected, so the next copy into the mapping would fault on it
// (about 16 µs here, against 4 µs for a small pwrite), under the log's
// lock. Its appends are written one sync at a time, in one pwrite
// (wal.syncEach).
const bigWrite = 32 << 10

func (s *segment) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(s.data)) {
		return 0, errSegmentFull
	}
	if end := off + int64(len(p)); end > s.alloc.Load() {
		if err := s.grow(end); err != nil {
			return 0, err
		}
	}
	n := len(p)
	if n >= s.pwriteFrom {
		// The same page cache backs the mapping and the file.
		var err error
		if n, err = s.f.WriteAt(p, off); err != nil {
			s.raiseHigh(off + int64(n))
			return n, err
		}
	} else {
		copy(s.data[off:], p)
	}
	s.raiseHigh(off + int64(n))
	return n, nil
}

// raiseHigh moves high up to end, if that is higher.
func (s *segment) raiseHigh(end int64) {
	for {
		h := s.high.Load()
		if end <= h || s.high.CompareAndSwap(h, end) {
			return
		}
	}
}

// Reserve allocates the segment on disk up to end at least.
func (s *segment) Reserve(end int64) error {
	if end > int64(len(s.data)) {
		return errSegmentFull
	}
	if end > s.alloc.Load() {
		return s.grow(end)
	}
	return nil
}

// Truncate zeroes everything written from size on: the segment keeps its
// length, and a zero header marks the end of the log.
func (s *segment) Truncate(size int64) error {
	if h := s.high.Load(); size < h {
		clear(s.data[size:h])
		s.high.Store(size)
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

// mapSegment maps the log segment at path read-only: replaying a log
// reads it through the page cache rather than copying it. The mapping
// stays valid after the file is removed; unmapSegment releases it (and
// the file's blocks, once removed).
func mapSegment(path string) ([]byte, error) {
	f, err := openRegular(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return nil, err
	}
	return unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
}

func unmapSegment(data []byte) {
	if len(data) > 0 {
		unix.Munmap(data)
	}
}
