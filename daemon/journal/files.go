package journal

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// PrepareDir makes dir ready to hold state (SPEC §7): it creates it, 0700,
// when it is missing; a directory it did not create must be owned by the
// process's uid and not writable by group or others, since whoever can
// write there can plant files the journal would read or write. The error
// names the path.
func PrepareDir(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	err := os.Mkdir(dir, 0o700)
	if err == nil {
		return nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("journal: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("journal: %s is not a directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("journal: %s is owned by uid %d, not by the daemon's uid %d; refusing to keep state there", dir, st.Uid, os.Geteuid())
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("journal: %s is writable by group or others (mode %04o); refusing to keep state there", dir, perm)
	}
	return nil
}

// errNotRegular is the error for a journal file that is not a regular
// file: a symlink, a FIFO, a device.
var errNotRegular = errors.New("not a regular file")

// openRegular opens a journal file without following a symlink and without
// blocking (a FIFO is an error, never a hang), and refuses anything but a
// regular file. flag is os.O_RDONLY or os.O_RDWR, maybe with os.O_CREATE
// and os.O_EXCL.
func openRegular(path string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, perm)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w (a symlink)", errNotRegular)}
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w (%s)", errNotRegular, kind(fi.Mode()))}
	}
	return f, nil
}

// truncateRegular cuts a journal file, never the target of a symlink.
func truncateRegular(path string, size int64) error {
	f, err := openRegular(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// kind names what a file that is not a regular file is.
func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return m.Type().String()
}
