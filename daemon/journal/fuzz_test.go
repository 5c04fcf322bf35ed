package journal

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/localbus/localbus/bus"
)

// FuzzReadRecord feeds arbitrary bytes, as a damaged log or database would
// hold, to the record and chunk decoders: they never panic, and what they accept is
// whole and re-encodes to the same bytes.
func FuzzReadRecord(f *testing.F) {
	frames := []*bus.Frame{
		bus.NewFrame(7, "a:b", []byte(`{"id":7,"v":1,"type":"a:b","data":null}`)),
		bus.NewFrame(8, "a:c", []byte(`{"id":8,"v":1,"type":"a:c","data":[1,2]}`)),
	}
	rec := appendRecord(nil, 3, frames)
	f.Add(rec)
	f.Add(rec[:len(rec)-5])
	f.Add(append(append([]byte(nil), rec...), rec...))
	f.Add(make([]byte, 16))
	f.Add(appendRefsRecord(nil, 0, 9, 3, []refRun{{num: 3, first: 7, n: 2}, {num: 4, first: 1, n: 1}}))
	chunk, _ := appendChunks(nil, 7, len(frames),
		func(i int) (string, []byte) { return frames[i].Type, frames[i].JSON() },
		func(uint64, []byte) error { return nil })
	f.Add(chunk)
	f.Fuzz(func(t *testing.T, p []byte) {
		evs, err := parseChunk(p)
		var lens []int
		n, serr := chunkSizes(p, func(tl, el int) { lens = append(lens, tl+el) })
		if (err == nil) != (serr == nil) || (err == nil && n != len(evs)) {
			t.Fatalf("parseChunk: %d events, %v; chunkSizes: %d, %v", len(evs), err, n, serr)
		}
		for i, ev := range evs {
			if lens[i] != len(ev.typ)+len(ev.env) {
				t.Errorf("event %d: chunkSizes %d, parseChunk %d", i, lens[i], len(ev.typ)+len(ev.env))
			}
		}
		if err == nil {
			var got []byte
			got, _ = appendChunks(nil, 1, len(evs),
				func(i int) (string, []byte) { return evs[i].typ, evs[i].env },
				func(uint64, []byte) error { return nil })
			if len(p) <= chunkMaxBytes && len(evs) <= chunkMaxEvents && !bytes.Equal(got, p) {
				t.Errorf("chunk %q re-encodes to %q", p, got)
			}
		}
		r, n, err := readRecord(p)
		if err != nil {
			return
		}
		if n < recHeaderLen+payloadHeadLen || n > len(p) {
			t.Fatalf("readRecord accepted %d bytes of %d", n, len(p))
		}
		if r.refs != nil {
			if got := appendRefsRecord(nil, r.num, r.firstID, r.count, r.refs); !bytes.Equal(got, p[:n]) {
				t.Errorf("refs record %q re-encodes to %q", p[:n], got)
			}
			return
		}
		var fs []*bus.Frame
		for i, ev := range r.events {
			fs = append(fs, bus.NewFrame(r.firstID+uint64(i), ev.typ, ev.env))
		}
		if len(fs) == 0 {
			return // a record of no events is never written, but is whole
		}
		if got := appendRecord(nil, r.num, fs); !bytes.Equal(got, p[:n]) {
			t.Errorf("record %q re-encodes to %q", p[:n], got)
		}
	})
}

// quietLogger discards what a journal logs.
var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// openWhatever opens the journal in dir, reads everything it restores and
// closes it: with any files in dir, it returns or fails, never panics or
// hangs.
func openWhatever(t *testing.T, dir string) {
	j, err := Open(Options{Dir: dir, Logger: quietLogger, SegmentBytes: 64 << 10})
	if err != nil {
		return
	}
	defer j.Close()
	for _, name := range append(j.Sessions(), "") {
		st, _, _, err := j.OpenBus(name, 0)
		if err != nil {
			t.Fatalf("OpenBus(%q): %v", name, err)
		}
		var last uint64
		lastID := st.LastID()
		st.Scan(0, func(f *bus.Frame) bool {
			if f.ID <= last || f.ID > lastID {
				t.Fatalf("bus %q: id %d after %d, lastId %d", name, f.ID, last, lastID)
			}
			last = f.ID
			return true
		})
	}
}

// seedJournal returns the files of a journal that holds events in its
// database and in its log, and of the global bus's copies as references.
func seedJournal(f *testing.F) (db, seg []byte) {
	dir := f.TempDir()
	j, _ := open(f, dir, Options{SegmentBytes: 64 << 10})
	g := newBus(f, j, "", 0, 0)
	s := newBus(f, j, "s", 0, 0)
	publish(f, s, events(0, 3, 50)...)
	publish(f, g, events(0, 2, 50)...)
	if err := j.Checkpoint(); err != nil {
		f.Fatal(err)
	}
	publish(f, s, events(3, 2, 50)...)
	publish(f, g, events(2, 1, 50)...)
	j.crash()
	var err error
	if db, err = os.ReadFile(filepath.Join(dir, dbName)); err != nil {
		f.Fatal(err)
	}
	// bbolt grows the file ahead of its pages: keep the pages in use.
	m0, _ := readMeta(db, 0)
	m1, ok1 := readMeta(db, int(m0.pageSize))
	if ok1 && m1.txid > m0.txid {
		m0 = m1
	}
	db = db[:m0.pgid*uint64(m0.pageSize)]
	segs := segmentsIn(f, dir)
	if seg, err = os.ReadFile(segs[len(segs)-1]); err != nil {
		f.Fatal(err)
	}
	// Segments are allocated whole; what follows the records is zero.
	end := len(seg)
	for end > 0 && seg[end-1] == 0 {
		end--
	}
	return db, seg[:end+16]
}

// FuzzOpenDatabase opens a journal whose journal.db is the input, beside a
// log segment: whatever the file holds, Open moves it aside or uses it,
// and never panics, faults or hangs (SPEC §11).
func FuzzOpenDatabase(f *testing.F) {
	db, seg := seedJournal(f)
	f.Add(db)
	f.Add(db[:len(db)/2])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, dbName), data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, segmentName(1)), seg, 0o600); err != nil {
			t.Fatal(err)
		}
		openWhatever(t, dir)
	})
}

// FuzzOpenLog opens a journal whose newest log segment is the input,
// beside an intact database: it never panics or hangs.
func FuzzOpenLog(f *testing.F) {
	db, seg := seedJournal(f)
	f.Add(seg)
	f.Add(seg[:len(seg)/2])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, dbName), db, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, segmentName(1)), data, 0o600); err != nil {
			t.Fatal(err)
		}
		openWhatever(t, dir)
	})
}
