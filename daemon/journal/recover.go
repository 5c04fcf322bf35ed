package journal

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/localbus/localbus/bus"
	bolt "go.etcd.io/bbolt"
)

// recovery is what Open makes of the state dir (SPEC §11): the buses'
// settings, the events the database and the log hold, and the verdicts on
// both. Reading them writes nothing but what reading needs (a database
// that cannot be read is moved aside; an older format is upgraded);
// persist then makes the disk agree with them. When persist fails for lack
// of space the journal is read-only: it serves what the recovery restored,
// and persist runs again before the first append (tryWritable). So
// read-only is a flag of the one recovery, whose verdicts it shares.
type recovery struct {
	aside    bool                // the database was moved aside: the buses came from the log
	metas    map[uint64]*busMeta // the buses, last ids advanced over the log
	dbLast   map[uint64]uint64   // per bus, the last id the database holds
	drop     map[uint64]uint64   // per bus, delete the chunks with keys below this (scan)
	newEpoch map[uint64]bool     // the buses put on a new epoch, to write
	lr       *logReplay
}

// recover reads the database and the log and builds the stores (see
// recovery). A database that cannot be read, whatever is wrong with it, is
// moved aside, and the journal starts again from what the log holds, on
// new epochs.
func (j *Journal) recover() (*recovery, error) {
	aside, err := j.openDB()
	if err != nil {
		return nil, err
	}
	var rc *recovery
	err = guard(func() (err error) { rc, err = j.read(aside); return err })
	if err == nil || aside || !isDamage(err) {
		return rc, err
	}
	j.db.Close()
	j.db = nil
	if err := j.moveAside(err); err != nil {
		return nil, err
	}
	if j.db, err = openBolt(filepath.Join(j.dir, dbName)); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	err = guard(func() (err error) { rc, err = j.read(true); return err })
	return rc, err
}

// loadState reads the database's state, upgrading an older format first
// and refusing a newer one.
func (j *Journal) loadState() (*dbState, error) {
	var st *dbState
	load := func() error {
		return j.db.View(func(tx *bolt.Tx) (err error) { st, err = loadState(tx); return err })
	}
	if err := load(); err != nil {
		return nil, fmt.Errorf("journal: %w", classify(err))
	}
	switch {
	case st.format > formatVersion():
		return nil, &FormatError{Dir: j.dir, Stored: st.format, Known: formatVersion()}
	case st.format < formatVersion():
		if err := j.upgrade(st.format); err != nil {
			return nil, err
		}
		if err := load(); err != nil {
			return nil, fmt.Errorf("journal: %w", classify(err))
		}
	}
	return st, nil
}

// read is recover once the database is open; aside says it was just moved
// aside, so that the buses are to be found in the log.
func (j *Journal) read(aside bool) (*recovery, error) {
	st, err := j.loadState()
	if err != nil {
		return nil, err
	}
	rc := &recovery{aside: aside, metas: st.metas, dbLast: map[uint64]uint64{}, newEpoch: map[uint64]bool{}}
	j.nextNum = st.nextNum
	if aside {
		// The buses are gone with the database: the log names them.
		for num, m := range j.busesInLog() {
			rc.metas[num] = m
			j.nextNum = max(j.nextNum, num+1)
		}
	}
	// The database's last ids, before the log is replayed over them in
	// memory: what the database holds until a checkpoint copies the rest.
	for num, m := range rc.metas {
		rc.dbLast[num] = m.LastID
	}
	reset := map[uint64]bool{}
	windows, drop, err := j.scan(rc.metas, reset)
	if err != nil {
		return nil, err
	}
	rc.drop = drop
	dbFirst := make(map[uint64]uint64, len(windows))
	for num, w := range windows {
		dbFirst[num] = w.earliest()
	}
	if rc.lr, err = j.replayLog(rc.metas, windows, reset); err != nil {
		return nil, err
	}
	resetAll := aside || rc.lr.corrupt || (!st.fresh && !st.clean && st.mode != SyncAlways)
	if aside {
		var names []string
		for _, m := range rc.metas {
			names = append(names, sessionName(m))
		}
		sort.Strings(names)
		j.logger.Warn("journal: restored what the log holds (every bus is on a new epoch)", "buses", names)
	}
	if !st.fresh && !st.clean {
		j.logger.Warn("journal: the last run did not stop cleanly", "sync", st.mode, "newEpochs", resetAll)
	}
	// A new epoch is chosen now, and written by persist before the log's
	// bad tail is cut off and before any id is assigned under it.
	for num, m := range rc.metas {
		if resetAll || reset[num] {
			m.Epoch = bus.NewEpoch()
			rc.newEpoch[num] = true
		}
		s := j.addStoreLocked(num, m)
		s.win = windows[num]
		s.ckptID, s.dbFirst, s.segs = rc.dbLast[num], dbFirst[num], rc.lr.segs[num]
		s.pend, s.pendFirst = rc.lr.pend[num], rc.dbLast[num]+1
	}
	j.recoveredMaps = rc.lr.maps
	return rc, nil
}

