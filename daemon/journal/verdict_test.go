package journal

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/localbus/localbus/daemon/journal/journaltest"
	bolt "go.etcd.io/bbolt"
)

// verdictTemplate returns a crashed journal (fsync always) that a hub
// wrote: sessions s1 and s2, and the global bus's copies (refs records);
// ids 1 to 4 of each session in the database, the rest in two log
// segments; and each bus's epoch ("" the global bus's).
func verdictTemplate(t *testing.T) (dir string, epochs map[string]string) {
	t.Helper()
	dir = t.TempDir()
	h, j, _ := openHub(t, dir, noKicks, 0)
	for k := range 4 {
		hubPublish(t, h, fmt.Sprintf("s%d", 1+k%2), events(k*2, 2, 80))
	}
	if err := j.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	for k := range 4 {
		hubPublish(t, h, fmt.Sprintf("s%d", 1+k%2), events(100+k*2, 2, 80))
	}
	if _, _, err := j.wal.rotate(); err != nil {
		t.Fatal(err)
	}
	for k := range 4 {
		hubPublish(t, h, fmt.Sprintf("s%d", 1+k%2), events(200+k*2, 2, 80))
	}
	epochs = map[string]string{"": h.Global().Epoch()}
	for _, s := range h.Sessions() {
		epochs[s.ID] = s.Bus.Epoch()
	}
	h.Close()
	j.crash()
	return dir, epochs
}

// outcome is what an Open made of a journal: its error, or per bus
// whether its epoch was kept, the ids it retains and its last id.
type outcome struct {
	Err   bool
	Buses map[string]busOutcome
}

type busOutcome struct {
	EpochKept bool
	IDs       []uint64
	LastID    uint64
}

func outcomeOf(t *testing.T, j *Journal, err error, epochs map[string]string) outcome {
	t.Helper()
	if err != nil {
		return outcome{Err: true}
	}
	out := outcome{Buses: map[string]busOutcome{}}
	for _, name := range append([]string{""}, j.Sessions()...) {
		st, epoch, _, err := j.OpenBus(name, 0)
		if err != nil {
			t.Fatal(err)
		}
		out.Buses[name] = busOutcome{EpochKept: epoch == epochs[name], IDs: ids(retained(st)), LastID: st.LastID()}
	}
	return out
}

