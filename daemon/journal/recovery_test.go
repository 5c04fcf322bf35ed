package journal

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/localbus/localbus/daemon/journal/journaltest"
	bolt "go.etcd.io/bbolt"
)

func TestEpochAfterRestart(t *testing.T) {
	tests := []struct {
		name      string
		mode      string
		crash     bool
		keepEpoch bool
	}{
		{"clean stop, always", SyncAlways, false, true},
		{"clean stop, interval", SyncInterval, false, true},
		{"clean stop, never", SyncNever, false, true},
		{"crash, always", SyncAlways, true, true},
		{"crash, interval", SyncInterval, true, false},
		{"crash, never", SyncNever, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			j, _ := open(t, dir, Options{Sync: tt.mode})
			g := newBus(t, j, "", 0, 0)
			s := newBus(t, j, "s", 0, 0)
			publish(t, s, events(0, 3, 50)...)
			publish(t, g, events(0, 3, 50)...)
			epochs := []string{g.Epoch(), s.Epoch()}
			if tt.crash {
				j.crash()
			} else if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			j2, lb := open(t, dir, Options{Sync: SyncAlways})
			for i, name := range []string{"", "s"} {
				st, epoch, _, err := j2.OpenBus(name, 0)
				if err != nil {
					t.Fatal(err)
				}
				if kept := epoch == epochs[i]; kept != tt.keepEpoch {
					t.Errorf("bus %q: epoch kept = %v, want %v", name, kept, tt.keepEpoch)
				}
				// A process crash loses nothing written, whatever the mode.
				if diff := cmp.Diff(span(1, 3), ids(retained(st))); diff != "" {
					t.Errorf("bus %q events (-want +got):\n%s", name, diff)
				}
			}
			if unclean := strings.Contains(lb.String(), "did not stop cleanly"); unclean != tt.crash {
				t.Errorf("logged an unclean stop = %v, want %v:\n%s", unclean, tt.crash, lb)
			}
		})
	}
}

func TestTornTailIsCutAndLogged(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, dir, Options{})
	b := newBus(t, j, "s", 0, 0)
	for i := range 5 {
		publish(t, b, events(i*2, 2, 100)...) // five records, ids 1 to 10
	}
	epoch := b.Epoch()
	j.crash()
	segs := segmentsIn(t, dir)
	last := segs[len(segs)-1]
	if err := os.Truncate(last, int64(logEnd(t, last)-50)); err != nil { // inside the last record
		t.Fatal(err)
	}

	j2, lb := open(t, dir, Options{})
	st, epoch2, _, _ := j2.OpenBus("s", 0)
	if diff := cmp.Diff(span(1, 8), ids(retained(st))); diff != "" {
		t.Errorf("events after a torn tail (-want +got):\n%s", diff)
	}
	if st.LastID() != 8 {
		t.Errorf("LastID() = %d, want 8: the torn batch was never acknowledged", st.LastID())
	}
	if epoch2 != epoch {
		t.Errorf("epoch changed after a torn tail with fsync always: %q, want %q", epoch2, epoch)
	}
	log := lb.String()
	for _, want := range []string{"torn record", "droppedSession=s", "droppedFirstId=9", "droppedCount=2", "lastIntactId=8"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	// The journal works on: the next id is 9.
	b2 := newBus(t, j2, "s", 0, 0)
	if first, _ := publish(t, b2, events(0, 1, 10)...); first != 9 {
		t.Errorf("next id = %d, want 9", first)
	}
}

func TestCorruptLogRecordDropsTheRestWithNewEpochs(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, dir, Options{})
	b := newBus(t, j, "s", 0, 0)
	publish(t, b, events(0, 2, 100)...) // segment 1: ids 1-2, then 3-4
	publish(t, b, events(2, 2, 100)...)
	if _, _, err := j.wal.rotate(); err != nil { // segment 2: ids 5-6
		t.Fatal(err)
	}
	publish(t, b, events(4, 2, 100)...)
	epoch := b.Epoch()
	j.crash()
	segs := segmentsIn(t, dir)
	if len(segs) != 2 {
		t.Fatalf("%d segments, want 2", len(segs))
	}
	data, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	data[logEnd(t, segs[0])-30] ^= 0xff // in the second record of the first segment
	if err := os.WriteFile(segs[0], data, 0o600); err != nil {
		t.Fatal(err)
	}

	j2, lb := open(t, dir, Options{})
	st, epoch2, _, _ := j2.OpenBus("s", 0)
	if diff := cmp.Diff(span(1, 2), ids(retained(st))); diff != "" {
		t.Errorf("events after a corrupt record (-want +got):\n%s", diff)
	}
	if epoch2 == epoch {
		t.Errorf("epoch kept after acknowledged events were lost")
	}
	if log := lb.String(); !strings.Contains(log, "corrupt log record") || !strings.Contains(log, "laterSegmentsDropped=1") {
		t.Errorf("log does not report the corruption:\n%s", log)
	}
}

