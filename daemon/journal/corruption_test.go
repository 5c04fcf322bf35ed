package journal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/daemon/journal/journaltest"
)

// busState is what clients may have seen of a bus before a crash.
type busState struct {
	epoch  string
	lastID uint64
	frames map[uint64][]byte // id → SSE bytes
}

// corruptionTemplate publishes through a hub to two sessions (and so to
// the global bus, as references), with a checkpoint halfway, over several
// log segments, crashes, and returns the journal's files (the database cut
// to the pages in use) and what each bus held.
func corruptionTemplate(t *testing.T) (files map[string][]byte, before map[string]busState) {
	dir := t.TempDir()
	j, _ := open(t, dir, Options{SegmentBytes: 8 << 10, CheckpointInterval: time.Hour, CheckpointBytes: 1 << 30})
	h, err := hub.New(hub.Options{Journal: j, AutoCreate: true})
	if err != nil {
		t.Fatal(err)
	}
	pub := func(round int) {
		for _, s := range []string{"a", "b"} {
			evs := make([]bus.Event, 1+round%3)
			for i := range evs {
				evs[i] = bus.Event{Type: bustest.Type("t:e"), Data: json.RawMessage(fmt.Sprintf(`{"round":%d,"i":%d,"pad":"%s"}`, round, i, strings.Repeat("x", 60)))}
			}
			if _, _, err := h.Publish(bustest.SessionID(s), evs); err != nil {
				t.Fatal(err)
			}
		}
	}
	for round := range 10 {
		pub(round)
	}
	if err := j.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	for round := 10; round < 40; round++ {
		pub(round)
	}
	before = map[string]busState{}
	for _, name := range []string{"", "a", "b"} {
		st, epoch, _, err := j.OpenBus(name, 0)
		if err != nil {
			t.Fatal(err)
		}
		bs := busState{epoch: epoch, lastID: st.LastID(), frames: map[uint64][]byte{}}
		for _, f := range retained(st) {
			bs.frames[f.ID] = bytes.Clone(f.SSE())
		}
		before[name] = bs
	}
	j.crash()
	h.Close()
	files = map[string][]byte{}
	for _, p := range journaltest.Files(t, dir) {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(p) == dbName {
			m := newestMetaOf(data)
			data = data[:m.pgid*uint64(m.pageSize)]
		}
		files[filepath.Base(p)] = data
	}
	if len(files) < 3 {
		t.Fatalf("journal files %d, want a database and several segments", len(files))
	}
	return files, before
}

func newestMetaOf(db []byte) bbMetaPage {
	m0, _ := readMeta(db, 0)
	m1, ok1 := readMeta(db, int(m0.pageSize))
	if ok1 && m1.txid > m0.txid {
		return m1
	}
	return m0
}

