package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/localbus/localbus/bus"
	bolt "go.etcd.io/bbolt"
)

// retryWritable is the least time between two attempts to finish an Open
// that the disk's lack of space left read-only.
var retryWritable = time.Second

// openReadOnly restores, in memory only, what the database and the log
// hold, after recover failed for lack of space (cause): the buses, their
// retained events (the log's in memory, as frames) and their epochs. It
// writes nothing. A bus that recover would put on a new epoch gets one now,
// which only this process knows until it is persisted: no id is assigned
// before it is, since every append is refused until tryWritable finishes
// the open.
func (j *Journal) openReadOnly(cause error) error {
	clear(j.stores)
	clear(j.names)
	clear(j.metas)
	j.nextNum = 0
	path := filepath.Join(j.dir, dbName)
	if _, err := os.Lstat(path); err != nil {
		return err // nothing to restore: no room for a new database
	}
	if err := checkDBFile(path); err != nil {
		return err
	}
	db, err := openBolt(path)
	if err != nil {
		return err
	}
	j.db = db
	err = guard(func() error { return j.restoreInMemory(cause) })
	if err != nil {
		return err
	}
	j.wal = &wal{dir: j.dir, wrap: j.opts.WrapFile, onSync: j.opts.OnSync, noSync: j.mode == SyncNever,
		segSize: j.opts.SegmentBytes, live: []segStart{{}}, syncSeconds: j.opts.SyncSeconds}
	j.readOnly.Store(true)
	return nil
}

func (j *Journal) restoreInMemory(cause error) error {
	var (
		fresh, wasClean bool
		lastMode        string
	)
	metas := map[uint64]*busMeta{}
	err := j.db.View(func(tx *bolt.Tx) error {
		meta, buses := tx.Bucket(bucketMeta), tx.Bucket(bucketBuses)
		if meta == nil || buses == nil || tx.Bucket(bucketEvents) == nil {
			fresh = true
			return nil
		}
		if f := meta.Get(keyFormat); f != nil && string(f) != format {
			return fmt.Errorf("journal: format %q, want %q", f, format)
		}
		wasClean = meta.Get(keyClean) != nil
		lastMode = string(meta.Get(keyMode))
		j.nextNum = keyID(meta.Get(keyNextNum))
		return buses.ForEach(func(k, v []byte) error {
			m := new(busMeta)
			if err := json.Unmarshal(v, m); err != nil || len(k) != 8 || (m.Session == "") != m.Global {
				return fmt.Errorf("journal: %w: the settings of bus %x: %q", errDamaged, k, v)
			}
			metas[keyID(k)] = m
			j.nextNum = max(j.nextNum, keyID(k)+1)
			return nil
		})
	})
	if err != nil {
		return err
	}
	reset := map[uint64]bool{}
	windows, err := j.scan(metas, reset, false)
	if err != nil {
		return err
	}
	corrupt := j.replayInMemory(metas, windows, reset)
	resetAll := corrupt || (!fresh && !wasClean && lastMode != SyncAlways)
	for num, m := range metas {
		if resetAll || reset[num] {
			m.Epoch = bus.NewEpoch() // persisted by finishOpen, before any append
		}
		s := j.addStoreLocked(num, m)
		s.win = windows[num]
		s.dbFirst = s.win.earliest()
	}
	j.logger.Error("journal: the disk is full: serving what it holds read-only; every publish is refused until space returns",
		"err", cause, "dir", j.dir, "buses", len(metas), "newEpochs", resetAll)
	return nil
}

// replayInMemory adds to windows the events of the log that the database
// lacks, as frames, advancing the buses' last ids in metas; it reads the
// log up to its first bad record and changes nothing on disk. A bus whose
// records do not follow its last id is marked in reset; it returns whether
// a record was lost to corruption rather than torn.
func (j *Journal) replayInMemory(metas map[uint64]*busMeta, windows map[uint64]window, reset map[uint64]bool) (corrupt bool) {
	seqs, err := segments(j.dir)
	if err != nil {
		j.logger.Error("journal: listing the log", "err", err)
		return true
	}
	held := map[uint64][]record{}
	for i, seq := range seqs {
		data, err := readRegular(filepath.Join(j.dir, segmentName(seq)))
		if err != nil {
			j.logger.Error("journal: reading the log", "segment", segmentName(seq), "err", err)
			return true
		}
		last := i == len(seqs)-1
		off := 0
		for off < len(data) && !allZero(data[off:min(off+recHeaderLen, len(data))]) {
			rec, n, err := readRecord(data[off:])
			m := metas[rec.num]
			if err == nil && rec.refs != nil && m != nil && rec.firstID+uint64(rec.count)-1 > m.LastID {
				rec.events, err = resolveRefs(rec, held)
			}
			if err != nil {
				return !(last && rec.refs == nil && tornAt(data, off))
			}
			if rec.refs == nil {
				held[rec.num] = append(held[rec.num], rec)
			}
			off += n
			if m == nil {
				continue
			}
			through := rec.firstID + uint64(rec.count) - 1
			if through <= m.LastID {
				continue
			}
			w := windows[rec.num]
			if rec.firstID > m.LastID+1 {
				w = window{} // events lost: keep what follows
				reset[rec.num] = true
			}
			for k, ev := range rec.events {
				id := rec.firstID + uint64(k)
				if id <= m.LastID {
					continue
				}
				f := bus.NewFrame(id, ev.typ, ev.env)
				w.push(id, entry{f: f, size: uint32(f.Size()), disk: uint32(eventLen(ev.typ, len(ev.env)))})
			}
			windows[rec.num] = w
			m.LastID = through
		}
		if !allZero(data[off:]) {
			return !(last && !validFollows(data[off:]))
		}
	}
	return false
}

