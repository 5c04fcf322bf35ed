package journal

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/localbus/localbus/bus"
	bolt "go.etcd.io/bbolt"
)

// The database: bucket meta (format, clean mark, sync mode of the last run,
// next bus number), bucket buses (bus number → busMeta as JSON), bucket
// events (bus number → a bucket of id → value).
var (
	bucketMeta   = []byte("meta")
	bucketBuses  = []byte("buses")
	bucketEvents = []byte("events")
	keyFormat    = []byte("format")
	keyClean     = []byte("clean")
	keyMode      = []byte("mode")
	keyNextNum   = []byte("next-bus")
)

const (
	initialMmapSize = 1 << (20 + 10*(strconv.IntSize/64)) // 1 GiB on 64-bit, 1 MiB on 32-bit
	// dbAllocSize is how much bbolt grows the database file by when a
	// commit needs more room (its default is 16 MiB, which a desktop's
	// rings may never fill): the file stays near what it holds.
	dbAllocSize = 1 << 20
	dbName      = "journal.db"
	format      = "1"
)

// busMeta is a bus's settings in the database.
type busMeta struct {
	Session  string `json:"session,omitempty"`
	Global   bool   `json:"global,omitempty"`
	Epoch    string `json:"epoch"`
	RingSize int    `json:"ringSize,omitempty"`
	LastID   uint64 `json:"lastId"`
	Auto     bool   `json:"auto,omitempty"` // created by a publish (hub.AutoJournal)
	// Peer is whose publish created an Auto bus (share.Peer's text);
	// absent in a state dir written before it was stored: unknown.
	Peer string `json:"peer,omitempty"`
}

func getMeta(tx *bolt.Tx, num uint64) (*busMeta, error) {
	v := tx.Bucket(bucketBuses).Get(idKey(num))
	if v == nil {
		return nil, nil
	}
	m := new(busMeta)
	if err := json.Unmarshal(v, m); err != nil {
		return nil, fmt.Errorf("journal: bus %d settings: %w", num, err)
	}
	return m, nil
}

func putMeta(tx *bolt.Tx, num uint64, m *busMeta) error {
	v, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketBuses).Put(idKey(num), v)
}

func eventsBucket(tx *bolt.Tx, num uint64) *bolt.Bucket {
	return tx.Bucket(bucketEvents).Bucket(idKey(num))
}

// recover opens the database, replays the log into it, checks every stored
// event and builds the stores, then starts a new log segment. A database
// that cannot be read, whatever is wrong with it, is moved aside, and the
// journal starts again from what the log holds, on new epochs.
func (j *Journal) recover() error {
	aside, err := j.openDB()
	if err != nil {
		return err
	}
	err = guard(func() error { return j.recoverDB(aside) })
	if err == nil || aside || !isDamage(err) {
		return err
	}
	j.db.Close()
	j.db = nil
	clear(j.stores)
	clear(j.names)
	clear(j.metas)
	j.nextNum = 0
	if err := j.moveAside(err); err != nil {
		return err
	}
	if j.db, err = openBolt(filepath.Join(j.dir, dbName)); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return guard(func() error { return j.recoverDB(true) })
}

