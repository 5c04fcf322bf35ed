package bus_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
)

var _ bus.Store = (*bus.Ring)(nil)

// fataler is what testing.TB and *rapid.T have in common that helpers need.
type fataler interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// frame returns an event frame with the given id whose encoded size is
// at least pad bytes more than the minimum.
func frame(tb fataler, id uint64, pad int) *bus.Frame {
	tb.Helper()
	f, err := bus.ParseFrame([]byte(sprintf(`{"id":%d,"type":"a:b","data":"%s"}`, id, strings.Repeat("x", pad))))
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// ids scans r from from and returns the ids it visits.
func ids(r *bus.Ring, from uint64) []uint64 {
	var out []uint64
	r.Scan(from, func(f *bus.Frame) bool {
		out = append(out, f.ID)
		return true
	})
	return out
}

func seq(from, to uint64) []uint64 {
	var out []uint64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func TestRingEvictsByCount(t *testing.T) {
	t.Parallel()
	r := bus.NewRing(3, 1<<20)
	var sizes []int64
	for id := uint64(1); id <= 5; id++ {
		f := frame(t, id, 0)
		sizes = append(sizes, int64(f.Size()))
		if err := r.Append([]*bus.Frame{f}); err != nil {
			t.Fatal(err)
		}
	}
	if r.Len() != 3 || r.Earliest() != 3 || r.LastID() != 5 {
		t.Errorf("Len %d, Earliest %d, LastID %d; want 3, 3, 5", r.Len(), r.Earliest(), r.LastID())
	}
	if want := sizes[2] + sizes[3] + sizes[4]; r.Bytes() != want {
		t.Errorf("Bytes() = %d, want %d", r.Bytes(), want)
	}
	if diff := cmp.Diff(seq(3, 5), ids(r, 0)); diff != "" {
		t.Errorf("Scan(0) mismatch (-want +got):\n%s", diff)
	}
}

func TestRingEvictsByBytes(t *testing.T) {
	t.Parallel()
	one := int64(frame(t, 1, 100).Size())
	r := bus.NewRing(100, 2*one+one/2)
	r.Append([]*bus.Frame{frame(t, 1, 100), frame(t, 2, 100), frame(t, 3, 100), frame(t, 4, 100)})
	if r.Len() != 2 || r.Earliest() != 3 || r.Bytes() != 2*one {
		t.Errorf("Len %d, Earliest %d, Bytes %d; want 2, 3, %d", r.Len(), r.Earliest(), r.Bytes(), 2*one)
	}
}

func TestRingKeepsNewestFrameOverByteLimit(t *testing.T) {
	t.Parallel()
	r := bus.NewRing(10, 1)
	for id := uint64(1); id <= 3; id++ {
		r.Append([]*bus.Frame{frame(t, id, 1000)})
		if r.Len() != 1 || r.Earliest() != id || r.LastID() != id {
			t.Fatalf("after %d: Len %d, Earliest %d, LastID %d; want 1, %d, %d", id, r.Len(), r.Earliest(), r.LastID(), id, id)
		}
	}
}

func TestRingEmpty(t *testing.T) {
	t.Parallel()
	r := bus.NewRing(10, 1<<20)
	if r.Len() != 0 || r.Bytes() != 0 || r.Earliest() != 0 || r.LastID() != 0 {
		t.Errorf("empty ring: Len %d, Bytes %d, Earliest %d, LastID %d", r.Len(), r.Bytes(), r.Earliest(), r.LastID())
	}
	if got := ids(r, 0); got != nil {
		t.Errorf("Scan on an empty ring visited %v", got)
	}
}

func TestRingScanStart(t *testing.T) {
	t.Parallel()
	r := bus.NewRing(16, 1<<20)
	for id := uint64(1); id <= 40; id++ { // wraps the buffer twice and more
		r.Append([]*bus.Frame{frame(t, id, 0)})
	}
	tests := []struct {
		from uint64
		want []uint64
	}{
		{0, seq(25, 40)},
		{1, seq(25, 40)},
		{24, seq(25, 40)},
		{25, seq(25, 40)},
		{26, seq(26, 40)},
		{33, seq(33, 40)},
		{40, []uint64{40}},
		{41, nil},
		{1000, nil},
		{math.MaxUint64, nil},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, ids(r, tt.from)); diff != "" {
			t.Errorf("Scan(%d) mismatch (-want +got):\n%s", tt.from, diff)
		}
	}
	var visited []uint64
	r.Scan(30, func(f *bus.Frame) bool {
		visited = append(visited, f.ID)
		return f.ID < 32
	})
	if diff := cmp.Diff(seq(30, 32), visited); diff != "" {
		t.Errorf("Scan stopping at 32 mismatch (-want +got):\n%s", diff)
	}
}

func TestRingSetLimits(t *testing.T) {
	t.Parallel()
	r := bus.NewRing(100, 1<<20)
	for id := uint64(1); id <= 50; id++ {
		r.Append([]*bus.Frame{frame(t, id, 0)})
	}
	r.SetLimits(10, 1<<20)
	if r.Len() != 10 || r.Earliest() != 41 {
		t.Errorf("shrunk to 10: Len %d, Earliest %d; want 10, 41", r.Len(), r.Earliest())
	}
	one := int64(frame(t, 99, 0).Size())
	r.SetLimits(10, 3*one)
	if r.Len() != 3 || r.Earliest() != 48 || r.Bytes() != 3*one {
		t.Errorf("shrunk to 3 frames of bytes: Len %d, Earliest %d, Bytes %d; want 3, 48, %d", r.Len(), r.Earliest(), r.Bytes(), 3*one)
	}
	r.SetLimits(0, 0) // raised to 1
	if r.Len() != 1 || r.Earliest() != 50 {
		t.Errorf("limits 0: Len %d, Earliest %d; want 1, 50", r.Len(), r.Earliest())
	}
	r.SetLimits(1000, 1<<20) // grow again
	for id := uint64(51); id <= 100; id++ {
		r.Append([]*bus.Frame{frame(t, id, 0)})
	}
	if diff := cmp.Diff(seq(50, 100), ids(r, 0)); diff != "" {
		t.Errorf("after growing back mismatch (-want +got):\n%s", diff)
	}
}

func TestRingRestore(t *testing.T) {
	t.Parallel()
	r := bus.NewRing(10, 1<<20)
	r.Restore(41)
	if r.LastID() != 41 || r.Earliest() != 0 || r.Len() != 0 {
		t.Errorf("restored: LastID %d, Earliest %d, Len %d; want 41, 0, 0", r.LastID(), r.Earliest(), r.Len())
	}
	r.Append([]*bus.Frame{frame(t, 42, 0)})
	if r.Earliest() != 42 || r.LastID() != 42 {
		t.Errorf("after append: Earliest %d, LastID %d; want 42, 42", r.Earliest(), r.LastID())
	}
	defer func() {
		if recover() == nil {
			t.Error("Restore on a non-empty ring did not panic")
		}
	}()
	r.Restore(7)
}

// TestRingMatchesModel checks the ring against a plain slice under random
// appends, limit changes and scans.
func TestRingMatchesModel(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		maxLen := rapid.IntRange(1, 40).Draw(t, "maxLen")
		maxBytes := rapid.Int64Range(1, 4000).Draw(t, "maxBytes")
		r := bus.NewRing(maxLen, maxBytes)
		var model []*bus.Frame
		var lastID uint64
		trim := func() {
			var bytes int64
			for _, f := range model {
				bytes += int64(f.Size())
			}
			for len(model) > maxLen || (bytes > maxBytes && len(model) > 1) {
				bytes -= int64(model[0].Size())
				model = model[1:]
			}
		}
		t.Repeat(map[string]func(*rapid.T){
			"append": func(t *rapid.T) {
				n := rapid.IntRange(1, 5).Draw(t, "n")
				var batch []*bus.Frame
				for range n {
					lastID++
					batch = append(batch, frame(t, lastID, rapid.IntRange(0, 300).Draw(t, "pad")))
				}
				r.Append(batch)
				model = append(model, batch...)
				trim()
			},
			"setLimits": func(t *rapid.T) {
				maxLen = rapid.IntRange(1, 40).Draw(t, "maxLen")
				maxBytes = rapid.Int64Range(1, 4000).Draw(t, "maxBytes")
				r.SetLimits(maxLen, maxBytes)
				trim()
			},
			"scan": func(t *rapid.T) {
				from := rapid.Uint64Range(0, lastID+2).Draw(t, "from")
				var want []uint64
				for _, f := range model {
					if f.ID >= from {
						want = append(want, f.ID)
					}
				}
				if got := ids(r, from); !cmp.Equal(want, got) {
					t.Fatalf("Scan(%d) = %v, want %v", from, got, want)
				}
			},
			"": func(t *rapid.T) {
				var bytes int64
				for _, f := range model {
					bytes += int64(f.Size())
				}
				var earliest uint64
				if len(model) > 0 {
					earliest = model[0].ID
				}
				if r.Len() != len(model) || r.Bytes() != bytes || r.Earliest() != earliest || r.LastID() != lastID {
					t.Fatalf("ring Len %d Bytes %d Earliest %d LastID %d; model %d %d %d %d",
						r.Len(), r.Bytes(), r.Earliest(), r.LastID(), len(model), bytes, earliest, lastID)
				}
			},
		})
	})
}