// tryWritable attempts, at most once per retryWritable, to finish an Open
// left read-only, and reports whether the journal is writable.
func (j *Journal) tryWritable() bool {
	j.roMu.Lock()
	defer j.roMu.Unlock()
	if !j.readOnly.Load() {
		return true
	}
	if time.Since(j.roTried) < retryWritable {
		return false
	}
	j.roTried = time.Now()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return false
	}
	if err := guard(j.finishOpenLocked); err != nil {
		if !errors.Is(err, ErrDiskFull) {
			j.logger.Error("journal: cannot leave read-only mode", "err", err)
		}
		return false
	}
	j.readOnly.Store(false)
	j.startLocked()
	j.logger.Info("journal: space returned; the journal is writable again")
	return true
}

// finishOpenLocked does what recover could not: it persists the buses'
// epochs first (a new one chosen by openReadOnly must be on disk before any
// id is assigned under it), replays the log into the database and starts a
// log segment. It may fail again for lack of space, leaving the journal
// read-only and the disk as consistent as recover leaves it. j.mu must be
// held.
func (j *Journal) finishOpenLocked() error {
	err := j.db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketMeta, bucketBuses, bucketEvents} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		for num, m := range j.metas {
			dm, err := getMeta(tx, num)
			if err != nil {
				return err
			}
			if dm == nil {
				return fmt.Errorf("journal: bus %d is gone from the database", num)
			}
			if dm.Epoch != m.Epoch {
				dm.Epoch = m.Epoch
				if err := putMeta(tx, num, dm); err != nil {
					return err
				}
			}
		}
		for _, kv := range [][2][]byte{{keyFormat, []byte(format)}, {keyMode, []byte(j.mode)}, {keyNextNum, idKey(j.nextNum)}} {
			if err := meta.Put(kv[0], kv[1]); err != nil {
				return err
			}
		}
		return meta.Delete(keyClean)
	})
	if err != nil {
		return fmt.Errorf("journal: %w", classify(err))
	}
	// Every bus of the database, as recover reads them: the log's records
	// of one Delete could not remove are replayed too.
	dbMetas := map[uint64]*busMeta{}
	err = j.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketBuses).ForEach(func(k, v []byte) error {
			m := new(busMeta)
			if err := json.Unmarshal(v, m); err != nil || len(k) != 8 {
				return fmt.Errorf("journal: %w: the settings of bus %x: %q", errDamaged, k, v)
			}
			dbMetas[keyID(k)] = m
			return nil
		})
	})
	if err != nil {
		return err
	}
	reset := map[uint64]bool{}
	nextSeq, _, err := j.replay(dbMetas, reset)
	if err != nil {
		return err
	}
	if _, err := j.scan(dbMetas, reset, true); err != nil {
		return err
	}
	for num, s := range j.stores {
		s.mu.Lock()
		last := s.lastID
		s.mu.Unlock()
		if dbMetas[num] == nil || dbMetas[num].LastID != last {
			return fmt.Errorf("journal: bus %d: the database does not hold the events restored (up to %d)", num, last)
		}
	}
	if err := j.wal.attach(nextSeq); err != nil {
		return err
	}
	for _, s := range j.stores {
		s.mu.Lock()
		s.ckptID, s.syncedID, s.logFloor, s.dbFirst = s.lastID, s.lastID, s.lastID, s.win.earliest()
		s.mu.Unlock()
	}
	return nil
}

// attach starts segment seq in a log that had none (see openReadOnly).
func (w *wal) attach(seq uint64) error {
	f, size, err := w.createFitting(seq, 0)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.f, w.cap, w.seq = f, size, seq
	w.live = []segStart{{seq: seq, lsn: w.lsn}}
	return nil
}
