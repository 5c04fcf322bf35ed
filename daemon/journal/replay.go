package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/localbus/localbus/bus"
)

// logReplay is what replayLog found in the log.
type logReplay struct {
	nextSeq uint64               // the number of the segment to start
	corrupt bool                 // records were lost to corruption, not a torn tail
	kept    []oldSegment         // the segments kept, oldest first, until a checkpoint copies them
	segs    map[uint64][]segLast // per bus, the kept segments that hold its records past the database
	pend    map[uint64][]pendRec // per bus, the events restored from the log
	cutSeq  uint64               // the segment with a bad record, to cut at cutOff (0: none)
	cutOff  int64
	drop    []uint64 // the segments after it, and empty ones, to remove
	maps    [][]byte // the segments' mappings, which pend refers to
}

// oldSegment is a segment written before Open and the bytes of records
// it holds.
type oldSegment struct {
	seq   uint64
	bytes uint64
}

// cut cuts the bad record and what follows it off the log.
func (lr *logReplay) cut(dir string) error {
	if lr.cutSeq != 0 {
		if err := truncateRegular(filepath.Join(dir, segmentName(lr.cutSeq)), lr.cutOff); err != nil {
			return err
		}
	}
	for _, seq := range lr.drop {
		if err := os.Remove(filepath.Join(dir, segmentName(seq))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// pendRec is the events of a log record that Open restored in memory
// only, ids consecutive from first. Their types and envelopes alias the
// segment read; with splice, they are the session events that a record of
// the global bus referred to, and the copies' envelopes are spliced from
// them on demand (bus.AppendGlobalEnvelope, checked at Open). Frames are
// built when a replay first reaches them, as for the events the database
// holds.
type pendRec struct {
	first  uint64
	evs    []storedEvent
	splice bool
}

// at returns the type and envelope of event id, which r holds.
func (r *pendRec) at(id uint64) (string, []byte) {
	ev := r.evs[id-r.first]
	if !r.splice {
		return ev.typ, ev.env
	}
	env, _ := bus.AppendGlobalEnvelope(make([]byte, 0, len(ev.env)+32), ev.typ, ev.env, id)
	return ev.typ, env
}

// refSources returns the session events that the events of a refs record
// copy, which the events records read before it, held, hold, and the
// length of each copy's envelope (scratch is a buffer to splice them in,
// returned for reuse).
func refSources(rec record, held map[uint64][]record, scratch []byte) ([]storedEvent, []int, []byte, error) {
	evs := make([]storedEvent, 0, rec.count)
	lens := make([]int, 0, rec.count)
	err := eachRef(rec, held, func(src storedEvent, num, sid, id uint64) error {
		var ok bool
		if scratch, ok = bus.AppendGlobalEnvelope(scratch[:0], src.typ, src.env, id); !ok {
			return fmt.Errorf("bus %d: event %d is not a session's event", num, sid)
		}
		evs = append(evs, src)
		lens = append(lens, len(scratch))
		return nil
	})
	if err != nil {
		return nil, nil, scratch, err
	}
	return evs, lens, scratch, nil
}

// eachRef calls f, in order, with each session event that the events of a
// refs record copy (src, event sid of bus num, copied as id), found in
// held, the events records read before it; it fails when one is not
// there, or when f fails.
func eachRef(rec record, held map[uint64][]record, f func(src storedEvent, num, sid, id uint64) error) error {
	id := rec.firstID
	for _, r := range rec.refs {
		recs := held[r.num]
		for sid := r.first; sid < r.first+uint64(r.n); sid, id = sid+1, id+1 {
			// The last record that starts at or before sid holds it, if any.
			k := sort.Search(len(recs), func(i int) bool { return recs[i].firstID > sid }) - 1
			if k < 0 || sid-recs[k].firstID >= uint64(len(recs[k].events)) {
				return fmt.Errorf("bus %d: event %d, copied as event %d, is not in the log", r.num, sid, id)
			}
			if err := f(recs[k].events[sid-recs[k].firstID], r.num, sid, id); err != nil {
				return err
			}
		}
	}
	return nil
}

// replayLog is the one replay of the log: it applies, in order, the
// records that readSegments reads to the buses' windows, up to the first
// bad record. It adds to windows the events of the log that the database
// lacks (their sizes; the events themselves in logReplay.pend, which
// aliases the segments' mappings), advances the buses' last ids in metas,
// and marks in reset the buses whose records do not follow their last id.
// It writes nothing: the database is left as it is, and the segments stay
// until a checkpoint has copied them (see drainRecovered), so that a crash
// meanwhile replays them again. A bad record is logged with what it held;
// it and what follows it are cut off by logReplay.cut, once new epochs are
// on disk (recovery.persist).
func (j *Journal) replayLog(metas map[uint64]*busMeta, windows map[uint64]window, reset map[uint64]bool) (*logReplay, error) {
	seqs, err := segments(j.dir)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	lr := &logReplay{nextSeq: 1, segs: map[uint64][]segLast{}, pend: map[uint64][]pendRec{}}
	if len(seqs) == 0 {
		return lr, nil
	}
	lr.nextSeq = seqs[len(seqs)-1] + 1
	var (
		applied, lastNum, lastID uint64
		held                     = map[uint64][]record{} // every bus's events records so far, for refs
		scratch                  []byte
		orphans                  orphanCount
	)
	bad := func(i int, seq uint64, data []byte, off int, torn bool) {
		lr.corrupt = !torn
		j.logDropped(metas, seq, off, data[off:], torn, len(seqs)-1-i, lastNum, lastID)
		lr.cutSeq, lr.cutOff, lr.drop = seq, int64(off), seqs[i+1:]
		if off > 0 {
			lr.kept = append(lr.kept, oldSegment{seq: seq, bytes: uint64(off)})
		} else {
			lr.drop = seqs[i:]
			lr.cutSeq = 0
		}
	}
	read, stop := readSegments(j.dir, seqs)
	defer stop()
segments:
	for i, seq := range seqs {
		ps := <-read[i]
		lr.maps = append(lr.maps, ps.data)
		if ps.err != nil {
			for _, m := range lr.maps {
				unmapSegment(m)
			}
			return nil, fmt.Errorf("journal: replaying the log: %w", ps.err)
		}
		data, off := ps.data, 0
		for k, rec := range ps.recs {
			off = ps.offs[k]
			m := metas[rec.num]
			var lens []int
			var err error
			if rec.refs != nil && m != nil && rec.firstID+uint64(rec.count)-1 > m.LastID {
				if rec.events, lens, scratch, err = refSources(rec, held, scratch); err != nil {
					// Whole, but it names events the log does not hold.
					j.logger.Error("journal: a log record refers to events the log does not hold", "err", err)
					bad(i, seq, data, off, false)
					break segments
				}
			}
			if rec.refs == nil {
				held[rec.num] = append(held[rec.num], rec)
			}
			through := rec.firstID + uint64(rec.count) - 1
			if m == nil {
				orphans.add(rec.num, rec.count)
				continue
			}
			if rec.key != "" && !m.Global {
				// Its events are in the database or restored below: so is
				// its key, until a checkpoint copies it (keys.go).
				j.keysMu.Lock()
				j.holdKeyLocked(m.Session, rec.key, rec.keyVal, seq)
				j.keysMu.Unlock()
			}
			if through <= m.LastID {
				continue
			}
			w := windows[rec.num]
			if rec.firstID > m.LastID+1 {
				// Events lost: what the bus retains stays contiguous.
				w, lr.pend[rec.num] = window{}, nil
				reset[rec.num] = true
			}
			skip := 0
			if rec.firstID <= m.LastID {
				skip = int(m.LastID + 1 - rec.firstID)
			}
			for k, ev := range rec.events[skip:] {
				id, n := rec.firstID+uint64(skip+k), len(ev.env)
				if lens != nil {
					n = lens[skip+k]
				}
				w.push(id, entry{size: uint32(bus.FrameSize(id, "", len(ev.typ)+n)), disk: uint32(eventLen(ev.typ, n))})
			}
			lr.pend[rec.num] = append(lr.pend[rec.num], pendRec{first: rec.firstID + uint64(skip), evs: rec.events[skip:], splice: rec.refs != nil})
			windows[rec.num] = w
			m.LastID = through
			sl := lr.segs[rec.num]
			if k := len(sl); k > 0 && sl[k-1].seq == seq {
				sl[k-1].last = through
				if rec.refs != nil {
					sl[k-1].refs = 0
				}
			} else {
				// What a restored record refers to is not kept: the
				// first checkpoint copies it (refs 0).
				refs := uint64(noRefs)
				if rec.refs != nil {
					refs = 0
				}
				lr.segs[rec.num] = append(sl, segLast{seq: seq, last: through, refs: refs})
			}
			applied += uint64(rec.count)
			lastNum, lastID = rec.num, through
		}
		off = ps.end
		if ps.tail != tailClean {
			bad(i, seq, data, off, ps.tail == tailTorn)
			break
		}
		if off == 0 {
			lr.drop = append(lr.drop, seq) // holds nothing
			continue
		}
		lr.kept = append(lr.kept, oldSegment{seq: seq, bytes: uint64(off)})
	}
	if applied > 0 {
		j.logger.Info("journal: replayed the log", "events", applied, "segments", len(seqs))
	}
	orphans.log(j.logger)
	return lr, nil
}

// orphanCount counts the log records of buses the database does not name:
// sessions deleted after their records were written (their segments had
// not been removed yet), or buses a lost database took with it. Replay
// skips them; it says so, once.
type orphanCount struct {
	buses           map[uint64]bool
	records, events uint64
}

func (o *orphanCount) add(num uint64, count int) {
	if o.buses == nil {
		o.buses = map[uint64]bool{}
	}
	o.buses[num] = true
	o.records++
	o.events += uint64(count)
}

func (o *orphanCount) log(l *slog.Logger) {
	if o.records == 0 {
		return
	}
	nums := slices.Sorted(maps.Keys(o.buses))
	if len(nums) > 16 {
		nums = nums[:16]
	}
	l.Info("journal: skipped the log's records of buses the database no longer names (deleted sessions)",
		"buses", len(o.buses), "records", o.records, "events", o.events, "busNumbers", nums)
}

// logDropped reports a bad record and what it held, as far as its header
// can be read.
func (j *Journal) logDropped(metas map[uint64]*busMeta, seq uint64, off int, rest []byte, torn bool, laterSegments int, lastNum, lastID uint64) {
	args := []any{"segment", segmentName(seq), "offset", off, "bytesDropped", len(rest)}
	if laterSegments > 0 {
		args = append(args, "laterSegmentsDropped", laterSegments)
	}
	if len(rest) >= recHeaderLen+payloadHeadLen {
		if r, err := decodePayload(rest[recHeaderLen:], false); err == nil {
			if m := metas[r.num]; m != nil {
				args = append(args, "droppedSession", sessionName(m), "droppedFirstId", r.firstID, "droppedCount", r.count)
			}
		}
	}
	if m := metas[lastNum]; m != nil && lastID != 0 {
		args = append(args, "lastIntactSession", sessionName(m), "lastIntactId", lastID)
	}
	if torn {
		j.logger.Warn("journal: cut off a torn record at the end of the log", args...)
	} else {
		j.logger.Error("journal: corrupt log record; dropped it and everything after it (every bus gets a new epoch)", args...)
	}
}

func sessionName(m *busMeta) string {
	if m.Global {
		return "(global)"
	}
	return m.Session
}

// busesInLog names the buses whose records the log holds, when the
// database that named them is gone: a refs record, or an event with a
// "seq", is the global bus's; an event with a "session" and no "seq" is
// that session's; the global bus's own events have neither. A bus whose
// records disagree is left out (its records are then dropped), and of two
// buses that claim one session, the newer one is kept. Every bus found is
// on a new epoch, with the default ring size.
func (j *Journal) busesInLog() map[uint64]*busMeta {
	seqs, _ := segments(j.dir)
	type claim struct {
		name   string
		global bool
		bad    bool
	}
	claims := map[uint64]*claim{}
	for i, seq := range seqs {
		sr := readSegment(filepath.Join(j.dir, segmentName(seq)), i == len(seqs)-1)
		for _, rec := range sr.recs {
			var c claim
			if rec.refs != nil {
				c.global = true
			} else {
				var head struct {
					Session *string `json:"session"`
					Seq     *uint64 `json:"seq"`
				}
				if json.Unmarshal(rec.events[0].env, &head) != nil {
					c.bad = true
				} else if head.Seq != nil || head.Session == nil {
					c.global = true
				} else {
					c.name = *head.Session
					if _, err := bus.ParseSessionID(c.name); err != nil {
						c.bad = true
					}
				}
			}
			if old, ok := claims[rec.num]; !ok {
				claims[rec.num] = &c
			} else if old.global != c.global || old.name != c.name || c.bad {
				old.bad = true
			}
		}
		unmapSegment(sr.data)
	}
	owner := map[string]uint64{} // session ("" global) → newest bus claiming it
	for num, c := range claims {
		if c.bad {
			j.logger.Error("journal: cannot tell which bus the log's records belong to; dropping them", "bus", num)
			continue
		}
		if prev, ok := owner[c.name]; !ok || num > prev {
			owner[c.name] = num
		}
	}
	out := map[uint64]*busMeta{}
	for name, num := range owner {
		out[num] = &busMeta{Session: name, Global: name == "", Epoch: bus.NewEpoch()}
	}
	return out
}
