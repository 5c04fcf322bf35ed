package journal

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/localbus/localbus/daemon/journal/journaltest"
)

func TestOpenRefusesADirectoryOthersControl(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"writable by others", func(t *testing.T, dir string) { chmod(t, dir, 0o777) }, "writable by group or others"},
		{"writable by group", func(t *testing.T, dir string) { chmod(t, dir, 0o770) }, "writable by group or others"},
		{"owned by another uid", func(t *testing.T, dir string) {
			if os.Geteuid() != 0 {
				t.Skip("giving a directory away needs root")
			}
			if err := os.Chown(dir, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, "owned by uid 65534"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "journal")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			tt.setup(t, dir)
			j, err := Open(Options{Dir: dir})
			if err == nil {
				j.Close()
				t.Fatalf("Open of a directory %s succeeded", tt.name)
			}
			if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open error %q does not name %s and say %q", err, dir, tt.want)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("Open wrote into a directory it refused: %v", ents)
			}
		})
	}
	t.Run("its own, read-only for others", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "journal")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		open(t, dir, Options{})
	})
}

func chmod(t testing.TB, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// crashedJournal returns a journal directory left by a crash, with
// events in one log segment, and that segment's path.
func crashedJournal(t *testing.T) (dir, seg string) {
	t.Helper()
	dir = t.TempDir()
	j, _ := open(t, dir, Options{})
	publish(t, newBus(t, j, "s", 0, 0), events(0, 3, 100)...)
	j.crash()
	segs := journaltest.Segments(t, dir)
	if len(segs) != 1 {
		t.Fatalf("%d segments, want 1", len(segs))
	}
	return dir, segs[0]
}

func TestPlantedSymlinkIsRefusedNeverFollowedOrTruncated(t *testing.T) {
	for _, file := range []string{"segment", dbName} {
		t.Run(file, func(t *testing.T) {
			dir, seg := crashedJournal(t)
			path := seg
			if file == dbName {
				path = filepath.Join(dir, dbName)
			}
			victim := filepath.Join(t.TempDir(), "victim")
			const content = "precious data that is not a journal"
			if err := os.WriteFile(victim, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			journaltest.PlantSymlink(t, path, victim)

			j, err := Open(Options{Dir: dir})
			if err == nil {
				j.Close()
				t.Fatal("Open followed a planted symlink")
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "symlink") {
				t.Errorf("Open error %q does not name the symlink %s", err, path)
			}
			if got, _ := os.ReadFile(victim); string(got) != content {
				t.Errorf("the symlink's target was changed: %q", got)
			}
			if fi, err := os.Lstat(path); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Errorf("the symlink was not left where it was: %v", err)
			}
		})
	}
}

func TestFIFOWhereAJournalFileShouldBeIsAnErrorNotAHang(t *testing.T) {
	for _, file := range []string{"segment", dbName} {
		t.Run(file, func(t *testing.T) {
			dir, seg := crashedJournal(t)
			path := seg
			if file == dbName {
				path = filepath.Join(dir, dbName)
			}
			journaltest.PlantFIFO(t, path)
			done := make(chan error, 1)
			go func() {
				j, err := Open(Options{Dir: dir})
				if err == nil {
					j.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !errors.Is(err, errNotRegular) || !strings.Contains(err.Error(), path) {
					t.Errorf("Open with a FIFO at %s = %v, want an error naming it", path, err)
				}
			case <-time.After(10 * time.Second):
				// Release the reader, so that nothing leaks.
				if w, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
					w.Close()
				}
				<-done
				t.Fatalf("Open hung on a FIFO at %s", path)
			}
		})
	}
}
