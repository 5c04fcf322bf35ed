package journal

import "github.com/localbus/localbus/bus"

// The global bus's events copy the sessions' events, and each copy carries
// what it copies (bus.Frame.CopyOf: session, epoch, session id) from the moment
// the bus built it from the session's frame. So the global bus's log
// records refer to the session records instead of repeating the events: a
// publish then writes, and syncs, its events once, and recovery rebuilds
// the copies with bus.AppendGlobalEnvelope, the splice that built them.
//
// A reference must stay resolvable for as long as its record may be
// replayed, that is until a checkpoint has copied the global bus's events
// into the database. A checkpoint that removes the segments up to seq
// copies the global bus's events of those segments and of every record
// that refers into them (segLast.refs: the oldest segment a segment's
// records refer to), and sets Journal.retired to seq, in one critical
// section of the global store's lock; refsFor, under the same lock, refers
// only to session records in later segments. So a record replayed after a
// crash never refers to a segment that is gone.

// copyRun is a run of the global bus's frames that copy consecutive
// events of one session's store, ids from first on.
type copyRun struct {
	s     *Store
	first uint64
	n     int
}

// copyRunsOf groups frames of the global bus by the session events they
// copy; nil when one of them copies none (an announcement, say) or copies
// an event of a bus the journal no longer holds (its session was deleted,
// perhaps created again under a new epoch). It takes Journal.mu, so the
// caller must hold no store's lock.
func (j *Journal) copyRunsOf(frames []*bus.Frame) []copyRun {
	var out []copyRun
	var prev bus.CopyOf
	for _, f := range frames {
		o, ok := f.CopyOf()
		if !ok {
			return nil
		}
		if n := len(out); n > 0 && o.Session == prev.Session && o.Epoch == prev.Epoch && out[n-1].first+uint64(out[n-1].n) == o.Seq {
			out[n-1].n++
			continue
		}
		j.mu.Lock()
		num, held := j.names[o.Session]
		s := j.stores[num]
		j.mu.Unlock()
		if !held || o.Session == "" || s.epoch != o.Epoch {
			return nil
		}
		out = append(out, copyRun{s: s, first: o.Seq, n: 1})
		prev = o
	}
	return out
}

// refsFor returns runs as the runs of a refs record, and the oldest
// segment they refer to; or nil and noRefs when one of them cannot be
// referred to: the record must then hold the events. The global store's
// lock must be held.
func (j *Journal) refsFor(copies []copyRun) ([]refRun, uint64) {
	if copies == nil {
		return nil, noRefs
	}
	retired := j.retired.Load()
	runs := make([]refRun, len(copies))
	oldest := noRefs
	for i, o := range copies {
		seg, ok := o.s.holdsInLog(o.first, o.n, retired)
		if !ok {
			return nil, noRefs
		}
		oldest = min(oldest, seg)
		runs[i] = refRun{num: o.s.num, first: o.first, n: uint32(o.n)}
	}
	return runs, oldest
}

// holdsInLog reports whether the store retains n events from id first on,
// in log records of segments after retired, and the segment of the first.
func (s *Store) holdsInLog(first uint64, n int, retired uint64) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	last := first + uint64(n) - 1
	if s.deleted || s.win.n == 0 || first <= s.logFloor || first < s.win.first || last > s.lastID {
		return 0, false
	}
	var seg uint64
	for _, sl := range s.segs {
		if sl.last >= first {
			seg = sl.seq
			break
		}
	}
	return seg, seg > retired // also false for 0: no segment known to hold it
}
