package journal_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/bus/share"
	"github.com/localbus/localbus/daemon/journal"
	bolt "go.etcd.io/bbolt"
)

// keyedBatchesEnv sets how many batches TestKeyedBatchesStayWithinTheBound
// publishes: 70,000 by default, what made the daemon grow past 1.3 GB when
// keys remembered their replies' bytes (under the race detector, 10,000
// into an eighth of the default bound).
const keyedBatchesEnv = "LOCALBUS_KEYED_BATCHES"

// TestKeyedBatchesStayWithinTheBound publishes 70,000 keyed batches of 50
// events on a journaled hub with idempotency_max_bytes at its default:
// what the keys count never passes the bound, the keys past it are
// forgotten and counted, and what they really take stays within what they
// count in both places they take room: the heap (it grows by at most the
// bound, what the rings retain and the checkpoint's 8 MiB) and journal.db
// (the keys' pages take at most what the keys count; the file, which keeps
// the pages bbolt's copy-on-write freed for reuse, at most twice the keys'
// and the events' pages and 4 MiB).
func TestKeyedBatchesStayWithinTheBound(t *testing.T) {
	n, maxBytes := 70000, int64(hub.DefaultIdempotencyMaxBytes)
	if raceOn {
		n, maxBytes = 10000, maxBytes/8
	}
	if v := os.Getenv(keyedBatchesEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", keyedBatchesEnv, v)
		}
	}
	const perBatch, ring = 50, 2000
	dir := t.TempDir()
	j, err := journal.Open(journal.Options{Dir: dir, Logger: quiet, Sync: journal.SyncNever})
	if err != nil {
		t.Fatal(err)
	}
	h, err := hub.New(hub.Options{Journal: j, AutoCreate: true, PeerShare: 1, IdempotencyMaxBytes: maxBytes, Limits: bus.Limits{RingSize: ring}, Logger: quiet})
	if err != nil {
		j.Close()
		t.Fatal(err)
	}
	evs := make([]bus.Event, perBatch)
	for i := range evs {
		evs[i] = bus.Event{Type: bustest.Type("t:e"), Data: json.RawMessage(fmt.Sprintf(`{"i":%d,"pad":"0123456789012345678901234567890123456789"}`, i))}
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heap0 := ms.HeapAlloc
	peer := share.UID(1000)
	for i := range n {
		batch := append([]bus.Event(nil), evs...)
		// A digest as a request's, and a key as long as a UUID.
		digest := sha256.Sum256([]byte(strconv.Itoa(i)))
		key := fmt.Sprintf("%x", digest[:18])
		if _, _, err := h.PublishOnce(peer, bustest.SessionID(fmt.Sprintf("s%d", i%8)), key, digest, batch); err != nil {
			t.Fatal(err)
		}
		if i%10000 == 0 {
			if _, b := h.KeysHeld(); b > maxBytes {
				t.Fatalf("after %d batches the keys hold %d bytes, over %d", i, b, maxBytes)
			}
		}
	}
	held, counted := h.KeysHeld()
	_, byPool := h.KeysForgotten()
	// Measured once the log's keys are in the database, and twice
	// collected: bbolt's pooled pages go with the second.
	if err := j.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	rings := h.RingBytes()
	heap := int64(ms.HeapAlloc) - int64(heap0)
	h.Close()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	keyPages, eventPages := bucketPages(t, filepath.Join(dir, "journal.db"))
	t.Logf("%d keyed batches of %d events: %d keys held, counted %d bytes (%d each), %d forgotten; heap +%.1f MiB (rings %.1f MiB); journal.db %.1f MiB, of which the keys' pages %.1f MiB (%d bytes each), the events' %.1f MiB",
		n, perBatch, held, counted, counted/int64(held), byPool, mib(heap), mib(rings), mib(fi.Size()), mib(keyPages), keyPages/int64(held), mib(eventPages))
	if counted > maxBytes {
		t.Errorf("keys count %d bytes, over %d", counted, maxBytes)
	}
	if byPool == 0 {
		t.Errorf("no key was forgotten: the bound was never reached")
	}
	if limit := maxBytes + rings + 8<<20; heap > limit {
		t.Errorf("the heap grew by %.1f MiB, over the bound, the rings and 8 MiB: %.1f MiB", mib(heap), mib(limit))
	}
	if keyPages > counted {
		t.Errorf("the keys' pages in journal.db take %d bytes, over the %d they count", keyPages, counted)
	}
	if limit := 2*(keyPages+eventPages) + 4<<20; fi.Size() > limit {
		t.Errorf("journal.db is %.1f MiB, over twice its keys' and events' pages and 4 MiB: %.1f MiB", mib(fi.Size()), mib(limit))
	}
}

// bucketPages returns the pages, in bytes, that the keys bucket of the
// database at path and its events buckets take, leaves and branches.
func bucketPages(t *testing.T, path string) (keys, events int64) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		for name, n := range map[string]*int64{"keys": &keys, "events": &events} {
			if b := tx.Bucket([]byte(name)); b != nil {
				st := b.Stats()
				*n = int64(st.LeafAlloc + st.BranchAlloc)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys, events
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
