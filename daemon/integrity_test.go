package daemon_test

// End-to-end tests of the journal's integrity under faults (SPEC §7 Files,
// §11 Integrity) with the built daemon: damaged or planted state files
// never stop it, never make it follow a link, and never let it reuse an id
// under an epoch a client may have seen.

import (
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/localbus/localbus/daemon/daemontest"
	"github.com/localbus/localbus/daemon/journal/journaltest"
	bolt "go.etcd.io/bbolt"
)

func TestStartRefusesAStateDirOthersCanWrite(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(state, 0o777); err != nil {
		t.Fatal(err)
	}
	d := daemontest.Start(t, daemontest.Options{Dir: dir, Durable: true, NoWait: true})
	if code, _ := waitExit(t, d, time.Now()); code != 1 {
		t.Errorf("exit code = %d, want 1", code)
	}
	if log := d.Stderr(); !strings.Contains(log, state) || !strings.Contains(log, "writable by group or others") {
		t.Errorf("stderr %q does not name %s and say why it is refused", log, state)
	}
	if ents, _ := os.ReadDir(state); len(ents) != 0 {
		t.Errorf("the daemon wrote into the state_dir it refused: %v", ents)
	}
}

// TestDamagedDatabaseIsMovedAsideAndTheDaemonServesTheLog damages
// journal.db the way that made bbolt fault (SIGBUS) at every start, a file
// cut short inside its pages, and restarts the daemon: it starts, moves the
// database aside, and serves what the log still holds on a new epoch, with
// ids that continue.
func TestDamagedDatabaseIsMovedAsideAndTheDaemonServesTheLog(t *testing.T) {
	dir := t.TempDir()
	opts := daemontest.Options{Dir: dir, Durable: true}
	d := daemontest.Start(t, opts)
	for i := range 3 {
		publish(t, d, "s", "t:db", strconv.Itoa(i)) // ids 1-3, in the database after a clean stop
	}
	d.Stop(t)
	d = daemontest.Start(t, opts)
	for i := range 2 {
		publish(t, d, "s", "t:log", strconv.Itoa(i)) // ids 4-5, only in the log after kill -9
	}
	epoch := sessionInfo(t, d, "s").Epoch
	d.Kill(t)

	db := filepath.Join(dir, "state", "journal", "journal.db")
	journaltest.Truncate(t, db, 3*4096) // the meta pages name pages past the end
	d = daemontest.Start(t, opts)
	if log := d.Stderr(); !strings.Contains(log, "moved it aside") {
		t.Errorf("stderr does not report the database moved aside:\n%s", log)
	}
	if aside, _ := filepath.Glob(db + ".corrupt-*"); len(aside) != 1 {
		t.Errorf("%d files journal.db.corrupt-*, want 1", len(aside))
	}
	info := sessionInfo(t, d, "s")
	if info.Epoch == epoch || info.LastID != 5 {
		t.Errorf("after the database was lost: epoch kept = %v, lastId %d; want a new epoch and lastId 5", info.Epoch == epoch, info.LastID)
	}
	var got []uint64
	for _, env := range replay(t, d, "s", 3) {
		got = append(got, env.ID)
	}
	if !slices.Equal(got, []uint64{4, 5}) {
		t.Errorf("events served from the log: %v, want [4 5]", got)
	}
	if id := publish(t, d, "s", "t:after", "1"); id != 6 {
		t.Errorf("next id = %d, want 6", id)
	}
}

