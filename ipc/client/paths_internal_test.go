package client

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localbus/localbus/ipc/wire"
)

func TestBackoffDoublesWithinJitterUpToTheCap(t *testing.T) {
	s := &Stream{base: minBackoff, opts: StreamOptions{MaxBackoff: defaultMaxBackoff}}
	for failures, want := range map[int]struct{ lo, hi int64 }{
		1:  {125, 250},
		2:  {250, 500},
		3:  {500, 1000},
		7:  {8000, 16000},
		8:  {15000, 30000},
		30: {15000, 30000},
	} {
		s.failures = failures
		for range 100 {
			if d := s.backoff().Milliseconds(); d < want.lo || d > want.hi {
				t.Fatalf("backoff after %d failures = %dms, want %d..%dms", failures, d, want.lo, want.hi)
			}
		}
	}
}

func TestSocketForPicksTheUsersOwnElseTheSystemSocket(t *testing.T) {
	env := func(k string) string {
		if k == "XDG_RUNTIME_DIR" {
			return "/run/user/1000"
		}
		return ""
	}
	own := "/run/user/1000/localbus/localbus.sock"
	tests := []struct {
		name    string
		euid    int
		present []string
		want    string
	}{
		{"root", 0, nil, wire.SystemSocketPath},
		{"user with a daemon of their own", 1000, []string{own, wire.SystemSocketPath}, own},
		{"user with only the system daemon", 1000, []string{wire.SystemSocketPath}, wire.SystemSocketPath},
		{"user with no daemon", 1000, nil, own},
	}
	for _, tt := range tests {
		exists := func(p string) bool { return strings.Contains(strings.Join(tt.present, "\n"), p) }
		if got := socketFor(tt.euid, env, exists); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

// SocketPath is $LOCALBUS_SOCKET when set, whatever exists.
func TestSocketPathHonoursLocalbusSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "elsewhere.sock")
	t.Setenv("LOCALBUS_SOCKET", sock)
	if got := SocketPath(); got != sock {
		t.Errorf("SocketPath() with LOCALBUS_SOCKET=%s: %q", sock, got)
	}
	t.Setenv("LOCALBUS_SOCKET", "")
	os.Unsetenv("LOCALBUS_SOCKET")
	if got, want := SocketPath(), socketFor(os.Geteuid(), os.Getenv, exists); got != want {
		t.Errorf("SocketPath() without LOCALBUS_SOCKET: %q, want %q", got, want)
	}
}
