package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestConfigAtAFIFOIsAnErrorNotAHang puts a FIFO, a directory and a socket
// at the configuration path: loading returns at once with an error that
// says what is there, instead of waiting for a writer.
func TestConfigAtAFIFOIsAnErrorNotAHang(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	sub := filepath.Join(dir, "dir.toml")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ path, want string }{
		{fifo, "a FIFO"},
		{sub, "a directory"},
		{"/dev/zero", "a character device"},
	} {
		errc := make(chan error, 1)
		go func() {
			_, err := LoadConfig(Source{File: tt.path, FileExplicit: true})
			errc <- err
		}()
		select {
		case err := <-errc:
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.path) {
				t.Errorf("LoadConfig(%s) = %v, want an error naming the path and %q", tt.path, err, tt.want)
			}
		case <-time.After(10 * time.Second):
			// Unblock the reader, so the test ends without a leak.
			if f, err := os.OpenFile(tt.path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
			<-errc
			t.Fatalf("LoadConfig(%s) blocked", tt.path)
		}
	}
}

// TestConfigAtDevNullIsAnEmptyConfiguration: --config /dev/null, the
// idiom for "no configuration file", loads the defaults.
func TestConfigAtDevNullIsAnEmptyConfiguration(t *testing.T) {
	t.Parallel()
	cfg, err := LoadConfig(Source{File: os.DevNull, FileExplicit: true})
	if err != nil {
		t.Fatalf("LoadConfig(/dev/null) = %v, want the defaults", err)
	}
	if want := Defaults(); cfg.RingSize != want.RingSize || cfg.MaxSessions != want.MaxSessions {
		t.Errorf("LoadConfig(/dev/null): ring_size %d, max_sessions %d; want the defaults %d, %d", cfg.RingSize, cfg.MaxSessions, want.RingSize, want.MaxSessions)
	}
}
