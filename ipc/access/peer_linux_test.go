package access

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func wantSelf(t *testing.T, p Peer) {
	t.Helper()
	if p.UID != uint32(os.Getuid()) || p.GID != uint32(os.Getgid()) || p.PID != int32(os.Getpid()) {
		t.Errorf("PeerCred = %+v, want uid %d gid %d pid %d", p, os.Getuid(), os.Getgid(), os.Getpid())
	}
}

func TestPeerCredUnixListener(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	type result struct {
		conn net.Conn
		err  error
	}
	accepted := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		accepted <- result{c, err}
	}()
	client, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	res := <-accepted // Accept returns once Dial has connected
	if res.err != nil {
		t.Fatal(res.err)
	}
	defer res.conn.Close()

	for name, c := range map[string]net.Conn{"server side": res.conn, "client side": client} {
		p, err := PeerCred(c)
		if err != nil {
			t.Fatalf("%s: PeerCred: %v", name, err)
		}
		wantSelf(t, p)
	}
}

func TestPeerCredSocketpair(t *testing.T) {
	t.Parallel()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "pair")
		c, err := net.FileConn(f) // dups fd
		f.Close()
		if err != nil {
			t.Fatalf("FileConn %d: %v", i, err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	p, err := PeerCred(conns[0])
	if err != nil {
		t.Fatal(err)
	}
	wantSelf(t, p)
}

// socketpairConn returns one end of a Unix socketpair as a net.Conn; the
// other end is closed when the test ends.
func socketpairConn(t *testing.T) net.Conn {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f0, f1 := os.NewFile(uintptr(fds[0]), "a"), os.NewFile(uintptr(fds[1]), "b")
	t.Cleanup(func() { f1.Close() })
	c, err := net.FileConn(f0)
	f0.Close()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// wrapped is a connection wrapper in the style of *tls.Conn.
type wrapped struct{ net.Conn }

func (w wrapped) NetConn() net.Conn { return w.Conn }

func TestPeerCredUnwrapsNetConn(t *testing.T) {
	t.Parallel()
	c := socketpairConn(t)
	defer c.Close()
	p, err := PeerCred(wrapped{wrapped{c}})
	if err != nil {
		t.Fatal(err)
	}
	wantSelf(t, p)
}

func TestPeerCredRefusesOtherConns(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if srv, ok := <-accepted; ok {
		defer srv.Close()
	}

	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	var nilUnix *net.UnixConn
	for name, c := range map[string]net.Conn{"tcp": client, "pipe": p1, "nil unix": nilUnix, "nil": nil} {
		if p, err := PeerCred(c); !errors.Is(err, ErrNotUnix) {
			t.Errorf("PeerCred(%s) = %+v, %v; want ErrNotUnix", name, p, err)
		}
	}
}

func TestPeerCredClosedConn(t *testing.T) {
	t.Parallel()
	c := socketpairConn(t)
	c.Close()
	if _, err := PeerCred(c); err == nil {
		t.Error("PeerCred on a closed connection succeeded")
	}
}