// updateDB changes the database in dir with fn.
func updateDB(t *testing.T, dir string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dir, dbName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

// damagedInputs are the inputs of TestReadOnlyRecoveryGivesTheWritableVerdicts:
// each damages a copy of verdictTemplate's journal.
var damagedInputs = []struct {
	name   string
	damage func(t *testing.T, dir string)
}{
	{"intact", func(t *testing.T, dir string) {}},
	{"the newest segment cut inside its last record", func(t *testing.T, dir string) {
		segs := segmentsIn(t, dir)
		last := segs[len(segs)-1]
		journaltest.Truncate(t, last, int64(logEnd(t, last)-30))
	}},
	{"the last record's end never written", func(t *testing.T, dir string) {
		segs := segmentsIn(t, dir)
		last := segs[len(segs)-1]
		journaltest.Zero(t, last, int64(logEnd(t, last)-30), 30)
	}},
	{"a byte flipped in the newest segment's last record", func(t *testing.T, dir string) {
		segs := segmentsIn(t, dir)
		last := segs[len(segs)-1]
		journaltest.Flip(t, last, int64(logEnd(t, last)-40), 0x01)
	}},
	{"a byte flipped in the newest segment's first record", func(t *testing.T, dir string) {
		segs := segmentsIn(t, dir)
		journaltest.Flip(t, segs[len(segs)-1], recHeaderLen+payloadHeadLen+3, 0x20)
	}},
	{"a byte flipped in the length of the newest segment's first record", func(t *testing.T, dir string) {
		segs := segmentsIn(t, dir)
		journaltest.Flip(t, segs[len(segs)-1], 2, 0x01)
	}},
	{"a byte flipped in an older segment", func(t *testing.T, dir string) {
		journaltest.Flip(t, segmentsIn(t, dir)[0], recHeaderLen+payloadHeadLen+3, 0x20)
	}},
	{"garbage after the end of the log", func(t *testing.T, dir string) {
		segs := segmentsIn(t, dir)
		last := segs[len(segs)-1]
		journaltest.Flip(t, last, int64(logEnd(t, last)+100), 0x5a)
	}},
	{"garbage after the end of an older segment", func(t *testing.T, dir string) {
		first := segmentsIn(t, dir)[0]
		journaltest.Flip(t, first, int64(logEnd(t, first)+100), 0x5a)
	}},
	{"a whole record after garbage at the end", func(t *testing.T, dir string) {
		segs := segmentsIn(t, dir)
		last := segs[len(segs)-1]
		data, err := os.ReadFile(last)
		if err != nil {
			t.Fatal(err)
		}
		end := logEnd(t, last)
		offs := recordOffsets(t, last)
		rec := slices.Clone(data[offs[len(offs)-2]:end])
		copy(data[end:], []byte("garbage"))
		copy(data[end+64:], rec)
		if err := os.WriteFile(last, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}},
	{"the newest segment's first record zeroed", func(t *testing.T, dir string) {
		segs := segmentsIn(t, dir)
		last := segs[len(segs)-1]
		offs := recordOffsets(t, last)
		journaltest.Zero(t, last, 0, int64(offs[1]))
	}},
	{"the oldest segment removed", func(t *testing.T, dir string) {
		if err := os.Remove(segmentsIn(t, dir)[0]); err != nil {
			t.Fatal(err)
		}
	}},
	{"the newest segment removed", func(t *testing.T, dir string) {
		segs := segmentsIn(t, dir)
		if err := os.Remove(segs[len(segs)-1]); err != nil {
			t.Fatal(err)
		}
	}},
	{"a refs record naming events the log lacks", func(t *testing.T, dir string) {
		segs := segmentsIn(t, dir)
		last := segs[len(segs)-1]
		var num uint64
		for _, r := range logRecords(t, dir) {
			if r.refs != nil {
				num = r.num
			}
		}
		end := logEnd(t, last)
		rec := appendRefsRecord(nil, num, 1000, 1, []refRun{{num: 99, first: 1, n: 1}})
		f, err := os.OpenFile(last, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt(rec, int64(end)); err != nil {
			t.Fatal(err)
		}
	}},
	{"a stored chunk damaged", func(t *testing.T, dir string) {
		updateDB(t, dir, func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketEvents).Bucket(idKey(1))
			k, v := b.Cursor().First()
			v = slices.Clone(v)
			v[len(v)-3] ^= 0x10
			return b.Put(slices.Clone(k), v)
		})
	}},
	{"a stored chunk past the bus's last id", func(t *testing.T, dir string) {
		updateDB(t, dir, func(tx *bolt.Tx) error {
			v, err := getMeta(tx, 1)
			if err != nil {
				return err
			}
			v.LastID = 2
			return putMeta(tx, 1, v)
		})
	}},
	{"a bus's events bucket missing", func(t *testing.T, dir string) {
		updateDB(t, dir, func(tx *bolt.Tx) error { return tx.Bucket(bucketEvents).DeleteBucket(idKey(1)) })
	}},
	{"a bus's events a value, not a bucket", func(t *testing.T, dir string) {
		updateDB(t, dir, func(tx *bolt.Tx) error {
			evs := tx.Bucket(bucketEvents)
			if err := evs.DeleteBucket(idKey(1)); err != nil {
				return err
			}
			return evs.Put(idKey(1), []byte("not a bucket"))
		})
	}},
	{"the events bucket a value", func(t *testing.T, dir string) {
		updateDB(t, dir, func(tx *bolt.Tx) error {
			if err := tx.DeleteBucket(bucketEvents); err != nil {
				return err
			}
			return tx.Cursor().Bucket().Put(bucketEvents, []byte("not a bucket"))
		})
	}},
	{"a session's settings claiming the global bus", func(t *testing.T, dir string) {
		updateDB(t, dir, func(tx *bolt.Tx) error {
			m, err := getMeta(tx, 1)
			if err != nil {
				return err
			}
			m.Global = true
			v, _ := json.Marshal(m)
			return tx.Bucket(bucketBuses).Put(idKey(1), v)
		})
	}},
	{"a bus's settings not JSON", func(t *testing.T, dir string) {
		updateDB(t, dir, func(tx *bolt.Tx) error {
			return tx.Bucket(bucketBuses).Put(idKey(1), []byte("{"))
		})
	}},
	{"a bus's settings under a short key", func(t *testing.T, dir string) {
		updateDB(t, dir, func(tx *bolt.Tx) error {
			return tx.Bucket(bucketBuses).Put([]byte{1}, []byte(`{"session":"x","epoch":"e","lastId":0}`))
		})
	}},
	{"the format a word", func(t *testing.T, dir string) {
		updateDB(t, dir, func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyFormat, []byte("one")) })
	}},
	{"a newer format", func(t *testing.T, dir string) {
		updateDB(t, dir, func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyFormat, []byte("7")) })
	}},
	{"the last run under fsync interval", func(t *testing.T, dir string) {
		updateDB(t, dir, func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyMode, []byte(SyncInterval)) })
	}},
	{"the next bus number behind the buses", func(t *testing.T, dir string) {
		updateDB(t, dir, func(tx *bolt.Tx) error {
			return tx.Bucket(bucketMeta).Put(keyNextNum, binary.BigEndian.AppendUint64(nil, 0))
		})
	}},
}

