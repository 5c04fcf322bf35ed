package ipc_test

import (
	"strings"
	"testing"

	"github.com/localbus/localbus/ipc/ipctest"
)

// TestRouterDoesNotImportTheDaemon guards SPEC §1: dependencies point down,
// cmd → daemon → ipc → bus. The router knows storage errors from bus, not
// from the journal that returns them, and nothing of the daemon.
func TestRouterDoesNotImportTheDaemon(t *testing.T) {
	t.Parallel()
	const daemon = "github.com/localbus/localbus/daemon"
	for _, d := range ipctest.Deps(t, ".", "./access", "./wire") {
		if path := d.Path; path == daemon || strings.HasPrefix(path, daemon+"/") {
			t.Errorf("ipc depends on %s", path)
		}
	}
}
