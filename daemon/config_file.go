package daemon

import (
	"fmt"
	"io"
	"os"
)

// maxConfigBytes bounds what a configuration file may hold: far more than
// any real one, and little enough to read whole.
const maxConfigBytes = 4 << 20

// readConfigFile reads the configuration file at path. It opens it without
// blocking (openNonBlocking), so a FIFO or a device at the path is a clear
// error instead of a reader that waits for a writer forever, which would
// hang a reload and, with it, the daemon's answer to SIGTERM; /dev/null
// alone among devices is taken, as an empty configuration. A symbolic
// link is followed: a configuration file is often one. A missing file is
// fs.ErrNotExist, unwrapped by the caller.
func readConfigFile(path string) ([]byte, error) {
	f, err := openNonBlocking(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if isDevNull(fi) {
		return nil, nil // --config /dev/null: an empty configuration, as with other daemons
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s); point --config at a file", path, describeMode(fi.Mode()))
	}
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxConfigBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxConfigBytes)
	}
	return data, nil
}

// isDevNull reports whether fi is /dev/null, the one device a
// configuration path may name: it reads as an empty file and never blocks.
func isDevNull(fi os.FileInfo) bool {
	null, err := os.Stat(os.DevNull)
	return err == nil && fi.Mode()&os.ModeCharDevice != 0 && os.SameFile(fi, null)
}

// describeMode names a file's type for an error.
func describeMode(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	}
	return m.Type().String()
}
