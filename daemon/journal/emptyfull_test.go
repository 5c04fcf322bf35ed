package journal

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/daemon/journal/journaltest"
)

// TestAnEmptyStateDirOnAFullDiskStartsReadOnly opens a journal whose
// directory does not exist yet on a full disk: Open succeeds read-only,
// with the global bus in memory and nothing else; a new session, an
// append and a key are refused with ErrDiskFull, and nothing is left on
// disk. Once space returns a session is created and takes appends, and
// everything, the global bus's epoch included, is there after a restart.
func TestAnEmptyStateDirOnAFullDiskStartsReadOnly(t *testing.T) {
	mnt := t.TempDir()
	journaltest.SmallDisk(t, mnt, 4<<20)
	old := retryWritable
	retryWritable = 0
	t.Cleanup(func() { retryWritable = old })
	for _, sub := range []string{"absent", "made"} {
		t.Run(sub, func(t *testing.T) {
			dir := filepath.Join(mnt, sub, "journal")
			if sub == "made" {
				if err := os.MkdirAll(dir, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			release := journaltest.Fill(t, mnt)
			t.Cleanup(release)

			j, lb := open(t, dir, Options{})
			if !strings.Contains(lb.String(), "read-only") {
				t.Errorf("no read-only warning in the log:\n%s", lb)
			}
			gst, gepoch, _, err := j.OpenBus("", 0)
			if err != nil {
				t.Fatalf("OpenBus of the global bus on a full disk: %v", err)
			}
			if got := j.Sessions(); len(got) != 0 {
				t.Errorf("Sessions = %v, want none", got)
			}
			if _, _, _, err := j.OpenBus("s", 0); !errors.Is(err, ErrDiskFull) {
				t.Errorf("OpenBus of a new session on a full disk: %v, want ErrDiskFull", err)
			}
			if err := gst.Append([]*bus.Frame{bus.NewFrame(1, "test:ev", []byte(`{}`))}); !errors.Is(err, ErrDiskFull) {
				t.Errorf("Append to the global bus on a full disk: %v, want ErrDiskFull", err)
			}
			if err := j.PutKey("s", "k", []byte(`{}`)); !errors.Is(err, ErrDiskFull) {
				t.Errorf("PutKey on a full disk: %v, want ErrDiskFull", err)
			}
			if err := j.Keys(func(string, string, []byte) { t.Error("a key on an empty journal") }); err != nil {
				t.Errorf("Keys on a full disk: %v", err)
			}
			if v, err := j.Cursor("c"); v != nil || err != nil {
				t.Errorf("Cursor on a full disk = %q, %v; want nothing", v, err)
			}
			if _, err := os.Stat(filepath.Join(dir, dbName)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a database on the full disk: %v", err)
			}

			release()
			b := newBus(t, j, "s", 0, 0)
			if first, _ := publish(t, b, events(0, 3, 10)...); first != 1 {
				t.Errorf("first id once space returned = %d, want 1", first)
			}
			if err := gst.Append([]*bus.Frame{bus.NewFrame(1, "test:ev", []byte(`{}`))}); err != nil {
				t.Errorf("Append to the global bus once space returned: %v", err)
			}
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			j2, _ := open(t, dir, Options{})
			if got := j2.Sessions(); len(got) != 1 || got[0] != "s" {
				t.Errorf("Sessions after a restart = %v, want [s]", got)
			}
			st, _, _, _ := j2.OpenBus("s", 0)
			if st.LastID() != 3 {
				t.Errorf("session s after a restart: last id %d, want 3", st.LastID())
			}
			gst2, gepoch2, _, _ := j2.OpenBus("", 0)
			if gepoch2 != gepoch || gst2.LastID() != 1 {
				t.Errorf("global bus after a restart: epoch %s, last id %d; want %s, 1", gepoch2, gst2.LastID(), gepoch)
			}
			if err := j2.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
