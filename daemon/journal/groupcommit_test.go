package journal

import (
	"testing"
	"time"
)

// gateFile holds every Sync until the test lets it go: entered receives
// when a Sync starts, release lets one finish.
type gateFile struct {
	File
	entered chan struct{}
	release chan struct{}
}

func (f *gateFile) Sync() error {
	f.entered <- struct{}{}
	<-f.release
	return f.File.Sync()
}

// TestAppendsCoveredBySyncUnderWayReturnWithoutWaitingForTheNext pins the
// group commit's hand-over: appends that wait while a sync is under way
// and that it covers return as soon as it ends, even though another
// waiting append, which it does not cover, starts the next sync at once.
// (Queued on a mutex instead, a covered append could sit behind the one
// syncing again, and wait a whole extra sync.)
func TestAppendsCoveredBySyncUnderWayReturnWithoutWaitingForTheNext(t *testing.T) {
	g := &gateFile{entered: make(chan struct{}), release: make(chan struct{})}
	w := newWAL(t.TempDir(), 1<<20, func(f File) File { g.File = f; return g }, nil, nil, false, true)
	if err := w.attach(1, nil); err != nil {
		t.Fatal(err)
	}
	defer func() {
		go func() { // close syncs nothing new, but let any Sync through
			for range g.entered {
				g.release <- struct{}{}
			}
		}()
		w.close()
		close(g.entered)
	}()
	rec := make([]byte, 64)
	lsnA, _, err := w.append(rec)
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() { first <- w.syncTo(lsnA) }()
	receive(t, g.entered, "the first sync to start")

	// Appended while the first sync runs: the next one covers it.
	lsnB, _, err := w.append(rec)
	if err != nil {
		t.Fatal(err)
	}
	uncovered := make(chan error, 1)
	go func() { uncovered <- w.syncTo(lsnB) }()
	waitFor(t, func() bool { return w.waitersNow() == 1 })
	const covered = 4
	done := make(chan error, covered)
	for range covered {
		go func() { done <- w.syncTo(lsnA) }()
	}
	waitFor(t, func() bool { return w.waitersNow() == 1+covered })

	g.release <- struct{}{} // the first sync ends
	if err := receive(t, first, "the first sync's caller"); err != nil {
		t.Fatal(err)
	}
	receive(t, g.entered, "the second sync to start")
	// The second sync is held: every covered append must be back anyway.
	for range covered {
		if err := receive(t, done, "an append the first sync covered, while the second is held"); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-uncovered:
		t.Fatalf("the append after the first sync returned (%v) before the sync that covers it ended", err)
	default:
	}
	g.release <- struct{}{}
	if err := receive(t, uncovered, "the append the second sync covers"); err != nil {
		t.Fatal(err)
	}
	if got := w.synced.Load(); got < lsnB {
		t.Errorf("synced %d after both syncs, want at least %d", got, lsnB)
	}
}

// receive returns the next value of c, or fails the test after 10 s
// waiting for what.
func receive[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// waitersNow returns how many syncTo calls wait for a sync under way.
func (w *wal) waitersNow() int {
	w.waitMu.Lock()
	defer w.waitMu.Unlock()
	return w.waiters
}
