package journal

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/localbus/localbus/daemon/journal/journaltest"
	bolt "go.etcd.io/bbolt"
)

// journalWithDBAndLog returns a crashed journal's directory whose session
// "s" holds ids 1 to 4 in the database and 5 to 7 only in the log, and
// the session's epoch.
func journalWithDBAndLog(t *testing.T) (dir, epoch string) {
	t.Helper()
	dir = t.TempDir()
	j, _ := open(t, dir, Options{})
	b := newBus(t, j, "s", 0, 0)
	publish(t, b, events(0, 4, 100)...)
	if err := j.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	publish(t, b, events(4, 3, 100)...)
	j.crash()
	return dir, b.Epoch()
}

// metaRoot returns the page size and the root page of the database at
// path, as its newest meta page says.
func metaRoot(t *testing.T, path string) (pageSize int, root uint64) {
	m := newestMeta(t, path)
	return int(m.pageSize), m.root
}

func newestMeta(t *testing.T, path string) bbMetaPage {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m0, ok0 := readMeta(data, 0)
	m1, ok1 := readMeta(data, int(m0.pageSize))
	if !ok0 || !ok1 {
		t.Fatal("meta pages invalid before any damage")
	}
	if m1.txid > m0.txid {
		m0 = m1
	}
	return m0
}

func TestUnreadableDatabaseIsMovedAsideAndTheLogRestored(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"cut inside its pages (bbolt would fault past the end)", func(t *testing.T, path string) {
			m := newestMeta(t, path)
			journaltest.Truncate(t, path, int64(m.pgid-1)*int64(m.pageSize))
		}},
		{"cut to one page", func(t *testing.T, path string) {
			ps, _ := metaRoot(t, path)
			journaltest.Truncate(t, path, int64(ps))
		}},
		{"cut to nothing", func(t *testing.T, path string) { journaltest.Truncate(t, path, 0) }},
		{"both meta pages zeroed", func(t *testing.T, path string) {
			ps, _ := metaRoot(t, path)
			journaltest.Zero(t, path, 0, int64(2*ps))
		}},
		{"the root page refers to itself", func(t *testing.T, path string) {
			ps, root := metaRoot(t, path)
			page := make([]byte, ps)
			binary.NativeEndian.PutUint64(page, root)
			binary.NativeEndian.PutUint16(page[8:], bbBranch)
			binary.NativeEndian.PutUint16(page[10:], 1)
			binary.NativeEndian.PutUint32(page[16:], 16) // the key right after the element
			binary.NativeEndian.PutUint32(page[20:], 4)
			binary.NativeEndian.PutUint64(page[24:], root)
			copy(page[32:], "meta")
			writeAt(t, path, page, int64(root)*int64(ps))
		}},
		{"an element of the root page points past it", func(t *testing.T, path string) {
			ps, root := metaRoot(t, path)
			writeAt(t, path, binary.NativeEndian.AppendUint32(nil, 1<<30), int64(root)*int64(ps)+16+4)
		}},
		{"a bus's settings are not JSON", func(t *testing.T, path string) {
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			err = db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketBuses).Put(idKey(0), []byte("{not json")) })
			if err != nil {
				t.Fatal(err)
			}
		}},
		{"a bus's events are a value, not a bucket", func(t *testing.T, path string) {
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			err = db.Update(func(tx *bolt.Tx) error {
				evs := tx.Bucket(bucketEvents)
				if err := evs.DeleteBucket(idKey(0)); err != nil {
					return err
				}
				return evs.Put(idKey(0), []byte("not a bucket"))
			})
			if err != nil {
				t.Fatal(err)
			}
		}},
		{"a format this daemon never wrote", func(t *testing.T, path string) {
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			err = db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyFormat, []byte{'1' ^ 0x40}) })
			if err != nil {
				t.Fatal(err)
			}
		}},
		{"garbage", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte(strings.Repeat("garbage!", 2048)), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, epoch := journalWithDBAndLog(t)
			path := filepath.Join(dir, dbName)
			tt.damage(t, path)

			j, lb := open(t, dir, Options{})
			log := lb.String()
			if !strings.Contains(log, "moved it aside") {
				t.Errorf("log does not report the database moved aside:\n%s", log)
			}
			if aside, _ := filepath.Glob(path + ".corrupt-*"); len(aside) != 1 {
				t.Errorf("%d files %s.corrupt-*, want 1", len(aside), dbName)
			}
			if got := j.Sessions(); !cmp.Equal(got, []string{"s"}) {
				t.Fatalf("Sessions() = %v, want [s] from the log", got)
			}
			st, epoch2, _, _ := j.OpenBus("s", 0)
			if diff := cmp.Diff(span(5, 7), ids(retained(st))); diff != "" {
				t.Errorf("events restored from the log (-want +got):\n%s", diff)
			}
			if epoch2 == epoch {
				t.Errorf("epoch kept after the database was lost")
			}
			if first, _ := publish(t, newBus(t, j, "s", 0, 0), events(7, 1, 10)...); first != 8 {
				t.Errorf("next id = %d, want 8", first)
			}
		})
	}
}

func writeAt(t *testing.T, path string, p []byte, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(p, off); err != nil {
		t.Fatal(err)
	}
}
