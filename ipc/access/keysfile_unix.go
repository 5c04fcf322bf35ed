//go:build unix

package access

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// openKeysFile opens the keys file at path for reading without following a
// symbolic link and without blocking, so a FIFO or a device placed there is
// refused by the checks that follow instead of hanging the reader (a FIFO
// opened for reading blocks until a writer appears). A missing file is
// fs.ErrNotExist.
func openKeysFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if errors.Is(err, syscall.ELOOP) {
		if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode().Type() == fs.ModeSymlink {
			return nil, fmt.Errorf("access: keys file %s is a symbolic link, which is never followed; point keys_file at the file itself", path)
		}
	}
	return f, err
}

// checkKeysOwner refuses a keys file that a user other than this process's
// (or root) owns: whoever owns it could write keys into it, admin keys
// included.
func checkKeysOwner(path string, st fs.FileInfo) error {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	uid := int(sys.Uid)
	if me := os.Geteuid(); uid != me && uid != 0 {
		return fmt.Errorf("access: keys file %s is owned by uid %d, which could add keys to it; want it owned by uid %d or root (chown %d %s)",
			path, uid, me, me, path)
	}
	return nil
}
