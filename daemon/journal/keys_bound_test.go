package journal_test

import (
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
)

// keyedBatchesEnv sets how many batches TestKeyedBatchesStayWithinTheBound
// publishes: 70,000 by default, what made the daemon grow past 1.3 GB when
// keys remembered their replies' bytes (under the race detector, 10,000
// into an eighth of the default bound).
const keyedBatchesEnv = "LOCALBUS_KEYED_BATCHES"

// TestKeyedBatchesStayWithinTheBound publishes 70,000 keyed batches of 50
// events on a journaled hub with idempotency_max_bytes at its default:
// what the keys hold in memory never passes the bound, the keys past it
// are forgotten and counted, the heap grows by less than 64 MiB over what
// the rings hold, and journal.db stays within twice the bound plus what
// the rings retain.
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
	heap0 := ms.HeapInuse
	peer := share.UID(1000)
	for i := range n {
		batch := append([]bus.Event(nil), evs...)
		if _, _, err := h.PublishOnce(peer, bustest.SessionID(fmt.Sprintf("s%d", i%8)), fmt.Sprintf("batch-%08d", i), [32]byte{}, batch); err != nil {
			t.Fatal(err)
		}
		if i%10000 == 0 {
			if _, b := h.KeysHeld(); b > maxBytes {
				t.Fatalf("after %d batches the keys hold %d bytes, over %d", i, b, maxBytes)
			}
		}
	}
	held, bytes := h.KeysHeld()
	_, byPool := h.KeysForgotten()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	var ringBytes int64
	for _, s := range h.Sessions() {
		ringBytes += s.Bus.Stats().RingBytes
	}
	heap := int64(ms.HeapInuse) - int64(heap0)
	h.Close()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d keyed batches of %d events: %d keys held in %d bytes, %d forgotten; heap +%d MiB (rings %d MiB); journal.db %d MiB",
		n, perBatch, held, bytes, byPool, heap>>20, ringBytes>>20, fi.Size()>>20)
	if bytes > maxBytes {
		t.Errorf("keys hold %d bytes, over %d", bytes, maxBytes)
	}
	if heap > ringBytes+64<<20 {
		t.Errorf("the heap grew by %d MiB, over the rings' %d MiB + 64 MiB", heap>>20, ringBytes>>20)
	}
	if limit := 2*maxBytes + 2*ringBytes + 4<<20; fi.Size() > limit {
		t.Errorf("journal.db is %d MiB, over %d MiB", fi.Size()>>20, limit>>20)
	}
}
