//go:build unix

package access

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// loadWithin runs Load(path) and fails the test if it has not returned
// within a generous bound: a FIFO must be refused, never waited on.
func loadWithin(t *testing.T, path string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := Load(path)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		// Unblock the reader (it waits for a writer) so the goroutine ends.
		if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		<-done
		t.Fatalf("Load(%s) blocked", path)
		return nil
	}
}

func TestLoadRefusesAFIFOWithoutBlocking(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys.json")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	err := loadWithin(t, path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "FIFO") {
		t.Errorf("Load(FIFO) error = %v, want one naming the path and saying it is a FIFO", err)
	}
}

func TestLoadDoesNotFollowASymlink(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	target := filepath.Join(dir, "real.json")
	if err := os.WriteFile(target, []byte(`[{"name":"a","hash":"`+HashKey("k")+`","scopes":["admin"]}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "keys.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	kr, err := Load(link)
	if err == nil || !strings.Contains(err.Error(), link) || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("Load(symlink) = %v keys, error %v; want an error naming the path and the link", kr, err)
	}
	// A link to a FIFO is refused as a link, without opening the FIFO.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link2 := filepath.Join(dir, "keys2.json")
	if err := os.Symlink(fifo, link2); err != nil {
		t.Fatal(err)
	}
	if err := loadWithin(t, link2); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("Load(symlink to a FIFO) error = %v, want the symbolic link refused", err)
	}
}

func TestLoadRefusesADevice(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero here")
	}
	err := loadWithin(t, "/dev/zero")
	if err == nil || !strings.Contains(err.Error(), "/dev/zero") || !strings.Contains(err.Error(), "character device") {
		t.Errorf("Load(/dev/zero) error = %v, want one naming the path and the kind", err)
	}
}

func TestLoadRefusesAFileOwnedByAnotherUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("giving a file to another uid needs root; skipping the owner check test")
	}
	path := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(path, []byte(`[{"name":"a","hash":"`+HashKey("k")+`","scopes":["admin"]}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err != nil {
		t.Fatalf("Load(owned by root) = %v, want success", err)
	}
	const nobody = 65534
	if err := os.Chown(path, nobody, -1); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("Load(0600, owned by uid %d) error = %v, want one naming the path and the owner", nobody, err)
	}
	// Another group does not matter: the mode already keeps it out.
	if err := os.Chown(path, 0, nobody); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err != nil {
		t.Errorf("Load(owned by root, group %d) = %v, want success", nobody, err)
	}
}

func TestLoadRefusesAnOversizedFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys.json")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(maxKeysFileBytes + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Load(%d bytes) error = %v, want it refused for its size", maxKeysFileBytes+1, err)
	}
}
