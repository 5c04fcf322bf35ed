package access

import (
	"errors"
	"net"
)

// Peer is the process at the other end of a Unix socket connection, as the
// kernel recorded it when the connection was made (SO_PEERCRED): it cannot be
// forged by the peer, and it names who connected, not who holds the socket
// now.
type Peer struct {
	UID, GID uint32
	PID      int32
	// Comm is the process's name (/proc/PID/comm) when the connection was
	// accepted, "" when it could not be read. Unlike the credentials it is
	// what the process calls itself, for people to read, never to decide
	// access by.
	Comm string
}

// ErrNotUnix is returned by [PeerCred] for a connection that is not a Unix
// domain socket.
var ErrNotUnix = errors.New("access: peer credentials need a Unix socket connection")

// PeerCred returns the credentials of conn's peer. conn must be a
// *net.UnixConn, or wrap one behind NetConn methods (as *tls.Conn does);
// anything else is [ErrNotUnix]. On systems without SO_PEERCRED it returns
// an error that wraps [errors.ErrUnsupported]. It does not read from or
// write to conn and may be called from the server's ConnContext. It also
// reads the process's name once, for Comm.
func PeerCred(conn net.Conn) (Peer, error) {
	uc, ok := unwrapUnix(conn)
	if !ok {
		return Peer{}, ErrNotUnix
	}
	p, err := peerCred(uc)
	if err == nil {
		p.Comm = ProcessName(p.PID)
	}
	return p, err
}

// A netConnWrapper is a connection that wraps another and gives it out, as
// *tls.Conn does: the optional capability unwrapUnix looks for.
type netConnWrapper interface {
	// NetConn returns the wrapped connection.
	NetConn() net.Conn
}

// unwrapUnix finds the *net.UnixConn under any NetConn wrappers.
func unwrapUnix(conn net.Conn) (*net.UnixConn, bool) {
	for range 8 { // wrappers are few; the bound guards against a cycle
		switch c := conn.(type) {
		case *net.UnixConn:
			return c, c != nil
		case netConnWrapper:
			conn = c.NetConn()
		default:
			return nil, false
		}
	}
	return nil, false
}

// PeerScopes returns what a Unix socket peer may do by its credentials
// alone (SPEC §7): root and the daemon's own user (daemonUID) get [Admin];
// every other peer gets peerScopes (unix_peer_scopes, by default
// [DefaultPeerScopes]). The router adds the scopes of a bearer key sent on
// the socket with [Scopes.Union].
func PeerScopes(p Peer, daemonUID uint32, peerScopes Scopes) Scopes {
	if p.UID == 0 || p.UID == daemonUID {
		return NewScopes(Admin)
	}
	return peerScopes
}
