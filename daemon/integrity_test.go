package daemon_test

// End-to-end tests of the journal's integrity under faults (SPEC §7 Files,
// §11 Integrity) with the built daemon: damaged or planted state files
// never stop it, never make it follow a link, and never let it reuse an id
// under an epoch a client may have seen.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/localbus/localbus/daemon/daemontest"
)

func TestStartRefusesAStateDirOthersCanWrite(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(state, 0o777); err != nil {
		t.Fatal(err)
	}
	d := daemontest.Start(t, daemontest.Options{Dir: dir, Durable: true, NoWait: true})
	if code, _ := waitExit(t, d, time.Now()); code != 1 {
		t.Errorf("exit code = %d, want 1", code)
	}
	if log := d.Stderr(); !strings.Contains(log, state) || !strings.Contains(log, "writable by group or others") {
		t.Errorf("stderr %q does not name %s and say why it is refused", log, state)
	}
	if ents, _ := os.ReadDir(state); len(ents) != 0 {
		t.Errorf("the daemon wrote into the state_dir it refused: %v", ents)
	}
}
