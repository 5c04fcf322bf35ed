package daemon

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestDaemonImportsNoCLILibrary guards the arrow of SPEC §1: the daemon
// takes its configuration as data (Source), and the command line that
// builds it from flags lives in cmd/localbus.
func TestDaemonImportsNoCLILibrary(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := exec.LookPath(goTool); err != nil {
			t.Skip("no go command to list dependencies with")
		}
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, path := range strings.Fields(string(out)) {
		if path == "github.com/urfave/cli" || strings.HasPrefix(path, "github.com/urfave/cli/") {
			t.Errorf("daemon depends on %s", path)
		}
	}
}
