package journal

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
)

// TestConsumersSurviveARestartAndACrashAndDieWithTheirSession stores
// consumers of two sessions: they come back after a clean restart and
// after a crash, a put replaces the record of its name, and deleting a
// session deletes its consumers (in the database too) while the other
// session keeps its own; a session created again under that id has none.
func TestConsumersSurviveARestartAndACrashAndDieWithTheirSession(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, dir, Options{})
	publish(t, newBus(t, j, "a", 0, 0), events(0, 3, 50)...)
	publish(t, newBus(t, j, "b", 0, 0), events(0, 3, 50)...)
	_, epoch, _, _ := j.OpenBus("a", 0)
	t0 := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	want := []Consumer{
		{Name: "reader", Ack: AckExplicit, AckedID: 2, Epoch: epoch, Created: t0, LastActive: t0.Add(time.Second)},
		{Name: "x.y-z_1", Ack: AckAuto, AckedID: 3, Epoch: epoch, Created: t0, LastActive: t0},
	}
	for _, c := range []Consumer{want[1], {Name: "reader", Ack: AckExplicit, Epoch: epoch, Created: t0}, want[0]} {
		if err := j.PutConsumer("a", c); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.PutConsumer("b", Consumer{Name: "reader", Ack: AckAuto, AckedID: 1, Created: t0}); err != nil {
		t.Fatal(err)
	}
	check := func(j *Journal, when string) {
		t.Helper()
		got, err := j.Consumers("a")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: consumers of a (-want +got):\n%s", when, diff)
		}
	}
	check(j, "before a restart")
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j, _ = open(t, dir, Options{})
	check(j, "after a clean restart")
	j.crash()
	j, _ = open(t, dir, Options{})
	check(j, "after a crash")

	if err := j.Delete("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Consumers("a"); !errors.Is(err, ErrNoSession) {
		t.Errorf("Consumers of a deleted session: %v, want ErrNoSession", err)
	}
	if err := j.PutConsumer("a", want[0]); !errors.Is(err, ErrNoSession) {
		t.Errorf("PutConsumer on a deleted session: %v, want ErrNoSession", err)
	}
	if got, err := j.Consumers("b"); err != nil || len(got) != 1 || got[0].AckedID != 1 {
		t.Errorf("b's consumers after a was deleted: %+v, %v", got, err)
	}
	newBus(t, j, "a", 0, 0)
	if got, err := j.Consumers("a"); err != nil || len(got) != 0 {
		t.Errorf("a created again has consumers %+v, %v; want none", got, err)
	}
	if err := j.DeleteConsumer("b", "reader"); err != nil {
		t.Fatal(err)
	}
	if err := j.DeleteConsumer("b", "never-was"); err != nil {
		t.Errorf("DeleteConsumer of an unknown name: %v", err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	viewDB(t, dir, func(tx *bolt.Tx) {
		root := tx.Bucket(bucketConsumers)
		if root == nil {
			t.Fatal("no bucket of consumers")
		}
		root.ForEachBucket(func(k []byte) error {
			if n := root.Bucket(k).Stats().KeyN; n != 0 {
				t.Errorf("bus %x still stores %d consumers", k, n)
			}
			return nil
		})
	})
}

// TestConsumerCallsRefuseWhatTheyCannotStore: the global bus and unknown
// sessions have no consumers, a record needs a name and a known ack mode,
// a damaged record is reported as damage, and a closed journal refuses.
func TestConsumerCallsRefuseWhatTheyCannotStore(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, dir, Options{})
	newBus(t, j, "", 0, 0)
	newBus(t, j, "s", 0, 0)
	for _, session := range []string{"", "nope"} {
		if err := j.PutConsumer(session, Consumer{Name: "c", Ack: AckAuto}); !errors.Is(err, ErrNoSession) {
			t.Errorf("PutConsumer(%q) = %v, want ErrNoSession", session, err)
		}
	}
	for _, c := range []Consumer{{Ack: AckAuto}, {Name: "c"}, {Name: "c", Ack: "sometimes"}} {
		if err := j.PutConsumer("s", c); err == nil {
			t.Errorf("PutConsumer(%+v) succeeded", c)
		}
	}
	if got, err := j.Consumers("s"); err != nil || len(got) != 0 {
		t.Errorf("after refused puts: %+v, %v", got, err)
	}
	if err := j.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.Bucket(bucketConsumers).CreateBucketIfNotExists(idKey(j.names["s"]))
		if err != nil {
			return err
		}
		return b.Put([]byte("bad"), []byte(`{"ack":"never"}`))
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Consumers("s"); !errors.Is(err, errDamaged) {
		t.Errorf("Consumers with a damaged record: %v, want damage", err)
	}
	j.Close()
	if err := j.PutConsumer("s", Consumer{Name: "c", Ack: AckAuto}); !errors.Is(err, ErrClosed) {
		t.Errorf("PutConsumer after Close: %v, want ErrClosed", err)
	}
	if _, err := j.Consumers("s"); !errors.Is(err, ErrClosed) {
		t.Errorf("Consumers after Close: %v, want ErrClosed", err)
	}
}
