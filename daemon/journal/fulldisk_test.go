package journal

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/daemon/journal/journaltest"
)

// TestOpenOnAFullDiskServesReadOnlyUntilSpaceReturns pins SPEC §11:
// starting on a full disk with a log to replay, what the journal holds is
// served read-only, every append is refused with ErrDiskFull, and once
// space returns appends continue with the next id, under an epoch that is
// on disk.
func TestOpenOnAFullDiskServesReadOnlyUntilSpaceReturns(t *testing.T) {
	for _, mode := range []string{SyncAlways, SyncInterval} {
		t.Run(mode, func(t *testing.T) {
			mnt := t.TempDir()
			journaltest.SmallDisk(t, mnt, 16<<20)
			dir := filepath.Join(mnt, "journal")
			old := retryWritable
			retryWritable = 0
			t.Cleanup(func() { retryWritable = old })

			j, _ := open(t, dir, Options{Sync: mode})
			want := map[string][]*bus.Frame{}
			epochs := map[string]string{}
			for _, name := range []string{"s1", "s2"} {
				b := newBus(t, j, name, 0, 0)
				publish(t, b, events(0, 20, 100)...)
				epochs[name] = b.Epoch()
			}
			if err := j.Checkpoint(); err != nil { // some events in the database,
				t.Fatal(err)
			}
			for _, name := range []string{"s1", "s2"} { // some only in the log
				b := newBus(t, j, name, 0, 0)
				publish(t, b, events(20, 10, 100)...)
				st, _, _, _ := j.OpenBus(name, 0)
				want[name] = retained(st)
			}
			if mode == SyncInterval {
				if err := j.wal.sync(); err != nil {
					t.Fatal(err)
				}
			}
			j.crash()
			release := journaltest.Fill(t, mnt)
			t.Cleanup(release)

			j2, lb := open(t, dir, Options{Sync: mode})
			if !strings.Contains(lb.String(), "read-only") {
				t.Errorf("no read-only warning in the log:\n%s", lb)
			}
			newEpochs := map[string]string{}
			for name, frames := range want {
				st, epoch, _, err := j2.OpenBus(name, 0)
				if err != nil {
					t.Fatal(err)
				}
				newEpochs[name] = epoch
				// An unclean stop under SyncInterval may have lost
				// acknowledged events: a new epoch. Under SyncAlways none.
				if same := epoch == epochs[name]; same != (mode == SyncAlways) {
					t.Errorf("bus %q: epoch %q, before the crash %q", name, epoch, epochs[name])
				}
				got := retained(st)
				if !slices.Equal(ids(got), ids(frames)) {
					t.Fatalf("bus %q: restored ids %v, want %v", name, ids(got), ids(frames))
				}
				for i := range got {
					if string(got[i].SSE()) != string(frames[i].SSE()) {
						t.Errorf("bus %q event %d: %q, want %q", name, got[i].ID, got[i].SSE(), frames[i].SSE())
					}
				}
			}
			b := newBus(t, j2, "s1", 0, 0)
			if _, _, err := b.Publish(events(30, 1, 10)...); !errors.Is(err, bus.ErrDiskFull) {
				t.Fatalf("Publish on a full disk: %v, want ErrDiskFull", err)
			}
			if got := b.LastID(); got != 30 {
				t.Errorf("LastID after a refused publish = %d, want 30", got)
			}

			release()
			if first, _ := publish(t, b, events(30, 1, 10)...); first != 31 {
				t.Errorf("first id once space returned = %d, want 31", first)
			}
			if err := j2.Close(); err != nil {
				t.Fatal(err)
			}
			j3, _ := open(t, dir, Options{Sync: mode})
			for name, frames := range want {
				st, epoch, _, err := j3.OpenBus(name, 0)
				if err != nil {
					t.Fatal(err)
				}
				if epoch != newEpochs[name] {
					t.Errorf("bus %q: epoch %q after a clean restart, served as %q", name, epoch, newEpochs[name])
				}
				wantIDs := ids(frames)
				if name == "s1" {
					wantIDs = append(wantIDs, 31)
				}
				if got := ids(retained(st)); !slices.Equal(got, wantIDs) {
					t.Errorf("bus %q: ids %v after a clean restart, want %v", name, got, wantIDs)
				}
			}
			if _, err := os.Stat(filepath.Join(mnt, "ballast")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("ballast still there: %v", err)
			}
		})
	}
}
