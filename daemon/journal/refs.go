package journal

import "github.com/localbus/localbus/bus"

// The global bus's events copy the sessions' events (bus.IsGlobalCopy), so
// the global bus's log records refer to the session records instead of
// repeating them: a publish then writes, and syncs, its events once. A
// reference must stay resolvable for as long as its record may be replayed,
// that is until a checkpoint has copied the global bus's events into the
// database. Every checkpoint copies all the global bus retains, and sets
// Journal.retired to the last segment it removes, in one critical section
// of the global store's lock; refsFor, under the same lock, refers only to
// session records in later segments. So a record replayed after a crash
// never refers to a segment that is gone.

// origin is a run of the global bus's frames that copy consecutive events
// of one session: frames[at:at+n] copy the session's ids from first on.
type origin struct {
	s     *Store
	first uint64
	n     int
	at    int
}

// originsOf groups frames of the global bus by the session events they
// copy; nil when one of them copies none (an announcement, say) or its
// session is gone. It takes Journal.mu, so the caller must hold no store's
// lock.
func (j *Journal) originsOf(frames []*bus.Frame) []origin {
	var out []origin
	var name []byte
	for i, f := range frames {
		session, seq, ok := bus.GlobalOrigin(f)
		if !ok {
			return nil
		}
		if n := len(out); n > 0 && string(session) == string(name) && out[n-1].first+uint64(out[n-1].n) == seq {
			out[n-1].n++
			continue
		}
		j.mu.Lock()
		num, held := j.names[string(session)]
		s := j.stores[num]
		j.mu.Unlock()
		if !held || len(session) == 0 {
			return nil
		}
		out = append(out, origin{s: s, first: seq, n: 1, at: i})
		name = session
	}
	return out
}

// refsFor returns origins as the runs of a refs record, or nil when one of
// them cannot be referred to: the record must then hold the events. The
// global store's lock must be held.
func (j *Journal) refsFor(origins []origin, frames []*bus.Frame) []refRun {
	if origins == nil {
		return nil
	}
	retired := j.retired.Load()
	runs := make([]refRun, len(origins))
	for i, o := range origins {
		if !o.s.holdsCopied(o.first, frames[o.at:o.at+o.n], retired) {
			return nil
		}
		runs[i] = refRun{num: o.s.num, first: o.first, n: uint32(o.n)}
	}
	return runs
}

// holdsCopied reports whether the store retains the events that copies
// copy, ids from first on, each exactly, in log records of segments after
// retired.
func (s *Store) holdsCopied(first uint64, copies []*bus.Frame, retired uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	last := first + uint64(len(copies)) - 1
	if s.deleted || s.win.n == 0 || first <= s.logFloor || first < s.win.first || last > s.lastID {
		return false
	}
	var seg uint64
	for _, sl := range s.segs {
		if sl.last >= first {
			seg = sl.seq
			break
		}
	}
	if seg <= retired {
		return false // also 0: no segment known to hold it
	}
	base := int(first - s.win.first)
	for i, c := range copies {
		e := s.win.at(base + i)
		if e.f == nil || !bus.IsGlobalCopy(c, e.f) {
			return false
		}
	}
	return true
}