func TestCorruptStoredEventDropsItAndOlderOnes(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, dir, Options{})
	b := newBus(t, j, "s", 0, 0)
	other := newBus(t, j, "other", 0, 0)
	publish(t, b, events(0, 4, 100)...) // the chunk of ids 1-4
	if err := j.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	publish(t, b, events(4, 6, 100)...) // the chunk of ids 5-10, at Close
	publish(t, other, events(0, 3, 100)...)
	epoch, otherEpoch := b.Epoch(), other.Epoch()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	// Flip a byte of event 4, in the chunk of 1-4, as bit rot would.
	db, err := bolt.Open(dir+"/"+dbName, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		num := uint64(0) // the first bus created
		bk := eventsBucket(tx, num)
		v := append([]byte(nil), bk.Get(idKey(1))...)
		v[len(v)-3] ^= 0x01
		return bk.Put(idKey(1), v)
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	j2, lb := open(t, dir, Options{})
	st, epoch2, _, _ := j2.OpenBus("s", 0)
	if diff := cmp.Diff(span(5, 10), ids(retained(st))); diff != "" {
		t.Errorf("events after a corrupt stored event (-want +got):\n%s", diff)
	}
	if st.LastID() != 10 || epoch2 == epoch {
		t.Errorf("LastID() = %d, epoch changed = %v; want 10, true", st.LastID(), epoch2 != epoch)
	}
	ost, oepoch, _, _ := j2.OpenBus("other", 0)
	if len(retained(ost)) != 3 || oepoch != otherEpoch {
		t.Errorf("an intact bus lost events or its epoch")
	}
	if log := lb.String(); !strings.Contains(log, "dropped damaged stored events") || !strings.Contains(log, "throughId=4") {
		t.Errorf("log does not report the damage:\n%s", log)
	}
	j2.Close()
	// The damage is gone from disk: a third open finds nothing to report.
	_, lb3 := open(t, dir, Options{})
	if strings.Contains(lb3.String(), "damaged") {
		t.Errorf("damage reported again:\n%s", lb3)
	}
}

func TestUnreadableDatabaseIsMovedAsideAndTheJournalStartsOver(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, dir, Options{})
	publish(t, newBus(t, j, "s", 0, 0), events(0, 3, 100)...)
	j.Close()
	if err := os.WriteFile(dir+"/"+dbName, []byte(strings.Repeat("garbage!", 2048)), 0o600); err != nil {
		t.Fatal(err)
	}
	j2, lb := open(t, dir, Options{})
	if got := j2.Sessions(); len(got) != 0 {
		t.Errorf("Sessions() = %v, want none", got)
	}
	if !strings.Contains(lb.String(), "cannot be read") {
		t.Errorf("log does not report the unreadable database:\n%s", lb)
	}
	ents, _ := os.ReadDir(dir)
	var aside bool
	for _, e := range ents {
		aside = aside || strings.HasPrefix(e.Name(), dbName+".corrupt-")
	}
	if !aside {
		t.Errorf("the unreadable database was not kept aside")
	}
}

func TestSecondOpenOfTheSameDirectoryIsRefused(t *testing.T) {
	dir := t.TempDir()
	open(t, dir, Options{})
	_, err := Open(Options{Dir: dir})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open = %v, want ErrLocked", err)
	}
}

// recordOffsets returns the offsets where the records of a segment file
// start, and the offset past the last one.
func recordOffsets(t testing.TB, path string) []int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sr := cutRecords(data, true)
	if sr.tail != tailClean {
		t.Fatalf("%s: a %v tail at %d", path, sr.tail, sr.end)
	}
	return append(sr.offs, sr.end)
}

