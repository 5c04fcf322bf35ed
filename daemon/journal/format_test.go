package journal

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/localbus/localbus/bus"
	bolt "go.etcd.io/bbolt"
)

// A state dir of every format the journal has had, as the daemon of that
// format left it after a crash (fsync always): testdata/format-N.tar.gz
// holds its journal directory, and testdata/format-N.json what that daemon
// restored from it, per bus ("" the global bus). Format 1's: sessions
// "made" (created with a ring of 50), "auto-a" and "auto-b" (created by
// publishes of uids 1000 and 1001), and the global bus's copies; some
// events in the database, the rest in two log segments. Format 2's: format
// 1's upgraded, five more events in "made", and consumers: "backup"
// (explicit) and "indexer.v2" (auto) on "made", "tail" on "auto-a" (and
// one deleted there). Format 3's (TestWriteFormat3Fixture): format 2's
// upgraded, keyed publishes "batch-1" (its key in the database),
// "batch-2" on "made" and "ndjson-1" on "auto-a" (theirs only in the log,
// in their events' records), and a plain publish on "auto-a".
var formatFixtures = []int{1, 2, 3}

type fixtureBus struct {
	Epoch  string   `json:"epoch"`
	LastID uint64   `json:"lastId"`
	Auto   bool     `json:"auto"`
	Peer   string   `json:"peer,omitempty"`
	Ring   int      `json:"ringSize,omitempty"`
	Frames []string `json:"frames"`
	// Consumers, from format 2 on: a state dir of format 1 has none.
	Consumers []fixtureConsumer `json:"consumers,omitempty"`
	// Keys are the session's idempotency keys and their records, from
	// format 3 on (the fixtures before hold none).
	Keys map[string]string `json:"keys,omitempty"`
}

type fixtureConsumer struct {
	Name       string    `json:"name"`
	Ack        AckMode   `json:"ack"`
	AckedID    uint64    `json:"ackedId"`
	Epoch      string    `json:"epoch"`
	Created    time.Time `json:"created"`
	LastActive time.Time `json:"lastActive"`
}

// unpackFixture unpacks the state dir of format n into a temporary
// directory and returns its journal directory and what it holds.
func unpackFixture(t *testing.T, n int) (string, map[string]fixtureBus) {
	t.Helper()
	name := filepath.Join("testdata", "format-"+strconv.Itoa(n))
	f, err := os.Open(name + ".tar.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o700); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(target, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	raw, err := os.ReadFile(name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]fixtureBus
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "journal"), want
}

