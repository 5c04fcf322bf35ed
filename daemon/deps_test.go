package daemon

import (
	"strings"
	"testing"

	"github.com/localbus/localbus/ipc/ipctest"
)

// TestDaemonImportsNoCLILibraryNorClient guards the arrows of SPEC §1: the
// daemon takes its configuration as data (Source), and the command line
// that builds it from flags lives in cmd/localbus; the socket-path rule it
// shares with clients is in ipc/wire, so the daemon needs no client.
func TestDaemonImportsNoCLILibraryNorClient(t *testing.T) {
	t.Parallel()
	for _, d := range ipctest.Deps(t, ".") {
		if d.Path == "github.com/urfave/cli" || strings.HasPrefix(d.Path, "github.com/urfave/cli/") {
			t.Errorf("daemon depends on %s", d.Path)
		}
		if d.Path == "github.com/localbus/localbus/ipc/client" {
			t.Errorf("daemon depends on %s; the socket-path rule is wire.SocketPathFor", d.Path)
		}
	}
}
