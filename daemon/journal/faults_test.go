package journal

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	bolt "go.etcd.io/bbolt"
)

// faultFile injects faults into a log segment.
type faultFile struct {
	File
	full     *atomic.Bool  // writes store half their bytes, then fail with ENOSPC
	delay    time.Duration // each sync takes this long, like a slow disk
	failSync *atomic.Bool  // syncs fail with EIO
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	if f.full != nil && f.full.Load() {
		n, _ := f.File.WriteAt(p[:len(p)/2], off)
		return n, syscall.ENOSPC
	}
	return f.File.WriteAt(p, off)
}

// Reserve fails like WriteAt on a full disk: a log synced after every
// append reserves its records' room when they are appended.
func (f *faultFile) Reserve(end int64) error {
	if f.full != nil && f.full.Load() {
		return syscall.ENOSPC
	}
	return f.File.Reserve(end)
}

func (f *faultFile) Sync() error {
	if f.delay > 0 {
		time.Sleep(f.delay) // simulated device latency, not synchronisation
	}
	if f.failSync != nil && f.failSync.Load() {
		return syscall.EIO
	}
	return f.File.Sync()
}

func TestDiskFullRefusesTheAppendAndLeavesNothingHalfWritten(t *testing.T) {
	dir := t.TempDir()
	var full atomic.Bool
	j, lb := open(t, dir, Options{WrapFile: func(f File) File { return &faultFile{File: f, full: &full} }})
	b := newBus(t, j, "s", 0, 0)
	publish(t, b, events(0, 3, 100)...)

	full.Store(true)
	_, _, err := b.Publish(events(3, 5, 100)...)
	if !errors.Is(err, ErrDiskFull) || !errors.Is(err, bus.ErrDiskFull) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Publish on a full disk = %v, want ErrDiskFull (bus.ErrDiskFull, which the router answers 507) wrapping ENOSPC", err)
	}
	if b.LastID() != 3 || b.Stats().RingLen != 3 {
		t.Errorf("after a refused publish: lastId %d, ring %d; want 3, 3", b.LastID(), b.Stats().RingLen)
	}
	segs := segmentsIn(t, dir)
	end := logEnd(t, segs[len(segs)-1])

	full.Store(false)
	if first, _ := publish(t, b, events(3, 1, 100)...); first != 4 {
		t.Errorf("first id after the disk has room = %d, want 4", first)
	}
	if after := logEnd(t, segs[len(segs)-1]); after <= end {
		t.Errorf("log did not grow after the disk had room: %d, then %d", end, after)
	}
	j.crash()

	j2, lb2 := open(t, dir, Options{})
	st, _, _, _ := j2.OpenBus("s", 0)
	if diff := cmp.Diff(span(1, 4), ids(retained(st))); diff != "" {
		t.Errorf("events after a refused publish and a crash (-want +got):\n%s", diff)
	}
	if log := lb.String() + lb2.String(); strings.Contains(log, "torn") || strings.Contains(log, "corrupt") {
		t.Errorf("the refused publish left a damaged record:\n%s", log)
	}
}