// persist makes the disk agree with what the recovery found, in this
// order: in one transaction, the format, the sync mode, no clean mark, the
// next bus number, the damaged chunks' deletion and the new epochs (with
// the database's last ids: the log's events are not in it yet); then it
// cuts off the log's bad tail, syncs what the log keeps, and starts a new
// segment after it. Each step can run again after a failure (a full disk),
// with the same result. j.mu must be held, or the journal not yet shared.
func (j *Journal) persist(rc *recovery) error {
	if h := j.hooks(); h != nil && h.beforePersist != nil {
		if err := h.beforePersist(); err != nil {
			return err
		}
	}
	err := j.db.Update(func(tx *bolt.Tx) error {
		for _, name := range rootBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		for _, kv := range [][2][]byte{{keyFormat, []byte(strconv.Itoa(formatVersion()))}, {keyMode, []byte(j.mode)}, {keyNextNum, idKey(j.nextNum)}} {
			if err := meta.Put(kv[0], kv[1]); err != nil {
				return err
			}
		}
		if err := meta.Delete(keyClean); err != nil {
			return err
		}
		for num, key := range rc.drop {
			if b := eventsBucket(tx, num); b != nil {
				if err := deleteKeysBelow(b, key); err != nil {
					return err
				}
			}
		}
		for num := range rc.newEpoch {
			stored := *rc.metas[num]
			stored.LastID = rc.dbLast[num]
			if err := putMeta(tx, num, &stored); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("journal: %w", classify(err))
	}
	if err := rc.lr.cut(j.dir); err != nil {
		return fmt.Errorf("journal: %w", classify(err))
	}
	if j.mode != SyncNever {
		// What recovery serves must be as durable as a checkpoint would
		// have made it: the log's unsynced tail (never acknowledged with
		// SyncAlways) is synced before anything of it is served.
		for _, seg := range rc.lr.kept {
			if err := syncFile(filepath.Join(j.dir, segmentName(seg.seq))); err != nil {
				return fmt.Errorf("journal: %w", classify(err))
			}
		}
	}
	if err := j.wal.attach(rc.lr.nextSeq, rc.lr.kept); err != nil {
		return err
	}
	if len(rc.lr.kept) > 0 {
		j.recovered = rc.lr.kept[len(rc.lr.kept)-1].seq
	}
	return nil
}

// scan reads every bus's stored chunks, checking each checksum, and
// returns the retained windows (sizes only; frames are read on demand). A
// bus whose chunks are damaged, or not contiguous up to its last id, keeps
// only the intact suffix, is marked in reset, and loses the rest on disk
// when persist deletes its chunks with keys below drop[bus]. A value where
// a bus's bucket should be is damage. It writes nothing.
func (j *Journal) scan(metas map[uint64]*busMeta, reset map[uint64]bool) (windows map[uint64]window, drop map[uint64]uint64, err error) {
	windows = make(map[uint64]window, len(metas))
	drop = map[uint64]uint64{}
	err = j.db.View(func(tx *bolt.Tx) error {
		for num, m := range metas {
			var w window
			b := eventsBucket(tx, num)
			if b == nil {
				if evs := tx.Bucket(bucketEvents); evs != nil && evs.Get(idKey(num)) != nil {
					// A value where the bus's bucket should be.
					return fmt.Errorf("journal: %w: bus %d: %w", errDamaged, num, bolt.ErrIncompatibleValue)
				}
				if m.LastID > 0 {
					// Every checkpoint that sets a last id creates the
					// bucket: its events are lost, its key damaged, say.
					reset[num] = true
					j.logger.Error("journal: a bus's stored events are missing (the bus gets a new epoch)",
						"session", sessionName(m), "lastId", m.LastID)
				}
				windows[num] = w
				continue
			}
			var dropKey uint64
			damaged, afterBad := false, false
			c := b.Cursor()
			var sizes []entry // one chunk's, reused
			for k, v := c.First(); k != nil; k, v = c.Next() {
				first := keyID(k)
				sizes = sizes[:0]
				n, err := chunkSizes(v, func(typLen, envLen int) {
					id := first + uint64(len(sizes))
					sizes = append(sizes, entry{size: uint32(bus.FrameSize(id, "", typLen+envLen)), disk: uint32(2 + typLen + 4 + envLen)})
				})
				ok := err == nil && first != 0 && first+uint64(n)-1 <= m.LastID
				if !ok {
					// Keep only what follows the damage.
					w, damaged, afterBad, dropKey = window{}, true, true, first+1
					continue
				}
				if w.n > 0 && first != w.first+uint64(w.n) {
					w, damaged = window{}, true // a hole: keep what follows it
				}
				if w.n == 0 && damaged {
					dropKey, afterBad = first, false
				}
				for i, e := range sizes {
					w.push(first+uint64(i), e)
				}
			}
			if afterBad || (w.n > 0 && w.first+uint64(w.n)-1 != m.LastID) {
				// Damage at the end, or the newest events missing: what is
				// left would hide it.
				w, damaged, dropKey = window{}, true, ^uint64(0)
			}
			if damaged {
				drop[num] = dropKey
				reset[num] = true
				through := m.LastID
				if w.n > 0 {
					through = w.first - 1
				}
				j.logger.Error("journal: dropped damaged stored events (the bus gets a new epoch)",
					"session", sessionName(m), "throughId", through, "kept", w.n, "lastId", m.LastID)
			}
			windows[num] = w
		}
		return nil
	})
	return windows, drop, err
}
