package client_test

import (
	"strings"
	"testing"

	"github.com/localbus/localbus/ipc/ipctest"
)

// TestClientDoesNotLinkTheServer guards SPEC §1: an application that links
// the Go client links the shared vocabulary (ipc/wire), the frame types of
// bus (with bus/share, the pure package of its fair shares), the
// WebSocket library and the standard library, and nothing of the
// server: not the router, the daemon, the hub, the journal's bbolt or
// Prometheus.
func TestClientDoesNotLinkTheServer(t *testing.T) {
	t.Parallel()
	const mod = "github.com/localbus/localbus/"
	forbidden := []string{mod + "ipc", mod + "daemon", mod + "bus/hub", "go.etcd.io/bbolt", "github.com/prometheus"}
	allowed := []string{mod + "ipc/client", mod + "ipc/wire", mod + "bus", mod + "bus/share", "github.com/coder/websocket"}
	under := func(path, root string) bool { return path == root || strings.HasPrefix(path, root+"/") }
	for _, d := range ipctest.Deps(t, ".") {
		path := d.Path
		if d.Standard {
			continue
		}
		for _, f := range forbidden {
			if path == f || (f != mod+"ipc" && under(path, f)) {
				t.Errorf("ipc/client depends on %s", path)
			}
		}
		ok := false
		for _, a := range allowed {
			// bus itself, not bus/hub or bus/bustest.
			ok = ok || path == a || (a != mod+"bus" && under(path, a))
		}
		if !ok {
			t.Errorf("ipc/client depends on %s, which is not one of %v", path, allowed)
		}
	}
}
