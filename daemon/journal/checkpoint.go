package journal

import (
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// checkpointLoop runs compactions and checkpoints until Close: first the
// copy of the log an earlier run left (drainRecovered), then one at every
// tick, and a compaction whenever an append finds the log past compactAt.
func (j *Journal) checkpointLoop() {
	t := time.NewTicker(j.opts.CheckpointInterval)
	defer t.Stop()
	failing := false
	quiet := j.wal.end() // the log's end at the last tick
	if err := j.drainRecovered(); err != nil {
		j.logger.Error("journal: checkpoint failed; the log keeps the events meanwhile", "err", err)
		failing = true
	}
	for {
		var err error
		select {
		case <-j.stop:
			return
		case <-t.C:
			// With the log following the rings, a checkpoint of
			// everything waits for a quiet log: under a stream of
			// publishes it would copy into the database what the rings
			// soon evict, and compaction bounds the log meanwhile.
			if end := j.wal.end(); j.adaptive && end != quiet {
				quiet = end
				err = j.compact()
			} else {
				err = j.Checkpoint()
			}
		case <-j.kick:
			err = j.compact()
		}
		switch {
		case err != nil && !failing:
			j.logger.Error("journal: checkpoint failed; the log keeps the events meanwhile", "err", err)
			failing = true
		case err == nil && failing:
			j.logger.Info("journal: checkpoint succeeded again")
			failing = false
		}
	}
}

// Checkpoint copies what the log holds into the database, applies
// retention there and removes every log segment. The journal runs it in
// the background every CheckpointInterval; tests call it to compact at once.
func (j *Journal) Checkpoint() error {
	if j.readOnly.Load() {
		return fmt.Errorf("%w: the journal is read-only until space returns", ErrDiskFull)
	}
	j.ckptMu.Lock()
	defer j.ckptMu.Unlock()
	if j.wal.end() == j.wal.start() && !j.anyEvicted() && !j.anyDropped() {
		return nil
	}
	if err := j.trimEvicted(); err != nil {
		return j.countCheckpoint(err)
	}
	seq, _, err := j.wal.rotate()
	if err != nil {
		return j.countCheckpoint(err)
	}
	return j.countCheckpoint(j.checkpointThrough(seq))
}

// drainRecovered copies into the database, one segment per transaction,
// the events of the log segments an earlier run wrote, which Open restored
// in memory only, and removes each segment once the database holds them
// durably: a crash meanwhile replays what is left. It stops early when the
// journal closes (Close checkpoints the rest).
func (j *Journal) drainRecovered() error {
	if j.recovered == 0 {
		return nil
	}
	for _, seg := range j.wal.held() {
		if seg.seq > j.recovered {
			break
		}
		select {
		case <-j.stop:
			return nil
		default:
		}
		j.ckptMu.Lock()
		err := j.countCheckpoint(j.checkpointThrough(seg.seq))
		j.ckptMu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// countCheckpoint notes the result of a checkpoint in the journal's
// figures and returns err.
func (j *Journal) countCheckpoint(err error) error {
	if err != nil {
		j.checkpointErrors.Add(1)
	} else {
		j.checkpoints.Add(1)
	}
	return err
}

// trimEvicted deletes from the database, in a transaction of its own, the
// events the buses have evicted since the last checkpoint: what a
// checkpoint then writes reuses their pages, rather than growing the file
// by as much. j.ckptMu must be held.
func (j *Journal) trimEvicted() error {
	type trim struct {
		s     *Store
		below uint64
	}
	var trims []trim
	for _, s := range j.storeList() {
		s.mu.Lock()
		below := s.win.earliest()
		if below == 0 {
			below = s.lastID + 1
		}
		below = min(below, s.ckptID+1) // the database holds nothing past ckptID
		if !s.deleted && s.dbFirst != 0 && below > s.dbFirst {
			trims = append(trims, trim{s, below})
		}
		s.mu.Unlock()
	}
	if len(trims) == 0 {
		return nil
	}
	err := guard(func() error {
		return j.db.Update(func(tx *bolt.Tx) error {
			if h := j.hooks(); h != nil && h.failCheckpoint != nil {
				if err := h.failCheckpoint(); err != nil {
					return err
				}
			}
			var arena []byte
			for _, t := range trims {
				b := eventsBucket(tx, t.s.num)
				if b == nil {
					continue // deleted meanwhile
				}
				var err error
				if arena, err = trimBelow(b, t.below, arena); err != nil {
					return err
				}
			}
			return nil
		})
	})
	j.releaseDBPages()
	if err != nil {
		return classify(err)
	}
	for _, t := range trims {
		t.s.mu.Lock()
		t.s.dbFirst = max(t.s.dbFirst, t.below)
		t.s.mu.Unlock()
	}
	return nil
}

// work is what a checkpoint writes for one bus.
type work struct {
	s        *Store
	first    uint64        // the id of evs[0]
	evs      []storedEvent // the events to copy, ids consecutive
	earliest uint64        // delete ids below it
	through  uint64        // the database holds the bus's events up to this id after the checkpoint
}

// checkpointThrough copies into the database every bus's events that log
// segments up to seq hold and that the bus retains, applies retention
// there, then removes those segments. j.ckptMu must be held.
func (j *Journal) checkpointThrough(seq uint64) error {
	var works []work
	for _, s := range j.storeList() {
		s.mu.Lock()
		if s.deleted {
			s.mu.Unlock()
			continue
		}
		w := work{s: s, through: s.ckptID, earliest: s.win.earliest()}
		if w.earliest == 0 {
			w.earliest = s.lastID + 1
		}
		// The global bus's records may refer to session records in the
		// segments removed: those are copied too (refs.go).
		w.through = max(w.through, s.lastThrough(seq))
		// No reference may point into the segments being removed, even
		// if this checkpoint fails (see refsFor).
		s.logFloor = max(s.logFloor, w.through)
		if s.session == "" {
			j.retired.Store(max(j.retired.Load(), seq))
		}
		w.first = max(s.ckptID+1, s.win.first)
		for id := w.first; id <= w.through && s.win.n > 0; id++ {
			if f := s.win.at(int(id - s.win.first)).f; f != nil {
				w.evs = append(w.evs, storedEvent{typ: f.Type, env: f.JSON()})
			} else if typ, env, ok := s.pendAt(id); ok {
				w.evs = append(w.evs, storedEvent{typ: typ, env: env})
			} else {
				s.mu.Unlock()
				return fmt.Errorf("journal: bus %d: event %d, to checkpoint, is neither in memory nor in the log", s.num, id)
			}
		}
		unchanged := w.through == s.ckptID && w.earliest == s.dbFirst
		s.mu.Unlock()
		if !unchanged {
			works = append(works, w)
		}
	}
	n := 0
	for _, w := range works {
		for _, ev := range w.evs {
			n += eventLen(ev.typ, len(ev.env))
		}
		n += (len(w.evs)/chunkMaxEvents + 1) * chunkHeadLen
	}
	// bbolt keeps values until the commit: they are cut from one arena
	// whose bytes are not reused before it (a larger one is allocated if
	// needed). The next checkpoint reuses it: fresh memory costs page
	// faults.
	arena := j.arena[:0]
	if cap(arena) < n+n/8 {
		arena = make([]byte, 0, n+n/8)
	}
	// The keys logged in the segments removed go into the database with
	// their events (keys.go).
	keys, dropped := j.keysThrough(seq), j.takeDropped()
	// Opening checked every page: a panic here is damage done since, which
	// fails the checkpoint (the log keeps the events) rather than the
	// daemon.
	err := guard(func() error {
		return j.db.Update(func(tx *bolt.Tx) error {
			if h := j.hooks(); h != nil && h.failCheckpoint != nil {
				if err := h.failCheckpoint(); err != nil {
					return err
				}
			}
			if err := putKeys(tx, keys, dropped); err != nil {
				return err
			}
			for _, w := range works {
				m, err := getMeta(tx, w.s.num)
				if err != nil {
					return err
				}
				if m == nil {
					continue // deleted meanwhile
				}
				b, err := tx.Bucket(bucketEvents).CreateBucketIfNotExists(idKey(w.s.num))
				if err != nil {
					return err
				}
				b.FillPercent = 0.95 // keys only grow
				if len(w.evs) > 0 {
					arena, err = appendChunks(arena, w.first, len(w.evs),
						func(i int) (string, []byte) { return w.evs[i].typ, w.evs[i].env },
						func(id uint64, v []byte) error { return b.Put(idKey(id), v) })
					if err != nil {
						return err
					}
				}
				if arena, err = trimBelow(b, w.earliest, arena); err != nil {
					return err
				}
				if m.LastID != w.through {
					m.LastID = w.through
					if err := putMeta(tx, w.s.num, m); err != nil {
						return err
					}
				}
			}
			return nil
		})
	})
	j.releaseDBPages()
	if cap(arena) <= maxPooledArena {
		j.arena = arena[:0]
	}
	if err != nil {
		j.undrop(dropped)
		return classify(err)
	}
	j.forgetKeys(keys)
	for _, w := range works {
		w.s.mu.Lock()
		w.s.ckptID = max(w.s.ckptID, w.through)
		w.s.syncedID = max(w.s.syncedID, w.through)
		w.s.dbFirst = w.earliest
		w.s.dropPendThrough(w.through)
		for len(w.s.segs) > 0 && w.s.segs[0].last <= w.through {
			w.s.segs = w.s.segs[1:] // in the database now
		}
		w.s.mu.Unlock()
	}
	j.releaseRecovered()
	h := j.hooks()
	if h != nil && h.afterCheckpoint != nil {
		h.afterCheckpoint(seq, false)
	}
	err = j.wal.removeThrough(seq)
	if err == nil && h != nil && h.afterCheckpoint != nil {
		h.afterCheckpoint(seq, true)
	}
	return err
}

// releaseRecovered unmaps the segments Open replayed once no store refers
// to them: every store's pend is empty (a deleted store's is dropped by
// Delete), and frames built from them are copies. j.ckptMu must be held,
// so that no checkpoint is reading them.
func (j *Journal) releaseRecovered() {
	if j.recoveredMaps == nil {
		return
	}
	for _, s := range j.storeList() {
		s.mu.Lock()
		pending := len(s.pend) > 0
		s.mu.Unlock()
		if pending {
			return
		}
	}
	for _, m := range j.recoveredMaps {
		unmapSegment(m)
	}
	j.recoveredMaps = nil
}

// trimBelow deletes the events of b below id: chunks that end below it,
// and the older part of the chunk that holds it, which is written again
// from id on (into arena, which it returns). Disk then holds what the ring
// does.
func trimBelow(b *bolt.Bucket, id uint64, arena []byte) ([]byte, error) {
	var dels [][]byte
	var keep []storedEvent
	c := b.Cursor()
	k, v := c.First()
	for k != nil && keyID(k) < id {
		dels = append(dels, idKey(keyID(k)))
		next, nv := c.Next()
		if next != nil && keyID(next) <= id {
			// Chunks do not overlap: this one ends below id. Its bytes
			// are not read, which would map its pages in.
			k, v = next, nv
			continue
		}
		// The last chunk below id may hold id and what follows.
		evs, err := parseChunk(v)
		if err != nil {
			break // damaged (Open drops those first): nothing to keep
		}
		if last := keyID(k) + uint64(len(evs)) - 1; last >= id {
			keep = evs[id-keyID(k):]
		}
		break
	}
	var err error
	if len(keep) > 0 {
		// keep aliases the page being rewritten: encode it first.
		var vals [][]byte
		arena, err = appendChunks(arena, id, len(keep),
			func(i int) (string, []byte) { return keep[i].typ, keep[i].env },
			func(_ uint64, v []byte) error { vals = append(vals, v); return nil })
		if err != nil {
			return arena, err
		}
		for _, k := range dels {
			if err := b.Delete(k); err != nil {
				return arena, err
			}
		}
		start := id
		for _, v := range vals {
			if err := b.Put(idKey(start), v); err != nil {
				return arena, err
			}
			start += uint64(binary.BigEndian.Uint32(v[4:]))
		}
		return arena, nil
	}
	for _, k := range dels {
		if err := b.Delete(k); err != nil {
			return arena, err
		}
	}
	return arena, nil
}

// deleteKeysBelow deletes the chunks of b whose key is below key.
func deleteKeysBelow(b *bolt.Bucket, key uint64) error {
	var dels [][]byte
	c := b.Cursor()
	for k, _ := c.First(); k != nil && keyID(k) < key; k, _ = c.Next() {
		dels = append(dels, idKey(keyID(k)))
	}
	for _, k := range dels {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