// TestRandomCorruptionsNeverCrashHangOrReuseAnID damages one random byte
// of a crashed journal's files (database or log), N times with different
// seeds, and opens it: Open never panics, faults or hangs; a bus that
// keeps its epoch lost nothing a client may have seen (its last id did not
// go back, and every event it serves under that epoch is the one it served
// before), and its next id follows. It runs only when
// LOCALBUS_CORRUPTION_RUNS is set (say 10000; with TMPDIR on a tmpfs it
// takes a few minutes), and reports how the journal started.
func TestRandomCorruptionsNeverCrashHangOrReuseAnID(t *testing.T) {
	runs, _ := strconv.Atoi(os.Getenv("LOCALBUS_CORRUPTION_RUNS"))
	if runs <= 0 {
		t.Skip("set LOCALBUS_CORRUPTION_RUNS=N to run N random corruptions")
	}
	seed, _ := strconv.ParseUint(os.Getenv("LOCALBUS_CORRUPTION_SEED"), 10, 64)
	files, before := corruptionTemplate(t)
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	var counts struct{ done, clean, newEpochs, movedAside, refused, dbHits, logHits int }
	dir := filepath.Join(t.TempDir(), "j")
	for run := range runs {
		rng := rand.New(rand.NewPCG(seed, uint64(run)))
		counts.done++
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		var paths []string
		for _, name := range names {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, files[name], 0o600); err != nil {
				t.Fatal(err)
			}
			paths = append(paths, p)
		}
		damage := journaltest.RandomFlip(t, rng, paths)
		damage.Apply(t)
		if filepath.Base(damage.Path) == dbName {
			counts.dbHits++
		} else {
			counts.logHits++
		}

		var lb logBuf
		type opened struct {
			j   *Journal
			err error
		}
		done := make(chan opened, 1)
		go func() {
			j, err := Open(Options{Dir: dir, SegmentBytes: 8 << 10, CheckpointInterval: time.Hour,
				Logger: slog.New(slog.NewTextHandler(&lb, nil))})
			done <- opened{j, err}
		}()
		var o opened
		select {
		case o = <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("run %d (%v): Open hung", run, damage)
		}
		if o.err != nil {
			counts.refused++
			t.Errorf("run %d (%v): Open refused: %v", run, damage, o.err)
			continue
		}
		j := o.j
		changed := false
		for name, bs := range before {
			if err := checkNoReuse(j, name, bs, &changed); err != nil {
				t.Errorf("run %d (%v): %v\n%s", run, damage, err, lb.String())
			}
		}
		switch {
		case strings.Contains(lb.String(), "moved it aside"):
			counts.movedAside++
		case changed:
			counts.newEpochs++
		default:
			counts.clean++
		}
		if err := j.Close(); err != nil {
			t.Errorf("run %d (%v): Close: %v", run, damage, err)
		}
		if t.Failed() && run > 20 {
			break
		}
	}
	t.Logf("%d random single-byte corruptions (%d in the database, %d in the log): started clean %d, new epochs %d, moved aside %d, refused %d",
		counts.done, counts.dbHits, counts.logHits, counts.clean, counts.newEpochs, counts.movedAside, counts.refused)
}

// checkNoReuse checks the bus name after a restart against what it held
// before: under the same epoch nothing may differ or be missing, and its
// next id must follow the last one a client may have seen. It sets
// *changed when the epoch changed or the bus is gone.
func checkNoReuse(j *Journal, name string, bs busState, changed *bool) error {
	if _, ok := j.names[name]; !ok {
		*changed = true
		return nil
	}
	st, epoch, _, err := j.OpenBus(name, 0)
	if err != nil {
		return err
	}
	if epoch != bs.epoch {
		*changed = true
		return nil
	}
	if st.LastID() < bs.lastID {
		return fmt.Errorf("bus %q: lastId %d under the epoch clients saw with %d", name, st.LastID(), bs.lastID)
	}
	var bad error
	n := 0
	st.Scan(0, func(f *bus.Frame) bool {
		if want, ok := bs.frames[f.ID]; ok {
			n++
			if !bytes.Equal(f.SSE(), want) {
				bad = fmt.Errorf("bus %q: id %d under the same epoch is %q, was %q", name, f.ID, f.SSE(), want)
				return false
			}
		}
		return true
	})
	if bad != nil {
		return bad
	}
	if n != len(bs.frames) {
		return fmt.Errorf("bus %q: %d of %d retained events served under the same epoch", name, n, len(bs.frames))
	}
	b, err := bus.New(bus.Options{Session: bustest.SessionID(name), Epoch: epoch, Store: st})
	if err != nil {
		return err
	}
	defer b.Close()
	data := `{"after":"damage"}`
	if name == "" {
		// The global bus's own event, not a copy.
		data = `{"global":true}`
	}
	first, _, err := b.Publish(bus.Event{Type: bustest.Type("t:after"), Data: json.RawMessage(data)})
	if err != nil {
		return fmt.Errorf("bus %q: publish after the damage: %w", name, err)
	}
	if first != bs.lastID+1 {
		return fmt.Errorf("bus %q: next id %d under the same epoch, want %d", name, first, bs.lastID+1)
	}
	return nil
}
