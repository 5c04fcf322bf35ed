package journal

import (
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// releaseDBPages takes the database's pages out of the daemon's resident
// set. bbolt reads the file through a shared mapping, and every page a
// checkpoint reads there (the chunks it trims, the leaves it rewrites)
// stays mapped until the daemon exits, so the resident set grew to the
// whole file, next to the rings that hold the same events in memory. The
// pages stay in the kernel's page cache, which reclaims them as it needs
// (writing through pwrite, bbolt left them there already); the next read
// maps them again. Called after a checkpoint's transaction.
func (j *Journal) releaseDBPages() {
	// A read transaction holds bbolt's mapping in place: it is remapped
	// (when the file outgrows it) only once no transaction is open.
	j.db.View(func(tx *bolt.Tx) error {
		info := j.db.Info()
		n := uintptr(tx.Size())
		if info == nil || n == 0 {
			return nil
		}
		// MADV_DONTNEED on a shared file mapping drops the process's
		// mappings of those pages only; their contents stay in the
		// file. The range is within the mapping: bbolt maps at least
		// the file, which is at least tx.Size.
		unix.Syscall(unix.SYS_MADVISE, info.Data, n, unix.MADV_DONTNEED)
		return nil
	})
}
