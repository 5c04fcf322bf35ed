package journal

import (
	"bytes"
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