// TestReadOnlyRecoveryGivesTheWritableVerdicts feeds the same damaged
// journals to a writable Open and to one that the disk's lack of space
// leaves read-only: both restore the same buses, events and epochs, or
// both fail.
func TestReadOnlyRecoveryGivesTheWritableVerdicts(t *testing.T) {
	tmpl, epochs := verdictTemplate(t)
	for _, in := range damagedInputs {
		t.Run(in.name, func(t *testing.T) {
			w, ro := copyDir(t, tmpl), copyDir(t, tmpl)
			in.damage(t, w)
			in.damage(t, ro)
			jw, errW := tryOpen(t, w, Options{})
			writable := outcomeOf(t, jw, errW, epochs)
			jr, errR := openReadOnlyForTest(t, ro)
			readOnly := outcomeOf(t, jr, errR, epochs)
			if diff := cmp.Diff(writable, readOnly); diff != "" {
				t.Errorf("read-only recovery differs from writable (-writable +read-only):\n%s\nerrors: %v, %v", diff, errW, errR)
			}
		})
	}
}

// quietLog discards what a journal logs.
var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// tryOpen is open, returning Open's error rather than failing the test.
func tryOpen(t *testing.T, dir string, o Options) (*Journal, error) {
	t.Helper()
	o.Dir = dir
	o.Logger = quietLog
	j, err := Open(o)
	if err == nil {
		t.Cleanup(func() { j.Close() })
	}
	return j, err
}

// openReadOnlyForTest opens dir as Open does when the disk has no room for
// recovery's writes: read-only.
func openReadOnlyForTest(t *testing.T, dir string) (*Journal, error) {
	t.Helper()
	setHooks(t, dir, &hooks{beforePersist: func() error { return fmt.Errorf("%w: forced", ErrDiskFull) }})
	j, err := tryOpen(t, dir, Options{})
	if err == nil && !j.readOnly.Load() {
		t.Fatal("the journal is writable after recovery's writes failed for lack of space")
	}
	return j, err
}
