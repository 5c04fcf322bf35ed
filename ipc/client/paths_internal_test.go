package client

import "testing"

func TestDefaultSocketPath(t *testing.T) {
	tests := []struct {
		name    string
		euid    int
		runtime string
		want    string
	}{
		{"root", 0, "/run/user/0", "/run/localbus/localbus.sock"},
		{"user with XDG_RUNTIME_DIR", 1000, "/run/user/1000", "/run/user/1000/localbus/localbus.sock"},
		{"user without XDG_RUNTIME_DIR", 1000, "", "/run/user/1000/localbus/localbus.sock"},
		{"relative XDG_RUNTIME_DIR is ignored", 1000, "tmp", "/run/user/1000/localbus/localbus.sock"},
		{"unclean XDG_RUNTIME_DIR", 1001, "/tmp/rt//", "/tmp/rt/localbus/localbus.sock"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string {
				if k == "XDG_RUNTIME_DIR" {
					return tt.runtime
				}
				return ""
			}
			if got := SocketPathFor(tt.euid, getenv); got != tt.want {
				t.Errorf("SocketPathFor(%d, XDG_RUNTIME_DIR=%q) = %q, want %q", tt.euid, tt.runtime, got, tt.want)
			}
		})
	}
}

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