// restored returns what j restores, as the fixtures record it.
func restored(t *testing.T, j *Journal) map[string]fixtureBus {
	t.Helper()
	got := map[string]fixtureBus{}
	keys := map[string]map[string]string{}
	err := j.Keys(func(session, key string, rec []byte) {
		if keys[session] == nil {
			keys[session] = map[string]string{}
		}
		keys[session][key] = string(rec)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range append([]string{""}, j.Sessions()...) {
		st, epoch, ring, err := j.OpenBus(name, 0)
		if err != nil {
			t.Fatal(err)
		}
		fb := fixtureBus{Epoch: epoch, LastID: st.LastID(), Ring: ring, Keys: keys[name]}
		fb.Peer, fb.Auto = j.Auto(name)
		for _, f := range retained(st) {
			fb.Frames = append(fb.Frames, string(f.SSE()))
		}
		if name != "" {
			cs, err := j.Consumers(name)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cs {
				fb.Consumers = append(fb.Consumers, fixtureConsumer(c))
			}
		}
		got[name] = fb
	}
	return got
}

// TestStateDirsOfEveryFormatOpen opens the state dir of every format the
// journal has had: every bus comes back with its events, byte for byte,
// its ids and its epoch; ids continue, and all of it survives a restart.
func TestStateDirsOfEveryFormatOpen(t *testing.T) {
	for _, n := range formatFixtures {
		t.Run("format "+strconv.Itoa(n), func(t *testing.T) {
			dir, want := unpackFixture(t, n)
			j, lb := open(t, dir, Options{})
			if diff := cmp.Diff(want, restored(t, j)); diff != "" {
				t.Fatalf("restored (-want +got):\n%s\nlog:\n%s", diff, lb)
			}
			for _, name := range j.Sessions() {
				st, _, _, _ := j.OpenBus(name, 0)
				f := bus.NewFrame(want[name].LastID+1, "fixture:next", []byte(`{"id":0}`))
				if err := st.Append([]*bus.Frame{f}); err != nil {
					t.Fatalf("append to %s after the open: %v", name, err)
				}
			}
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			j2, _ := open(t, dir, Options{})
			got := restored(t, j2)
			for name, w := range want {
				g := got[name]
				if name != "" {
					w.LastID++
				}
				if !cmp.Equal(g.Keys, w.Keys) {
					t.Errorf("bus %q's keys after a restart: %v, want %v", name, g.Keys, w.Keys)
				}
				if !cmp.Equal(g.Consumers, w.Consumers) {
					t.Errorf("bus %q's consumers after a restart: %+v, want %+v", name, g.Consumers, w.Consumers)
				}
				if g.Epoch != w.Epoch || g.LastID != w.LastID || g.Auto != w.Auto || g.Peer != w.Peer || g.Ring != w.Ring {
					t.Errorf("bus %q after a restart: %+v, want epoch %s, last id %d, auto %v %q, ring %d",
						name, g, w.Epoch, w.LastID, w.Auto, w.Peer, w.Ring)
				}
			}
		})
	}
}

// snapshot returns the names and contents of the files under dir.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		out[strings.TrimPrefix(path, dir)] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAnOlderFormatIsUpgradedInPlaceAndANewerOneRefused gives the journal
// an upgrade to a format after this daemon's: the newest fixture opens
// upgraded, logged, with everything it held; a journal that knows only
// this daemon's format then refuses it, naming both formats, and changes
// nothing in it.
func TestAnOlderFormatIsUpgradedInPlaceAndANewerOneRefused(t *testing.T) {
	known := upgrades
	t.Cleanup(func() { upgrades = known })
	cur := formatVersion()
	next := strconv.Itoa(cur + 1)
	marker := []byte("format-" + next + "-marker")
	upgrades = append(known[:len(known):len(known)], func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(marker, []byte{1})
	})
	dir, want := unpackFixture(t, cur)
	j, lb := open(t, dir, Options{})
	if !strings.Contains(lb.String(), "upgraded the state dir in place") || !strings.Contains(lb.String(), "from="+strconv.Itoa(cur)+" to="+next) {
		t.Errorf("the upgrade is not logged:\n%s", lb)
	}
	if diff := cmp.Diff(want, restored(t, j)); diff != "" {
		t.Errorf("restored after the upgrade (-want +got):\n%s", diff)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	var format, mark []byte
	viewDB(t, dir, func(tx *bolt.Tx) {
		format = append(format, tx.Bucket(bucketMeta).Get(keyFormat)...)
		mark = tx.Bucket(bucketMeta).Get(marker)
	})
	if string(format) != next || mark == nil {
		t.Fatalf("after the upgrade: format %q, marker %v; want %s and the upgrade's marker", format, mark, next)
	}

	upgrades = known
	refusesNewer(t, dir, cur+1)
}

// TestANewerFormatIsRefusedTouchingNothing refuses a crashed state dir
// (a log to replay, a database to write) of a newer format.
func TestANewerFormatIsRefusedTouchingNothing(t *testing.T) {
	dir, _ := unpackFixture(t, 1)
	updateDB(t, dir, func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyFormat, []byte("9")) })
	refusesNewer(t, dir, 9)
}

// refusesNewer checks that Open refuses dir, of format n, with a
// FormatError naming n and this daemon's format, and leaves it as it was.
func refusesNewer(t *testing.T, dir string, n int) {
	t.Helper()
	before := snapshot(t, dir)
	j, err := Open(Options{Dir: dir, Logger: quietLog})
	if err == nil {
		j.Close()
		t.Fatal("Open of a newer format succeeded")
	}
	var fe *FormatError
	if !errors.As(err, &fe) || fe.Stored != n || fe.Known != formatVersion() {
		t.Fatalf("Open = %v, want a FormatError of format %d, known %d", err, n, formatVersion())
	}
	for _, want := range []string{"format " + strconv.Itoa(n), "format " + strconv.Itoa(formatVersion()), dir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if diff := cmp.Diff(before, snapshot(t, dir)); diff != "" {
		t.Errorf("the refused state dir changed (-before +after):\n%.2000s", diff)
	}
}

// viewDB reads the database in dir with fn.
func viewDB(t *testing.T, dir string, fn func(tx *bolt.Tx)) {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dir, dbName), 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.View(func(tx *bolt.Tx) error { fn(tx); return nil })
}