// TestRandomCorruptionsThroughTheDaemon is the daemon's side of the
// journal's TestRandomCorruptionsNeverCrashHangOrReuseAnID: it damages one
// random byte of a killed daemon's journal, N times, and starts the built
// daemon on it. The daemon always starts and answers; a session that keeps
// its epoch lost nothing its clients saw, and its next id follows. It runs
// only when LOCALBUS_CORRUPTION_DAEMON_RUNS is set, and reports how the
// daemon started.
func TestRandomCorruptionsThroughTheDaemon(t *testing.T) {
	runs, _ := strconv.Atoi(os.Getenv("LOCALBUS_CORRUPTION_DAEMON_RUNS"))
	if runs <= 0 {
		t.Skip("set LOCALBUS_CORRUPTION_DAEMON_RUNS=N to run N random corruptions through the daemon")
	}
	// The template: two sessions, some events checkpointed by a clean
	// stop, more only in the log when the daemon is killed.
	tdir := t.TempDir()
	topts := daemontest.Options{Dir: tdir, Durable: true}
	d := daemontest.Start(t, topts)
	for i := range 20 {
		publish(t, d, "a", "t:one", strconv.Itoa(i))
	}
	d.Stop(t)
	d = daemontest.Start(t, topts)
	for i := range 20 {
		publish(t, d, "a", "t:two", strconv.Itoa(i))
		publish(t, d, "b", "t:two", strconv.Itoa(i))
	}
	type seen struct {
		epoch  string
		lastID uint64
		events map[uint64]string
	}
	before := map[string]seen{}
	for _, s := range []string{"a", "b"} {
		info := sessionInfo(t, d, s)
		sn := seen{epoch: info.Epoch, lastID: info.LastID, events: map[uint64]string{}}
		for _, env := range replay(t, d, s, 0) {
			sn.events[env.ID] = env.Type + " " + string(env.Data)
		}
		before[s] = sn
	}
	d.Kill(t)
	tjournal := filepath.Join(tdir, "state", "journal")
	files := map[string][]byte{}
	for _, p := range journaltest.Files(t, tjournal) {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(p)] = data
	}

	var clean, newEpochs, aside int
	for run := range runs {
		rng := rand.New(rand.NewPCG(1, uint64(run)))
		dir := t.TempDir()
		journal := filepath.Join(dir, "state", "journal")
		if err := os.MkdirAll(journal, 0o700); err != nil {
			t.Fatal(err)
		}
		var paths []string
		for name, data := range files {
			p := filepath.Join(journal, name)
			if err := os.WriteFile(p, data, 0o600); err != nil {
				t.Fatal(err)
			}
			paths = append(paths, p)
		}
		slices.Sort(paths)
		damage := journaltest.RandomFlip(t, rng, paths)
		damage.Apply(t)
		d := daemontest.Start(t, daemontest.Options{Dir: dir, Durable: true})
		changed := false
		for s, sn := range before {
			status, _ := d.Do(t, "GET", "/api/v1/sessions/"+s, "")
			if status != 200 {
				changed = true
				continue
			}
			info := sessionInfo(t, d, s)
			if info.Epoch != sn.epoch {
				changed = true
				continue
			}
			if info.LastID < sn.lastID {
				t.Errorf("run %d (%v): session %s: lastId %d under the epoch clients saw with %d", run, damage, s, info.LastID, sn.lastID)
			}
			for _, env := range replay(t, d, s, 0) {
				if want, ok := sn.events[env.ID]; ok && want != env.Type+" "+string(env.Data) {
					t.Errorf("run %d (%v): session %s: id %d is %s %s under the same epoch, was %s", run, damage, s, env.ID, env.Type, env.Data, want)
				}
			}
			if id := publish(t, d, s, "t:after", "1"); id != max(info.LastID, sn.lastID)+1 {
				t.Errorf("run %d (%v): session %s: next id %d, want %d", run, damage, s, id, sn.lastID+1)
			}
		}
		switch {
		case strings.Contains(d.Stderr(), "moved it aside"):
			aside++
		case changed:
			newEpochs++
		default:
			clean++
		}
		d.Stop(t)
		if t.Failed() {
			break
		}
	}
	t.Logf("%d random single-byte corruptions through the daemon: started clean %d, new epochs %d, moved aside %d", runs, clean, newEpochs, aside)
}

// TestStartRefusesANewerJournalFormatTouchingNothing gives a killed
// daemon's journal (a database and a log to replay) a format newer than
// the daemon knows: the daemon exits 1 naming both formats, and the state
// dir is as it was (SPEC §11, Upgrades).
func TestStartRefusesANewerJournalFormatTouchingNothing(t *testing.T) {
	dir := t.TempDir()
	opts := daemontest.Options{Dir: dir, Durable: true}
	d := daemontest.Start(t, opts)
	publish(t, d, "s", "t:before", "1")
	d.Kill(t)
	state := filepath.Join(dir, "state")
	db, err := bolt.Open(filepath.Join(state, "journal", "journal.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("meta")).Put([]byte("format"), []byte("9")) })
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	before := treeOf(t, state)

	opts.NoWait = true
	d = daemontest.Start(t, opts)
	if code, _ := waitExit(t, d, time.Now()); code != 1 {
		t.Errorf("exit code = %d, want 1", code)
	}
	if log := d.Stderr(); !strings.Contains(log, "format 9") || !strings.Contains(log, "format 3") {
		t.Errorf("stderr does not name the state dir's format and the daemon's:\n%s", log)
	}
	if after := treeOf(t, state); !maps.Equal(before, after) {
		t.Errorf("the refused state dir changed:\nbefore %v\nafter  %v", keysOf(before), keysOf(after))
	}
}

// treeOf returns the files under dir and their contents.
func treeOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		out[path] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func keysOf(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
