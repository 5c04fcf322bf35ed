package journal

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// diskUse returns the bytes the files in dir take on disk (allocated
// blocks, not apparent sizes).
func diskUse(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() {
			n += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// apparentSize returns the lengths of the files in dir added up: what ls
// shows, sparse parts included.
func apparentSize(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestFreshJournalTakesAtMostOneMiBOnDiskAndInLength(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, dir, Options{})
	b := newBus(t, j, "", 0, 0)
	publish(t, b, events(0, 1, 100)...)
	if err := j.Checkpoint(); err != nil { // the database's first commit with events
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		if got := diskUse(t, dir); got > 1<<20 {
			t.Errorf("%s: the journal takes %d bytes on disk, want at most 1 MiB", when, got)
		}
		// Sparse or not, a 16 MiB file looks like 16 MiB to whoever
		// lists the state directory.
		if got := apparentSize(t, dir); got > 2<<20 {
			t.Errorf("%s: the journal's files are %d bytes long, want at most 2 MiB", when, got)
		}
	}
	check("open, one event checkpointed")
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	check("after a clean stop")
}

func TestFailedCheckpointAddsNoSegment(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, dir, Options{CheckpointInterval: 1 << 40})
	b := newBus(t, j, "s", 0, 0)
	publish(t, b, events(0, 10, 100)...)
	errFull := errors.New("database full")
	setHooks(t, dir, &hooks{failCheckpoint: func() error { return errFull }})
	for range 3 {
		if err := j.Checkpoint(); !errors.Is(err, errFull) {
			t.Fatalf("Checkpoint = %v, want the database's error", err)
		}
	}
	seqs, err := segments(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(seqs) > 2 {
		t.Errorf("%d segments after three failed checkpoints, want at most 2 (the log and one empty)", len(seqs))
	}
	setHooks(t, dir, nil)
	if err := j.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	publish(t, b, events(10, 1, 100)...)
	j.crash()
	j2, _ := open(t, dir, Options{})
	st, _, _, _ := j2.OpenBus("s", 0)
	if got := ids(retained(st)); len(got) != 11 || got[10] != 11 {
		t.Errorf("after failed checkpoints, a good one and a crash: ids %v, want 1..11", got)
	}
}
