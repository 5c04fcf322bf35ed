package daemon

import (
	"net"
	"path/filepath"
	"slices"
	"testing"
)

func TestNonLoopbackNamesWildcardAndInterfaceListeners(t *testing.T) {
	var ls []net.Listener
	listen := func(network, addr string) net.Listener {
		t.Helper()
		l, err := net.Listen(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		ls = append(ls, l)
		return l
	}
	listen("tcp", "127.0.0.1:0")
	listen("unix", filepath.Join(t.TempDir(), "s"))
	wild := listen("tcp4", "0.0.0.0:0")
	want := []string{wild.Addr().String()}
	if l, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		ls = append(ls, l)
		t.Cleanup(func() { l.Close() })
	}
	if l, err := net.Listen("tcp6", "[::]:0"); err == nil {
		ls = append(ls, l)
		t.Cleanup(func() { l.Close() })
		want = append(want, l.Addr().String())
	}
	if got := nonLoopback(ls); !slices.Equal(got, want) {
		t.Errorf("nonLoopback = %q, want %q", got, want)
	}
}
