package journal

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/localbus/localbus/bus"
	bolt "go.etcd.io/bbolt"
)

// keyVal is format 3's record of a key for ids first to last.
func keyVal(at int64, first, last uint64) []byte {
	b, _ := json.Marshal(keyValue{At: at, Digest: [32]byte{7}, Peer: "uid:1000", Status: 200, First: first, Count: int(last - first + 1), LastID: last})
	return b
}

// publishKeyed publishes evs to b as one batch with key.
func publishKeyed(t testing.TB, b *bus.Bus, key string, at int64, evs ...bus.Event) (first, last uint64) {
	t.Helper()
	st, err := b.Stage(bus.Batch{Events: evs, Key: key, KeyValue: func(f, l uint64) []byte { return keyVal(at, f, l) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Finish(st); err != nil {
		t.Fatal(err)
	}
	return st.First, st.Last
}

// keysOf returns what j.Keys lists, by session and key.
func keysOf(t testing.TB, j *Journal) map[string]string {
	t.Helper()
	out := map[string]string{}
	if err := j.Keys(func(session, key string, rec []byte) { out[session+"/"+key] = string(rec) }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAKeyIsDurableWithItsEvents publishes keyed batches and crashes: the
// keys come back with their events from the log, then from the database
// once a checkpoint removed the log; a key dropped stays dropped.
func TestAKeyIsDurableWithItsEvents(t *testing.T) {
	dir := t.TempDir()
	j, _ := open(t, dir, Options{})
	b := newBus(t, j, "s", 0, 0)
	publish(t, b, events(0, 2, 10)...)
	publishKeyed(t, b, "k1", 1, events(2, 3, 10)...)
	publishKeyed(t, b, "k2", 2, events(5, 1, 10)...)
	want := map[string]string{"s/k1": string(keyVal(1, 3, 5)), "s/k2": string(keyVal(2, 6, 6))}
	if diff := cmp.Diff(want, keysOf(t, j)); diff != "" {
		t.Fatalf("keys before the crash (-want +got):\n%s", diff)
	}
	j.crash()

	j2, _ := open(t, dir, Options{})
	if diff := cmp.Diff(want, keysOf(t, j2)); diff != "" {
		t.Fatalf("keys replayed from the log (-want +got):\n%s", diff)
	}
	st, _, _, _ := j2.OpenBus("s", 0)
	if st.LastID() != 6 {
		t.Fatalf("last id after the crash = %d, want 6", st.LastID())
	}
	if err := j2.DropKeys("s", []string{"k2"}); err != nil {
		t.Fatal(err)
	}
	delete(want, "s/k2")
	if err := j2.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if segs := len(j2.logKeys); segs != 0 {
		t.Errorf("%d keys held in memory after a checkpoint, want 0", segs)
	}
	b2 := newBus(t, j2, "s", 0, 0)
	publishKeyed(t, b2, "k3", 3, events(6, 1, 10)...)
	want["s/k3"] = string(keyVal(3, 7, 7))
	j2.crash()

	j3, _ := open(t, dir, Options{})
	if diff := cmp.Diff(want, keysOf(t, j3)); diff != "" {
		t.Fatalf("keys after a checkpoint and a crash (-want +got):\n%s", diff)
	}
	if err := j3.Close(); err != nil {
		t.Fatal(err)
	}
	var inDB []string
	viewDB(t, dir, func(tx *bolt.Tx) {
		tx.Bucket(bucketKeys).ForEach(func(k, _ []byte) error { inDB = append(inDB, string(k)); return nil })
	})
	if w := []string{"s\x00k1", "s\x00k3"}; !slices.Equal(inDB, w) {
		t.Errorf("keys in the database after a clean close: %q, want %q", inDB, w)
	}
}

// TestKeysOfFormat2AreConvertedInTheUpgrade stores keys as a daemon of
// format 2 did, with the reply's bytes, in the format-2 fixture: the
// upgrade keeps, as values, those whose reply names contiguous ids, and
// drops the rest.
func TestKeysOfFormat2AreConvertedInTheUpgrade(t *testing.T) {
	dir, _ := unpackFixture(t, 2)
	old := func(status int, body string) []byte {
		rec := map[string]any{"at": 5, "digest": [32]byte{9}, "peer": "uid:1000",
			"reply": map[string]any{"status": status, "contentType": "application/json", "body": []byte(body)}}
		b, _ := json.Marshal(rec)
		return b
	}
	stored := map[string][]byte{
		"ids":        old(200, "{\"ids\":[3,4,5],\"lastId\":5}\n"),
		"stream":     old(200, "{\"count\":2,\"firstId\":7,\"lastId\":8,\"ids\":[7,8]}\n"),
		"line acks":  old(200, "{\"id\":9}\n{\"id\":10}\n{\"count\":2,\"firstId\":9,\"lastId\":10,\"ids\":[9,10]}\n"),
		"long":       old(200, "{\"count\":5000,\"firstId\":11,\"lastId\":5010}\n"),
		"gaps":       old(200, "{\"ids\":[3,5],\"lastId\":5}\n"),
		"interleave": old(200, "{\"count\":2,\"firstId\":7,\"lastId\":9,\"ids\":[7,9]}\n"),
		"refused":    old(400, "{\"error\":{\"code\":\"invalid_body\",\"message\":\"x\"}}\n"),
		"junk":       []byte("not json"),
	}
	updateDB(t, dir, func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketKeys)
		if err != nil {
			return err
		}
		for k, v := range stored {
			if err := b.Put(keyOf("made", k), v); err != nil {
				return err
			}
		}
		return nil
	})
	j, lb := open(t, dir, Options{})
	val := func(first uint64, count int) string {
		b, _ := json.Marshal(keyValue{At: 5, Digest: [32]byte{9}, Peer: "uid:1000", Status: 200, First: first, Count: count, LastID: first + uint64(count) - 1})
		return string(b)
	}
	want := map[string]string{
		"made/ids": val(3, 3), "made/stream": val(7, 2), "made/line acks": val(9, 2), "made/long": val(11, 5000),
	}
	if diff := cmp.Diff(want, keysOf(t, j)); diff != "" {
		t.Errorf("keys after the upgrade (-want +got):\n%s\nlog:\n%s", diff, lb)
	}
}

// TestWriteFormat3Fixture, with LOCALBUS_WRITE_FIXTURE=3, writes
// testdata/format-3: the format-2 fixture upgraded, with keyed publishes
// (one key in the database, two only in the log) and a plain one, left by
// a crash, and what a daemon of format 3 restores from it.
func TestWriteFormat3Fixture(t *testing.T) {
	if os.Getenv("LOCALBUS_WRITE_FIXTURE") != "3" {
		t.Skip("set LOCALBUS_WRITE_FIXTURE=3 to write testdata/format-3")
	}
	dir, _ := unpackFixture(t, 2)
	j, _ := open(t, dir, Options{})
	at := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC).UnixNano()
	made := newBus(t, j, "made", 0, 0)
	publishKeyed(t, made, "batch-1", at, events(2000, 3, 60)...)
	if err := j.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	publishKeyed(t, made, "batch-2", at+1, events(2003, 2, 60)...)
	autoA := newBus(t, j, "auto-a", 0, 0)
	publish(t, autoA, events(2005, 1, 60)...)
	publishKeyed(t, autoA, "ndjson-1", at+2, events(2006, 4, 60)...)
	j.crash()

	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	tw.WriteHeader(&tar.Header{Name: "journal/", Typeflag: tar.TypeDir, Mode: 0o700, ModTime: time.Unix(0, at)})
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		tw.WriteHeader(&tar.Header{Name: "journal/" + e.Name(), Typeflag: tar.TypeReg, Mode: 0o600, Size: int64(len(data)), ModTime: time.Unix(0, at)})
		tw.Write(data)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("testdata", "format-3.tar.gz"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	j2, _ := open(t, dir, Options{})
	js, err := json.MarshalIndent(restored(t, j2), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("testdata", "format-3.json"), append(js, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}
