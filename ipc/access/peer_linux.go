package access

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

func peerCred(uc *net.UnixConn) (Peer, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return Peer{}, fmt.Errorf("access: peer credentials: %w", err)
	}
	var (
		cred    *unix.Ucred
		credErr error
	)
	err = rc.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err == nil {
		err = credErr
	}
	if err != nil {
		return Peer{}, fmt.Errorf("access: peer credentials: %w", err)
	}
	return Peer{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid}, nil
}

// ProcessName returns the name the kernel keeps for process pid
// (/proc/PID/comm, at most 15 bytes), or "" when there is none to read (the
// process is gone, or /proc is not mounted).
func ProcessName(pid int32) string {
	if pid <= 0 {
		return ""
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/comm")
	if err != nil {
		return ""
	}
	return string(bytes.TrimRight(b, "\n"))
}

// keepOwner gives the file f the owner of the file at path, or, when there
// is none, of the directory dir, when the caller is root and that owner is
// another user: root editing the keys file of a daemon that runs as its own
// user must not leave a file that daemon cannot read.
func keepOwner(f *os.File, path, dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		if err := unix.Stat(dir, &st); err != nil {
			return nil
		}
	}
	if st.Uid == 0 {
		return nil
	}
	return f.Chown(int(st.Uid), int(st.Gid))
}