// TestRingScanStartIsConstantTime compares the cost of scanning only the
// newest frame of a small ring and of a large one: a scan that walked to
// its start would be thousands of times slower on the large ring.
func TestRingScanStartIsConstantTime(t *testing.T) {
	if testing.Short() {
		t.Skip("timing")
	}
	t.Parallel()
	cost := func(n int) time.Duration {
		r := bus.NewRing(n, 1<<40)
		f := frame(t, 1, 0)
		for id := uint64(1); id <= uint64(n); id++ {
			g := *f // the ring reads only ID and Size
			g.ID = id
			r.Append([]*bus.Frame{&g})
		}
		last := r.LastID()
		best := time.Duration(math.MaxInt64)
		for range 5 {
			start := time.Now()
			for range 1000 {
				r.Scan(last, func(*bus.Frame) bool { return true })
			}
			best = min(best, time.Since(start))
		}
		return best
	}
	small, large := cost(16), cost(200_000)
	if large > 100*small+time.Millisecond {
		t.Errorf("1000 scans of the newest frame: %v on 200000 frames, %v on 16: the start is not found in O(1)", large, small)
	}
}

func TestBusTrimToEvictsOldestButKeepsTheLastEvent(t *testing.T) {
	var total int64
	b, err := bus.New(bus.Options{Session: bustest.SessionID("s"), OnRingBytes: func(d int64) { total += d }})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, _, err := b.Publish(bus.Event{Type: bustest.Type("a:b"), Data: []byte(`"` + strings.Repeat("x", 100) + `"`)}); err != nil {
			t.Fatal(err)
		}
	}
	full := b.RingBytes()
	if total != full || full != b.Stats().RingBytes {
		t.Fatalf("OnRingBytes summed %d, RingBytes %d, Stats %d", total, full, b.Stats().RingBytes)
	}
	if got := b.TrimTo(full / 2); got > full/2 || b.EarliestID() <= 1 || total != got {
		t.Fatalf("TrimTo(%d) = %d, earliest %d, reported %d", full/2, got, b.EarliestID(), total)
	}
	b.TrimTo(0)
	if st := b.Stats(); st.RingLen != 1 || st.EarliestID != 10 {
		t.Fatalf("after TrimTo(0) the ring holds %d from %d, want the last event alone", st.RingLen, st.EarliestID)
	}
	b.Close()
	if total != 0 {
		t.Fatalf("after Close the bus still counts %d bytes", total)
	}
}
