package access

import (
	"fmt"
	"net"

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