// isDamage reports whether err, from reading the database, means that its
// contents are damaged (rather than that the disk is full or failing):
// a panic or fault, a value that does not parse, or a value where bbolt
// expects a bucket.
func isDamage(err error) bool {
	for _, e := range []error{errDamaged, bolt.ErrIncompatibleValue, bolt.ErrInvalid, bolt.ErrChecksum,
		bolt.ErrVersionMismatch, bolt.ErrInvalidMapping} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// recoverDB is recover once the database is open; aside says it was just
// moved aside, so that the buses are to be found in the log.
func (j *Journal) recoverDB(aside bool) error {
	var (
		wasClean bool
		lastMode string
		fresh    bool
	)
	err := j.db.Update(func(tx *bolt.Tx) error {
		fresh = tx.Bucket(bucketMeta) == nil
		for _, name := range [][]byte{bucketMeta, bucketBuses, bucketEvents} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				if errors.Is(err, bolt.ErrIncompatibleValue) {
					err = fmt.Errorf("%w: %w", errDamaged, err)
				}
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		if f := meta.Get(keyFormat); f != nil && string(f) != format {
			if n, err := strconv.Atoi(string(f)); err == nil && n > 1 && n < 100 {
				// A newer journal: not this daemon's to move aside.
				return fmt.Errorf("journal: format %q, want %q", f, format)
			}
			return fmt.Errorf("journal: %w: format %q", errDamaged, f)
		}
		wasClean = meta.Get(keyClean) != nil
		lastMode = string(meta.Get(keyMode))
		j.nextNum = keyID(meta.Get(keyNextNum))
		if err := meta.Put(keyFormat, []byte(format)); err != nil {
			return err
		}
		if err := meta.Delete(keyClean); err != nil {
			return err
		}
		return meta.Put(keyMode, []byte(j.mode))
	})
	if err != nil {
		return fmt.Errorf("journal: %w", classify(err))
	}

	metas := map[uint64]*busMeta{}
	err = j.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketBuses).ForEach(func(k, v []byte) error {
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

	if aside {
		// The buses are gone with the database: the log names them.
		for num, m := range j.busesInLog() {
			metas[num] = m
			j.nextNum = max(j.nextNum, num+1)
		}
	}
	reset := map[uint64]bool{}
	// The database's last ids, before the log is replayed over them in
	// memory: what the database holds until a checkpoint copies the rest.
	dbLast := make(map[uint64]uint64, len(metas))
	for num, m := range metas {
		dbLast[num] = m.LastID
	}
	windows, err := j.scan(metas, reset, true)
	if err != nil {
		return err
	}
	dbFirst := make(map[uint64]uint64, len(windows))
	for num, w := range windows {
		dbFirst[num] = w.earliest()
	}
	lr, err := j.replayInMemoryWritable(metas, windows, reset)
	if err != nil {
		return err
	}
	defer func() {
		if j.wal == nil {
			// Open failed: no store refers to the mappings.
			for _, m := range lr.maps {
				unmapSegment(m)
			}
		}
	}()
	resetAll := aside || lr.corrupt || (!fresh && !wasClean && lastMode != SyncAlways)
	if aside {
		var names []string
		for _, m := range metas {
			names = append(names, sessionName(m))
		}
		sort.Strings(names)
		j.logger.Warn("journal: restored what the log holds (every bus is on a new epoch)", "buses", names)
	}
	if !fresh && !wasClean {
		j.logger.Warn("journal: the last run did not stop cleanly", "sync", lastMode, "newEpochs", resetAll)
	}

	// New epochs are on disk before the log's bad tail is cut off, and
	// before any id is assigned under them. The settings keep the
	// database's last id: the log's events are not in it yet.
	err = j.db.Update(func(tx *bolt.Tx) error {
		for num, m := range metas {
			if resetAll || reset[num] {
				m.Epoch = bus.NewEpoch()
				stored := *m
				stored.LastID = dbLast[num]
				if err := putMeta(tx, num, &stored); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("journal: %w", classify(err))
	}
	if err := lr.cut(j.dir); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if j.mode != SyncNever {
		// What recovery serves must be as durable as a checkpoint would
		// have made it: the log's unsynced tail (never acknowledged with
		// SyncAlways) is synced before anything of it is served.
		for _, seg := range lr.kept {
			if err := syncFile(filepath.Join(j.dir, segmentName(seg.seq))); err != nil {
				return fmt.Errorf("journal: %w", classify(err))
			}
		}
	}
	for num, m := range metas {
		s := j.addStoreLocked(num, m)
		s.win = windows[num]
		s.ckptID, s.dbFirst, s.segs = dbLast[num], dbFirst[num], lr.segs[num]
		s.pend, s.pendFirst = lr.pend[num], dbLast[num]+1
	}

	j.wal, err = openWAL(j.dir, lr.nextSeq, lr.kept, j.opts.SegmentBytes, j.opts.WrapFile, j.opts.OnSync, j.mode == SyncNever, j.mode == SyncAlways)
	if err == nil {
		j.wal.syncSeconds = j.opts.SyncSeconds
		if len(lr.kept) > 0 {
			j.recovered = lr.kept[len(lr.kept)-1].seq
		}
		j.recoveredMaps = lr.maps
	}
	return err
}

// logReplay is what replayInMemoryWritable found in the log.
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

// replayInMemoryWritable adds to windows the events of the log that the
// database lacks (their sizes; the events themselves in logReplay.pend),
// and advances the buses' last ids in metas; the
// database is left as it is, and the segments stay until a checkpoint has
// copied them (see drainRecovered), so that a crash meanwhile replays them
// again. A bad record is reported and logged as replay does; it and what
// follows it are cut off by logReplay.cut, once new epochs are on disk.
func (j *Journal) replayInMemoryWritable(metas map[uint64]*busMeta, windows map[uint64]window, reset map[uint64]bool) (*logReplay, error) {
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
	parsed, stop := parseSegments(j.dir, seqs)
	defer stop()
segments:
	for i, seq := range seqs {
		ps := <-parsed[i]
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
			if m == nil || through <= m.LastID {
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
		if off < len(data) && !allZero(data[off:min(off+recHeaderLen, len(data))]) {
			// A bad record.
			bad(i, seq, data, off, i == len(seqs)-1 && tornAt(data, off))
			break
		}
		if !allZero(data[off:]) {
			// Bytes after the end: a record whose header never made it,
			// unless a whole record follows them.
			bad(i, seq, data, off, i == len(seqs)-1 && !validFollows(data[off:]))
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
	return lr, nil
}

// parsedSegment is a log segment read and cut into whole records, ahead
// of the replay that applies them in order.
type parsedSegment struct {
	data []byte
	recs []record
	offs []int // where each record starts
	end  int   // past the last whole record: the end of the log, or a bad record
	err  error // reading the file
}

func parseSegment(path string) parsedSegment {
	data, err := mapSegment(path)
	ps := parsedSegment{data: data, err: err}
	off := 0
	for off < len(data) && !allZero(data[off:min(off+recHeaderLen, len(data))]) {
		rec, n, err := readRecord(data[off:])
		if err != nil {
			break
		}
		ps.recs, ps.offs = append(ps.recs, rec), append(ps.offs, off)
		off += n
	}
	ps.end = off
	return ps
}

// parseSegments reads and parses the segments seqs of dir on a few
// goroutines, each as far ahead as it gets: reading and checking the
// records is most of a replay's work, and it does not depend on the order.
// The i-th channel gets the i-th segment. stop makes them skip the rest
// and waits for them.
func parseSegments(dir string, seqs []uint64) (out []chan parsedSegment, stop func()) {
	out = make([]chan parsedSegment, len(seqs))
	for i := range out {
		out[i] = make(chan parsedSegment, 1)
	}
	var (
		next    atomic.Int64
		stopped atomic.Bool
		wg      sync.WaitGroup
	)
	for range min(runtime.GOMAXPROCS(0), 4, len(seqs)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(seqs); i = int(next.Add(1) - 1) {
				if stopped.Load() {
					out[i] <- parsedSegment{}
					continue
				}
				out[i] <- parseSegment(filepath.Join(dir, segmentName(seqs[i])))
			}
		})
	}
	return out, func() {
		stopped.Store(true)
		wg.Wait()
		// The segments no one took: mapped for nothing.
		for _, c := range out {
			select {
			case ps := <-c:
				unmapSegment(ps.data)
			default:
			}
		}
	}
}

// syncFile makes the file at path durable.
func syncFile(path string) error {
	f, err := openRegular(path, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// openDB opens the database. One that cannot be read is moved aside
// (aside is then true) and a new one started; the log is kept, for the
// journal to start from what it holds. A symlink or FIFO where the database
// should be is an error: it is not the journal's to move.
func (j *Journal) openDB() (aside bool, err error) {
	path := filepath.Join(j.dir, dbName)
	if _, serr := os.Lstat(path); serr == nil {
		err = checkDBFile(path)
	}
	if err == nil {
		var db *bolt.DB
		if db, err = openBolt(path); err == nil {
			j.db = db
			return false, nil
		}
	}
	switch {
	case errors.Is(err, bolt.ErrTimeout), errors.Is(err, errLockHeld):
		return false, fmt.Errorf("%w: %s", ErrLocked, j.dir)
	case errors.Is(err, errNotRegular):
		return false, fmt.Errorf("journal: %w; refusing to use it", err)
	case errors.Is(err, fs.ErrPermission), errors.Is(err, ErrDiskFull):
		return false, fmt.Errorf("journal: %w", err)
	}
	if err := j.moveAside(err); err != nil {
		return false, err
	}
	if j.db, err = openBolt(path); err != nil {
		return false, fmt.Errorf("journal: %w", err)
	}
	return true, nil
}

// moveAside renames the database that cause made unreadable to
// journal.db.corrupt-TIME, and logs it.
func (j *Journal) moveAside(cause error) error {
	path := filepath.Join(j.dir, dbName)
	stamp := time.Now().UTC().Format("20060102T150405Z")
	aside := path + ".corrupt-" + stamp
	for i := 2; ; i++ {
		if _, err := os.Lstat(aside); errors.Is(err, fs.ErrNotExist) {
			break
		}
		aside = fmt.Sprintf("%s.corrupt-%s-%d", path, stamp, i)
	}
	j.logger.Error("journal: the database cannot be read; moved it aside, starting from what the log holds (every bus gets a new epoch)",
		"err", cause, "movedTo", filepath.Base(aside))
	if err := os.Rename(path, aside); err != nil {
		return fmt.Errorf("journal: the database cannot be read (%v), and moving it aside failed: %w", cause, err)
	}
	return nil
}

func openBolt(path string) (db *bolt.DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		// bbolt panics on some damaged files (checkDBFile should have
		// caught them); that is a database that cannot be opened, not a
		// daemon that cannot start.
		if r := recover(); r != nil {
			if db != nil {
				db.Close()
			}
			db, err = nil, fmt.Errorf("%w: %v", errDamaged, r)
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{
		Timeout: 2 * time.Second, FreelistType: bolt.FreelistMapType, OpenFile: openRegular,
		// Address space, not memory: remapping as the file grows makes
		// bbolt copy every node a checkpoint touches out of the old map.
		InitialMmapSize: initialMmapSize,
	})
	if err != nil {
		return nil, err
	}
	db.AllocSize = dbAllocSize
	err = db.View(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketMeta, bucketBuses, bucketEvents} {
			tx.Bucket(name) // touches the root pages
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// replay applies the log segments over the database in one transaction,
// cutting off a bad tail, then removes them. It returns the number for the
// next segment and whether records were lost to corruption (not a torn
// tail).
func (j *Journal) replay(metas map[uint64]*busMeta, reset map[uint64]bool) (nextSeq uint64, corrupt bool, err error) {
	seqs, err := segments(j.dir)
	if err != nil {
		return 0, false, fmt.Errorf("journal: %w", err)
	}
	if len(seqs) == 0 {
		return 1, false, nil
	}
	nextSeq = seqs[len(seqs)-1] + 1
	var (
		applied, lastNum uint64
		lastID           uint64
		arena            []byte
		pending          int // bytes applied in the open transaction
		touched          = map[uint64]bool{}
		held             = map[uint64][]record{} // every bus's events records so far, for refs
	)
	// The log is applied in transactions of about replayTxBytes, each with
	// the settings of the buses it touched: one transaction for a long
	// log would hold all of it in memory. Applying a record again, after a
	// crash during recovery, changes nothing.
	tx, err := j.db.Begin(true)
	if err != nil {
		return 0, false, fmt.Errorf("journal: replaying the log: %w", classify(err))
	}
	commit := func() error {
		err := putMetas(tx, metas, touched)
		if err == nil {
			err = tx.Commit()
		} else {
			tx.Rollback()
		}
		tx, pending, arena = nil, 0, nil
		clear(touched)
		return err
	}
	apply := func() error {
		for i, seq := range seqs {
			path := filepath.Join(j.dir, segmentName(seq))
			data, err := readRegular(path)
			if err != nil {
				return err
			}
			off := 0
			for off < len(data) && !allZero(data[off:min(off+recHeaderLen, len(data))]) {
				rec, n, err := readRecord(data[off:])
				m := metas[rec.num]
				if err == nil && rec.refs != nil && m != nil && rec.firstID+uint64(rec.count)-1 > m.LastID {
					// Resolved only if needed: the records it refers to
					// may be gone once the database holds its events.
					if rec.events, err = resolveRefs(rec, held); err != nil {
						// Whole, but it names events the log does not hold.
						j.logger.Error("journal: a log record refers to events the log does not hold", "err", err)
					}
				}
				if err != nil {
					torn := i == len(seqs)-1 && rec.refs == nil && tornAt(data, off)
					corrupt = !torn
					j.logDropped(metas, seq, off, data[off:], torn, len(seqs)-1-i, lastNum, lastID)
					return truncateRegular(path, int64(off))
				}
				if rec.refs == nil {
					held[rec.num] = append(held[rec.num], rec)
				}
				if m != nil {
					if err := applyRecord(tx, rec, m, &arena, reset); err != nil {
						return err
					}
					touched[rec.num] = true
					applied += uint64(rec.count)
					lastNum, lastID = rec.num, rec.firstID+uint64(rec.count)-1
					if pending += n; pending >= replayTxBytes {
						if err := commit(); err != nil {
							return err
						}
						if tx, err = j.db.Begin(true); err != nil {
							return err
						}
					}
				}
				off += n
			}
			if !allZero(data[off:]) {
				// Bytes after the end: a record whose header never made it,
				// unless a whole record follows them.
				torn := i == len(seqs)-1 && !validFollows(data[off:])
				corrupt = !torn
				j.logDropped(metas, seq, off, data[off:], torn, len(seqs)-1-i, lastNum, lastID)
				return truncateRegular(path, int64(off))
			}
		}
		return nil
	}
	err = apply()
	if err == nil {
		err = commit()
	} else if tx != nil {
		tx.Rollback()
	}
	if err != nil {
		return 0, false, fmt.Errorf("journal: replaying the log: %w", classify(err))
	}
	if applied > 0 {
		j.logger.Info("journal: replayed the log", "events", applied, "segments", len(seqs))
	}
	for _, seq := range seqs {
		if err := os.Remove(filepath.Join(j.dir, segmentName(seq))); err != nil {
			return 0, false, fmt.Errorf("journal: %w", err)
		}
	}
	return nextSeq, corrupt, nil
}

// resolveRefs returns the events of a refs record: the global bus's copies
// of the session events that held, the events records read before it,
// hold.
func resolveRefs(rec record, held map[uint64][]record) ([]storedEvent, error) {
	evs := make([]storedEvent, 0, rec.count)
	var buf []byte
	err := eachRef(rec, held, func(src storedEvent, num, sid, id uint64) error {
		if buf == nil {
			buf = make([]byte, 0, rec.count*(len(src.env)+16))
		}
		start := len(buf)
		var ok bool
		if buf, ok = bus.AppendGlobalEnvelope(buf, src.typ, src.env, id); !ok {
			return fmt.Errorf("bus %d: event %d is not a session's event", num, sid)
		}
		// buf may move as it grows; what was cut from it stays valid.
		evs = append(evs, storedEvent{typ: src.typ, env: buf[start:len(buf):len(buf)]})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return evs, nil
}

// replayTxBytes is about how much log one transaction of the replay
// applies (a variable for tests); arenaBlock is the least it allocates at
// once for the values.
var replayTxBytes = 32 << 20

const arenaBlock = 4 << 20

// applyRecord writes a log record's events that the database lacks.
// A record that does not follow the bus's last id means lost events: the
// bus's older events are dropped, so what it retains stays contiguous, and
// it is marked for a new epoch.
func applyRecord(tx *bolt.Tx, rec record, m *busMeta, arena *[]byte, reset map[uint64]bool) error {
	last := rec.firstID + uint64(rec.count) - 1
	if last <= m.LastID {
		return nil // checkpointed already
	}
	b, err := tx.Bucket(bucketEvents).CreateBucketIfNotExists(idKey(rec.num))
	if err != nil {
		return err
	}
	b.FillPercent = 0.95
	if rec.firstID > m.LastID+1 {
		if err := deleteKeysBelow(b, rec.firstID); err != nil {
			return err
		}
		reset[rec.num] = true
	}
	evs := rec.events
	first := rec.firstID
	if first <= m.LastID {
		evs = evs[m.LastID+1-first:]
		first = m.LastID + 1
	}
	// bbolt keeps values until the commit: the arena's bytes are never
	// reused. It is cut in blocks, so that it never grows by copying.
	need := (len(evs)/chunkMaxEvents + 1) * chunkHeadLen
	for _, ev := range evs {
		need += eventLen(ev.typ, len(ev.env))
	}
	if cap(*arena)-len(*arena) < need+need/8 {
		*arena = make([]byte, 0, max(need+need/8, arenaBlock))
	}
	*arena, err = appendChunks(*arena, first, len(evs),
		func(i int) (string, []byte) { return evs[i].typ, evs[i].env },
		func(id uint64, v []byte) error { return b.Put(idKey(id), v) })
	if err != nil {
		return err
	}
	m.LastID = last
	return nil
}

func putMetas(tx *bolt.Tx, metas map[uint64]*busMeta, nums map[uint64]bool) error {
	for num := range nums {
		if err := putMeta(tx, num, metas[num]); err != nil {
			return err
		}
	}
	return nil
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

// scan reads every bus's stored chunks, checking each checksum, and
// returns the retained windows (sizes only; frames are read on demand). A
// bus whose chunks are damaged, or not contiguous up to its last id, keeps
// only the intact suffix, loses the rest on disk (unless fix is false: the
// disk is then left as it is), and is marked in reset.
func (j *Journal) scan(metas map[uint64]*busMeta, reset map[uint64]bool, fix bool) (map[uint64]window, error) {
	windows := make(map[uint64]window, len(metas))
	drop := map[uint64]uint64{} // bus → delete the chunks with keys below this
	err := j.db.View(func(tx *bolt.Tx) error {
		for num, m := range metas {
			var w window
			b := eventsBucket(tx, num)
			if b == nil {
				if fix && tx.Bucket(bucketEvents).Get(idKey(num)) != nil {
					// A value where the bus's bucket should be.
					return fmt.Errorf("journal: %w: bus %d: %w", errDamaged, num, bolt.ErrIncompatibleValue)
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
	if err != nil || len(drop) == 0 || !fix {
		return windows, err
	}
	err = j.db.Update(func(tx *bolt.Tx) error {
		for num, key := range drop {
			if err := deleteKeysBelow(eventsBucket(tx, num), key); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("journal: %w", classify(err))
	}
	return windows, nil
}

// tornAt reports whether the bad record at data[off:], in the newest
// segment, is a torn tail: a write cut short, which was never
// acknowledged. Anything else is corruption, which may have taken
// acknowledged events with it. It is torn only when no whole record
// follows it, its payload is not whole under a damaged length, and it does
// not look complete: a record that fits in the segment and whose last two
// bytes are not zero (segments are zero past the end of the log, and an
// event record ends with its envelope's closing brace). So no single
// damaged byte of a record that was written whole passes for a torn one.
func tornAt(data []byte, off int) bool {
	rest := data[off:]
	if validFollows(rest[1:]) || intactUnderOtherLength(rest) {
		return false
	}
	if len(rest) < recHeaderLen {
		return true
	}
	n := uint64(binary.BigEndian.Uint32(rest))
	if n < payloadHeadLen || n > maxRecordLen || n > uint64(len(rest)-recHeaderLen) {
		return true
	}
	end := recHeaderLen + int(n)
	return rest[end-1] == 0 && rest[end-2] == 0
}

// validFollows reports whether a whole, intact record starts anywhere in p.
func validFollows(p []byte) bool {
	for i := 0; i+recHeaderLen+payloadHeadLen <= len(p); i++ {
		if p[i] > maxRecordLen>>24 {
			continue // a length over maxRecordLen: the common case, skipped fast
		}
		if _, _, err := readRecord(p[i:]); err == nil {
			return true
		}
	}
	return false
}

// intactUnderOtherLength reports whether the record at the start of p has a
// whole payload that matches its checksum under some length other than the
// one its header says: a record written whole whose length was damaged.
func intactUnderOtherLength(p []byte) bool {
	if len(p) < recHeaderLen+payloadHeadLen {
		return false
	}
	want := binary.BigEndian.Uint32(p[4:])
	payload := p[recHeaderLen:min(len(p), recHeaderLen+maxRecordLen)]
	sum := crc32.Update(0, castagnoli, payload[:payloadHeadLen-1])
	for n := payloadHeadLen; n <= len(payload); n++ {
		sum = crc32.Update(sum, castagnoli, payload[n-1:n])
		if sum == want {
			if _, err := decodePayload(payload[:n], true); err == nil {
				return true
			}
		}
	}
	return false
}

func allZero(p []byte) bool {
	for _, b := range p {
		if b != 0 {
			return false
		}
	}
	return true
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
	for _, seq := range seqs {
		data, err := readRegular(filepath.Join(j.dir, segmentName(seq)))
		if err != nil {
			continue
		}
		for off := 0; off < len(data); {
			rec, n, err := readRecord(data[off:])
			if err != nil {
				break
			}
			off += n
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
				} else if c.name = *head.Session; bus.ValidateSessionID(c.name) != nil {
					c.bad = true
				}
			}
			if old, ok := claims[rec.num]; !ok {
				claims[rec.num] = &c
			} else if old.global != c.global || old.name != c.name || c.bad {
				old.bad = true
			}
		}
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