func TestGroupCommitSharesSyncsAcrossBuses(t *testing.T) {
	dir := t.TempDir()
	var syncs atomic.Int64
	j, _ := open(t, dir, Options{
		OnSync:   func() { syncs.Add(1) },
		WrapFile: func(f File) File { return &faultFile{File: f, delay: 2 * time.Millisecond} },
	})
	const writers, batches = 8, 25
	buses := make([]*bus.Bus, writers)
	for i := range buses {
		buses[i] = newBus(t, j, "s"+string(rune('a'+i)), 0, 0)
	}
	syncs.Store(0)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, b := range buses {
		wg.Go(func() {
			<-start
			for k := range batches {
				if _, _, err := b.Publish(events(k, 10, 100)...); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	appends := int64(writers * batches)
	if got := syncs.Load(); got > appends/2 {
		t.Errorf("%d syncs for %d concurrent appends, want at most %d (shared)", got, appends, appends/2)
	} else {
		t.Logf("%d syncs for %d appends", got, appends)
	}
	// Each Append returned after its record was durable.
	for _, b := range buses {
		if b.LastID() != batches*10 {
			t.Errorf("bus %s: lastId %d, want %d", b.Session(), b.LastID(), batches*10)
		}
	}
}

// collect takes frames from sub until it holds n events or the wait ends,
// and returns their ids.
func collect(t *testing.T, sub *bus.Subscription, n int) []uint64 {
	t.Helper()
	var ids []uint64
	deadline := time.After(10 * time.Second)
	for len(ids) < n {
		select {
		case <-sub.Ready():
		case <-deadline:
			t.Fatalf("got %d events, want %d", len(ids), n)
		}
		frames, _ := sub.Take(nil)
		for _, f := range frames {
			if !f.Reserved() {
				ids = append(ids, f.ID)
			}
		}
	}
	return ids
}

func TestGroupCommitSharesSyncsWithinOneSession(t *testing.T) {
	var syncs atomic.Int64
	h, _, _ := openHub(t, t.TempDir(), Options{
		OnSync:   func() { syncs.Add(1) },
		WrapFile: func(f File) File { return &faultFile{File: f, delay: 2 * time.Millisecond} },
	}, 0)
	if _, err := h.Create(bustest.SessionID("s"), 0); err != nil {
		t.Fatal(err)
	}
	sess, _ := h.Session("s")
	sub, err := sess.Bus.Subscribe(t.Context(), bus.SubscribeOptions{MaxQueued: 2048})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	gsub, err := h.Global().Subscribe(t.Context(), bus.SubscribeOptions{MaxQueued: 2048, Family: bustest.Family(t, "test")})
	if err != nil {
		t.Fatal(err)
	}
	defer gsub.Close()
	const publishers, each = 16, 15
	syncs.Store(0)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for p := range publishers {
		wg.Go(func() {
			<-start
			for k := range each {
				if _, _, err := h.Publish(bustest.SessionID("s"), events(p*each+k, 1, 100)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	const n = publishers * each
	if got := syncs.Load(); got > n/2 {
		t.Errorf("%d syncs for %d concurrent publishes to one session, want at most %d (shared)", got, n, n/2)
	} else {
		t.Logf("%d syncs for %d publishes", got, n)
	}
	if diff := cmp.Diff(span(1, n), collect(t, sub, n)); diff != "" {
		t.Errorf("the session's subscriber got ids out of order (-want +got):\n%s", diff)
	}
	if got := collect(t, gsub, n); !slices.IsSorted(got) || len(got) != n {
		t.Errorf("the global subscriber got %d ids, sorted %v", len(got), slices.IsSorted(got))
	}
}

func TestFailedSyncUnderConcurrentPublishersDeliversOnlyADurablePrefix(t *testing.T) {
	var failing atomic.Bool
	var syncs atomic.Int64
	h, _, _ := openHub(t, t.TempDir(), Options{
		OnSync: func() {
			// From the fifth sync on, the disk fails.
			if syncs.Add(1) == 4 {
				failing.Store(true)
			}
		},
		WrapFile: func(f File) File { return &faultFile{File: f, delay: time.Millisecond, failSync: &failing} },
	}, 0)
	if _, err := h.Create(bustest.SessionID("s"), 0); err != nil {
		t.Fatal(err)
	}
	sess, _ := h.Session("s")
	sub, err := sess.Bus.Subscribe(t.Context(), bus.SubscribeOptions{MaxQueued: 2048})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	syncs.Store(0)
	const publishers, each = 8, 20
	var mu sync.Mutex
	var acked []uint64
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Go(func() {
			for k := range each {
				_, last, err := h.Publish(bustest.SessionID("s"), events(p*each+k, 1, 100))
				if err != nil {
					return
				}
				mu.Lock()
				acked = append(acked, last)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if !failing.Load() {
		t.Fatal("the disk never failed")
	}
	shown := sess.Bus.LastID()
	var got []uint64
	if shown > 0 {
		got = collect(t, sub, int(shown))
	}
	if diff := cmp.Diff(span(1, shown), got); diff != "" {
		t.Errorf("delivered ids are not the prefix up to %d (-want +got):\n%s", shown, diff)
	}
	for _, id := range acked {
		if id > shown {
			t.Errorf("id %d was acknowledged but not delivered (last delivered %d)", id, shown)
		}
	}
	if _, _, err := h.Publish(bustest.SessionID("s"), events(0, 1, 10)); err == nil {
		t.Error("a publish after a failed sync succeeded")
	}
	t.Logf("%d acknowledged, %d delivered before the disk failed", len(acked), shown)
}

func TestEverySyncModeSyncsAsDocumented(t *testing.T) {
	tests := []struct {
		mode      string
		wantSyncs func(n int64) bool
	}{
		{SyncAlways, func(n int64) bool { return n >= 5 }},
		{SyncInterval, func(n int64) bool { return n >= 1 }},
		{SyncNever, func(n int64) bool { return n == 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			var syncs atomic.Int64
			j, _ := open(t, t.TempDir(), Options{Sync: tt.mode, SyncInterval: time.Millisecond, OnSync: func() { syncs.Add(1) }})
			b := newBus(t, j, "s", 0, 0)
			for i := range 5 {
				publish(t, b, events(i, 1, 10)...)
			}
			st, _, _, _ := j.OpenBus("s", 0)
			if tt.mode == SyncInterval {
				waitFor(t, func() bool { _, id := st.(*Store).Figures(); return id == 5 })
			}
			if got := syncs.Load(); !tt.wantSyncs(got) {
				t.Errorf("%d syncs for 5 appends", got)
			}
		})
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	bustest.Eventually(t, 10*time.Second, "the condition", cond)
}

func TestRetentionBoundsWhatIsOnDisk(t *testing.T) {
	tests := []struct {
		name     string
		ringSize int
		maxBytes int64
	}{
		{"by count", 50, 64 << 20},
		{"by bytes", 8000, 20_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			j, _ := open(t, dir, Options{})
			b := newBus(t, j, "s", tt.ringSize, tt.maxBytes)
			var sizes []int64
			for round := range 6 {
				for i := range 20 {
					publish(t, b, events(round*100+i*5, 5, 300)...)
				}
				if err := j.Checkpoint(); err != nil {
					t.Fatal(err)
				}
				count, bytes := onDisk(t, j, "s")
				st := b.Stats()
				if count != st.RingLen || count > tt.ringSize || bytes > tt.maxBytes {
					t.Errorf("round %d: %d events, %d bytes on disk; ring %d events; limits %d, %d",
						round, count, bytes, st.RingLen, tt.ringSize, tt.maxBytes)
				}
				sizes = append(sizes, fileSize(t, dir+"/"+dbName))
			}
			// Freed pages are reused: the file stops growing.
			if sizes[len(sizes)-1] > sizes[1] {
				t.Errorf("database grows with retention in force: %v", sizes)
			}
		})
	}
}

// onDisk counts a bus's events in the database and adds up their frames'
// sizes.
func onDisk(t testing.TB, j *Journal, session string) (count int, bytes int64) {
	t.Helper()
	j.mu.Lock()
	num := j.names[session]
	j.mu.Unlock()
	err := j.db.View(func(tx *bolt.Tx) error {
		b := eventsBucket(tx, num)
		if b == nil {
			return nil // never checkpointed
		}
		return b.ForEach(func(k, v []byte) error {
			evs, err := parseChunk(v)
			if err != nil {
				return err
			}
			for i, ev := range evs {
				count++
				bytes += int64(bus.FrameSize(keyID(k)+uint64(i), ev.typ, len(ev.env)))
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return count, bytes
}

func TestFiguresReportDiskBytesAndLastSyncedID(t *testing.T) {
	j, _ := open(t, t.TempDir(), Options{Sync: SyncNever})
	b := newBus(t, j, "s", 0, 0)
	publish(t, b, events(0, 4, 100)...)
	st, _, _, _ := j.OpenBus("s", 0)
	bytes, synced := st.(*Store).Figures()
	if bytes <= 0 || synced != 0 {
		t.Errorf("before any sync: Figures() = %d, %d; want > 0, 0", bytes, synced)
	}
	if err := j.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	n, _ := onDisk(t, j, "s")
	if _, synced = st.(*Store).Figures(); synced != 4 || n != 4 {
		t.Errorf("after a checkpoint: lastSyncedId %d, %d events on disk; want 4, 4", synced, n)
	}
}

func TestConcurrentAppendsScansAndCheckpoints(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, dir, Options{Sync: SyncInterval, SyncInterval: time.Millisecond, CheckpointBytes: 4 << 10})
	buses := []*bus.Bus{newBus(t, j, "", 100, 0), newBus(t, j, "a", 100, 0), newBus(t, j, "b", 30, 5000)}
	var wg sync.WaitGroup
	for _, b := range buses {
		wg.Go(func() {
			for i := range 200 {
				if _, _, err := b.Publish(events(i, 1+i%3, 150)...); err != nil {
					t.Error(err)
					return
				}
			}
		})
		wg.Go(func() {
			for range 50 {
				s, err := b.Subscribe(t.Context(), bus.SubscribeOptions{Cursor: new(uint64)})
				if err != nil {
					t.Error(err)
					return
				}
				s.Close()
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if err := j.Checkpoint(); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	want := map[string]uint64{}
	for _, b := range buses {
		want[b.Session()] = b.LastID()
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if segs := segmentsIn(t, dir); len(segs) != 0 {
		t.Errorf("log segments left after Close: %v", segs)
	}
	j2, _ := open(t, dir, Options{})
	for name, last := range want {
		st, _, _, _ := j2.OpenBus(name, 0)
		got := ids(retained(st))
		if len(got) == 0 || got[len(got)-1] != last || st.LastID() != last {
			t.Errorf("bus %q: restored ids end at %v, lastId %d; want %d", name, got[max(len(got)-1, 0):], st.LastID(), last)
		}
	}
}

func TestLogRollsOverFullSegments(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			// No compaction: the segments stay for the restart to read.
			j, _ := open(t, dir, Options{Sync: mode, SegmentBytes: 4096, CheckpointBytes: 1 << 40})
			b := newBus(t, j, "s", 0, 0)
			for i := range 40 {
				publish(t, b, events(i, 1, 300)...) // about 13 to a segment
			}
			publish(t, b, events(40, 30, 300)...) // larger than a segment
			publish(t, b, events(70, 1, 300)...)
			if n := len(segmentsIn(t, dir)); n < 4 {
				t.Errorf("%d segments, want several", n)
			}
			j.crash()
			j2, _ := open(t, dir, Options{Sync: mode, SegmentBytes: 4096})
			st, _, _, _ := j2.OpenBus("s", 0)
			if diff := cmp.Diff(span(1, 71), ids(retained(st))); diff != "" {
				t.Errorf("events across segments (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAppendAfterCloseIsTheStoreClosedErrorOfTheBus(t *testing.T) {
	j, _ := open(t, t.TempDir(), Options{})
	b := newBus(t, j, "s", 0, 0)
	publish(t, b, events(0, 1, 50)...)
	if err := j.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	_, _, err := b.Publish(events(1, 1, 50)...)
	if !errors.Is(err, ErrClosed) || !errors.Is(err, bus.ErrStoreClosed) {
		t.Fatalf("Publish after Close = %v, want ErrClosed (bus.ErrStoreClosed, which the router answers 503)", err)
	}
	if b.LastID() != 1 {
		t.Errorf("lastId after a refused publish = %d, want 1", b.LastID())
	}
}
