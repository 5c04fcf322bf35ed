package journal

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The database: bucket meta (format, clean mark, sync mode of the last run,
// next bus number), bucket buses (bus number → busMeta as JSON), bucket
// events (bus number → a bucket of id → value), bucket consumers (bus
// number → a bucket of name → consumer, consumer.go).
var (
	bucketMeta   = []byte("meta")
	bucketBuses  = []byte("buses")
	bucketEvents = []byte("events")
	keyFormat    = []byte("format")
	keyClean     = []byte("clean")
	keyMode      = []byte("mode")
	keyNextNum   = []byte("next-bus")
	rootBuckets  = [][]byte{bucketMeta, bucketBuses, bucketEvents, bucketConsumers}
)

const (
	initialMmapSize = 1 << (20 + 10*(strconv.IntSize/64)) // 1 GiB on 64-bit, 1 MiB on 32-bit
	// dbAllocSize is how much bbolt grows the database file by when a
	// commit needs more room (its default is 16 MiB, which a desktop's
	// rings may never fill): the file stays near what it holds.
	dbAllocSize = 1 << 20
	dbName      = "journal.db"
)

// dbState is what the database says of the last run and of every bus,
// read once by recovery (loadState).
type dbState struct {
	fresh   bool   // it holds nothing yet
	format  int    // the format it was written in
	clean   bool   // the last run stopped cleanly
	mode    string // the sync mode of the last run
	nextNum uint64 // the number of the next bus
	metas   map[uint64]*busMeta
}

// loadState reads the database's state: the one loader of the buses'
// settings (parseMeta). A value where a bucket should be, a format that is
// not a number and settings that do not parse are damage (errDamaged); a
// format other than the current one is returned with nothing else read:
// recovery upgrades an older one first, and refuses a newer one.
func loadState(tx *bolt.Tx) (*dbState, error) {
	for _, name := range rootBuckets {
		if tx.Bucket(name) == nil {
			if k, _ := tx.Cursor().Seek(name); bytes.Equal(k, name) {
				return nil, fmt.Errorf("journal: %w: %q is a value, not a bucket: %w", errDamaged, name, bolt.ErrIncompatibleValue)
			}
		}
	}
	st := &dbState{format: formatVersion(), metas: map[uint64]*busMeta{}}
	meta := tx.Bucket(bucketMeta)
	st.fresh = meta == nil
	if meta != nil {
		f, err := parseFormat(meta.Get(keyFormat))
		if err != nil {
			return nil, err
		}
		st.format = f
		st.clean = meta.Get(keyClean) != nil
		st.mode = string(meta.Get(keyMode))
		st.nextNum = keyID(meta.Get(keyNextNum))
	}
	if st.format != formatVersion() {
		return st, nil
	}
	buses := tx.Bucket(bucketBuses)
	if buses == nil {
		return st, nil
	}
	err := buses.ForEach(func(k, v []byte) error {
		m, err := parseMeta(k, v)
		if err != nil {
			return err
		}
		st.metas[keyID(k)] = m
		st.nextNum = max(st.nextNum, keyID(k)+1)
		return nil
	})
	return st, err
}

// openDB opens the database. One that cannot be read is moved aside
// (aside is then true) and a new one started; the log is kept, for the
// journal to start from what it holds. A symlink or FIFO where the database
// should be is an error: it is not the journal's to move.
func (j *Journal) openDB() (aside bool, err error) {
	path := filepath.Join(j.dir, dbName)
	_, serr := os.Lstat(path)
	if serr == nil {
		err = checkDBFile(path)
	}
	if err == nil {
		var db *bolt.DB
		if db, err = openBolt(path); err == nil {
			j.db = db
			return false, nil
		}
		if err = classify(err); errors.Is(err, ErrDiskFull) && errors.Is(serr, fs.ErrNotExist) {
			// Created, but with no room for its first pages: what it
			// holds is nothing, and nothing is lost by removing it.
			os.Remove(path)
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
		Timeout: 2 * time.Second, OpenFile: openRegular,
		// The array freelist allocates the lowest free run that fits;
		// the map freelist took runs at random, so that a checkpoint's
		// chunks, needing runs of pages, found the free space cut up by
		// single-page key leaves and grew the file: 70,000 keyed
		// batches left 40-47 MiB with the map, 23-25 MiB with the array
		// (keys_bound_test.go), in the same time.
		FreelistType: bolt.FreelistArrayType,
		// Address space, not memory: remapping as the file grows makes
		// bbolt copy every node a checkpoint touches out of the old map.
		InitialMmapSize: initialMmapSize,
	})
	if err != nil {
		return nil, err
	}
	db.AllocSize = dbAllocSize
	err = db.View(func(tx *bolt.Tx) error {
		for _, name := range rootBuckets {
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
