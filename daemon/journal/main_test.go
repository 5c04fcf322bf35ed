package journal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// logBuf collects a journal's log for assertions.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// open opens a journal in dir; it is closed when the test ends unless the
// test closed or crashed it first.
func open(t testing.TB, dir string, o Options) (*Journal, *logBuf) {
	t.Helper()
	lb := new(logBuf)
	o.Dir = dir
	if o.SegmentBytes == 0 {
		o.SegmentBytes = 1 << 20
	}
	o.Logger = slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))
	j, err := Open(o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { j.Close() })
	return j, lb
}

// crash stops j as a killed process would: the log's writes stay, nothing
// is checkpointed or synced, no clean mark.
func (j *Journal) crash() {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return
	}
	j.closed = true
	j.mu.Unlock()
	close(j.stop)
	j.wg.Wait()
	j.wal.close()
	j.db.Close()
}

// newBus opens session's store in j and a bus on it.
func newBus(t testing.TB, j *Journal, session string, ringSize int, ringBytes int64) *bus.Bus {
	t.Helper()
	st, epoch, rs, err := j.OpenBus(session, ringSize)
	if err != nil {
		t.Fatalf("OpenBus(%q): %v", session, err)
	}
	if rs > 0 {
		ringSize = rs
	}
	b, err := bus.New(bus.Options{Session: bustest.SessionID(session), Epoch: epoch, Store: st, RingSize: ringSize, RingMaxBytes: ringBytes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// events makes n events of about size bytes of data, numbered from k.
func events(k, n, size int) []bus.Event {
	evs := make([]bus.Event, n)
	pad := strings.Repeat("x", max(size-20, 0))
	for i := range evs {
		evs[i] = bus.Event{Type: bustest.Type("test:ev"), Data: json.RawMessage(fmt.Sprintf(`{"n":%d,"p":%q}`, k+i, pad))}
	}
	return evs
}

func publish(t testing.TB, b *bus.Bus, evs ...bus.Event) (first, last uint64) {
	t.Helper()
	first, last, err := b.Publish(evs...)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	return first, last
}

// retained returns the frames a store retains, in order.
func retained(st bus.Store) []*bus.Frame {
	var out []*bus.Frame
	st.Scan(0, func(f *bus.Frame) bool {
		out = append(out, f)
		return true
	})
	return out
}

// ids returns the ids of frames.
func ids(frames []*bus.Frame) []uint64 {
	out := make([]uint64, len(frames))
	for i, f := range frames {
		out[i] = f.ID
	}
	return out
}

func span(first, last uint64) []uint64 {
	var out []uint64
	for id := first; id <= last; id++ {
		out = append(out, id)
	}
	return out
}

// segmentsIn returns the paths of dir's log segments.
func segmentsIn(t testing.TB, dir string) []string {
	t.Helper()
	seqs, err := segments(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range seqs {
		out = append(out, filepath.Join(dir, segmentName(s)))
	}
	return out
}

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// logEnd returns the offset past the last whole record of a segment file.
func logEnd(t testing.TB, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return cutRecords(data, true).end
}

// setHooks gives the journal in dir the test hooks h (see hooks), until the
// test ends or setHooks is called again.
func setHooks(t testing.TB, dir string, h *hooks) {
	t.Helper()
	hooksByDir.Store(dir, h)
	t.Cleanup(func() { hooksByDir.Delete(dir) })
}
