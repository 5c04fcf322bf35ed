//go:build !linux

package access

import (
	"errors"
	"fmt"
	"net"
)

func peerCred(*net.UnixConn) (Peer, error) {
	return Peer{}, fmt.Errorf("access: peer credentials: %w", errors.ErrUnsupported)
}
