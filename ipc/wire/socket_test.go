package wire_test

import (
	"testing"

	"github.com/localbus/localbus/ipc/wire"
)

func TestSocketPathFor(t *testing.T) {
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
			if got := wire.SocketPathFor(tt.euid, getenv); got != tt.want {
				t.Errorf("SocketPathFor(%d, XDG_RUNTIME_DIR=%q) = %q, want %q", tt.euid, tt.runtime, got, tt.want)
			}
		})
	}
}