func TestDamageInsideTheNewestSegmentIsCorruptionUnlessTheTailIsTorn(t *testing.T) {
	// Five records of two events each, ids 1 to 10, in one segment; each
	// case damages it given the offsets where its records start (and the
	// offset past the last one).
	tests := []struct {
		name   string
		damage func(t *testing.T, path string, offs []int)
		torn   bool
		kept   []uint64
	}{
		{"a byte in the middle of the second record", func(t *testing.T, path string, offs []int) {
			journaltest.Flip(t, path, int64(offs[1]+(offs[2]-offs[1])/2), 0x10)
		}, false, span(1, 2)},
		{"the length of the second record", func(t *testing.T, path string, offs []int) {
			journaltest.Flip(t, path, int64(offs[1]+3), 0x01)
		}, false, span(1, 2)},
		{"the checksum of the second record", func(t *testing.T, path string, offs []int) {
			journaltest.Flip(t, path, int64(offs[1]+5), 0x80)
		}, false, span(1, 2)},
		{"the header of the second record zeroed", func(t *testing.T, path string, offs []int) {
			journaltest.Zero(t, path, int64(offs[1]), recHeaderLen)
		}, false, span(1, 2)},
		{"a byte in the middle of the last record", func(t *testing.T, path string, offs []int) {
			journaltest.Flip(t, path, int64(offs[4]+(offs[5]-offs[4])/2), 0x04)
		}, false, span(1, 8)},
		{"the last byte of the last record", func(t *testing.T, path string, offs []int) {
			journaltest.Flip(t, path, int64(offs[5]-1), '}')
		}, false, span(1, 8)},
		{"the length of the last record made longer", func(t *testing.T, path string, offs []int) {
			journaltest.Flip(t, path, int64(offs[4]+2), 0x01)
		}, false, span(1, 8)},
		{"the length of the last record made huge", func(t *testing.T, path string, offs []int) {
			journaltest.Flip(t, path, int64(offs[4]), 0x3f)
		}, false, span(1, 8)},
		{"the checksum of the last record", func(t *testing.T, path string, offs []int) {
			journaltest.Flip(t, path, int64(offs[4]+7), 0x01)
		}, false, span(1, 8)},
		{"the file cut inside the last record", func(t *testing.T, path string, offs []int) {
			journaltest.Truncate(t, path, int64(offs[5]-50))
		}, true, span(1, 8)},
		{"the end of the last record never written", func(t *testing.T, path string, offs []int) {
			journaltest.Zero(t, path, int64(offs[5]-60), 60)
		}, true, span(1, 8)},
		{"a byte past the end of the log", func(t *testing.T, path string, offs []int) {
			journaltest.Flip(t, path, int64(offs[5]+100), 0x42)
		}, true, span(1, 10)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			j, _ := open(t, dir, Options{})
			b := newBus(t, j, "s", 0, 0)
			for i := range 5 {
				publish(t, b, events(i*2, 2, 100)...)
			}
			epoch := b.Epoch()
			j.crash()
			segs := segmentsIn(t, dir)
			if len(segs) != 1 {
				t.Fatalf("%d segments, want 1", len(segs))
			}
			offs := recordOffsets(t, segs[0])
			if len(offs) != 6 {
				t.Fatalf("%d records, want 5", len(offs)-1)
			}
			tt.damage(t, segs[0], offs)

			j2, lb := open(t, dir, Options{})
			st, epoch2, _, _ := j2.OpenBus("s", 0)
			if diff := cmp.Diff(tt.kept, ids(retained(st))); diff != "" {
				t.Errorf("events kept (-want +got):\n%s", diff)
			}
			log := lb.String()
			if tt.torn {
				if epoch2 != epoch || strings.Contains(log, "corrupt") {
					t.Errorf("a torn tail: epoch kept = %v, want true; log:\n%s", epoch2 == epoch, log)
				}
				return
			}
			if epoch2 == epoch {
				t.Errorf("epoch kept after acknowledged events were lost: ids %d to 10 could be reused under it", st.LastID()+1)
			}
			if !strings.Contains(log, "corrupt log record") || strings.Contains(log, "torn") {
				t.Errorf("log does not report corruption:\n%s", log)
			}
		})
	}
}

// TestMissingStoredEventsGiveANewEpoch removes the bucket of a bus whose
// settings say the database holds events (a damaged key in the events
// bucket does that): the events are gone, so the bus gets a new epoch and
// serves what the log still holds, and its ids continue.
func TestMissingStoredEventsGiveANewEpoch(t *testing.T) {
	dir, epoch := journalWithDBAndLog(t) // "s": 1-4 in the database, 5-7 in the log
	updateDB(t, dir, func(tx *bolt.Tx) error { return tx.Bucket(bucketEvents).DeleteBucket(idKey(0)) })
	j, lb := open(t, dir, Options{})
	st, epoch2, _, err := j.OpenBus("s", 0)
	if err != nil {
		t.Fatal(err)
	}
	if epoch2 == epoch {
		t.Error("epoch kept with the stored events gone")
	}
	if diff := cmp.Diff(span(5, 7), ids(retained(st))); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if !strings.Contains(lb.String(), "stored events are missing") {
		t.Errorf("not logged:\n%s", lb)
	}
	b := newBus(t, j, "s", 0, 0)
	if first, _ := publish(t, b, events(0, 1, 10)...); first != 8 {
		t.Errorf("next id = %d, want 8", first)
	}
}

// TestRecordsOfADeletedSessionAreSkippedWithALogLine deletes a session
// whose records are still in the log and crashes: the replay skips them,
// and says so with how many there were.
func TestRecordsOfADeletedSessionAreSkippedWithALogLine(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, dir, Options{})
	for _, name := range []string{"kept", "gone"} {
		publish(t, newBus(t, j, name, 0, 0), events(0, 5, 10)...)
	}
	if err := j.Delete("gone"); err != nil {
		t.Fatal(err)
	}
	j.crash()
	j2, lb := open(t, dir, Options{})
	if got := j2.Sessions(); len(got) != 1 || got[0] != "kept" {
		t.Errorf("Sessions after the crash = %v, want [kept]", got)
	}
	line := ""
	for _, l := range strings.Split(lb.String(), "\n") {
		if strings.Contains(l, "no longer names") {
			line = l
		}
	}
	if !strings.Contains(line, "records=1") || !strings.Contains(line, "events=5") || !strings.Contains(line, "buses=1") {
		t.Errorf("no log line counting the skipped records (1 record of 5 events, 1 bus):\n%s", lb)
	}
}
