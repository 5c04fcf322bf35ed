package hub_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/bus/share"
)

// TestOnceForgetsAKeyAfterTheWindow: within the idempotency window a key
// repeats its first result; after it, the same key publishes again.
func TestOnceForgetsAKeyAfterTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := hub.New(hub.Options{AutoCreate: true, IdempotencyWindow: time.Minute, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		once := func() (hub.Result, bool) {
			t.Helper()
			r, replayed, err := h.PublishOnce(share.Unknown, bustest.SessionID("s"), "k", [32]byte{}, []bus.Event{ev("a:b", 1), ev("a:b", 2)})
			if err != nil {
				t.Fatal(err)
			}
			return r, replayed
		}
		first, _ := once()
		if want := (hub.Result{First: 1, Count: 2, LastID: 2}); first != want {
			t.Fatalf("first result %+v, want %+v", first, want)
		}
		time.Sleep(time.Minute - time.Second)
		if r, replayed := once(); !replayed || r != first {
			t.Fatalf("within the window: replayed %v, result %+v; want the first result %+v", replayed, r, first)
		}
		time.Sleep(time.Second)
		if r, replayed := once(); replayed || r.First != 3 {
			t.Fatalf("after the window: replayed %v, result %+v; want a second publish from id 3", replayed, r)
		}
	})
}

// TestPublishOnceRefusesAnotherBodyAndRemembersNoFailure: the same key with
// another digest is ErrKeyReused; a publish that fails is not remembered.
func TestPublishOnceRefusesAnotherBodyAndRemembersNoFailure(t *testing.T) {
	h := newHub(t, hub.Options{AutoCreate: true, Logger: quiet})
	if _, _, err := h.PublishOnce(share.Unknown, bustest.SessionID("s"), "k", [32]byte{1}, []bus.Event{ev("a:b", 1)}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.PublishOnce(share.Unknown, bustest.SessionID("s"), "k", [32]byte{2}, []bus.Event{ev("a:b", 1)}); !errors.Is(err, hub.ErrKeyReused) {
		t.Fatalf("another digest: %v, want ErrKeyReused", err)
	}
	bad := []bus.Event{{Type: bus.TypeReloaded, Data: []byte(`1`)}}
	if _, _, err := h.PublishOnce(share.Unknown, bustest.SessionID("s"), "k2", [32]byte{3}, bad); err == nil {
		t.Fatal("the daemon's type published")
	}
	r, replayed, err := h.PublishOnce(share.Unknown, bustest.SessionID("s"), "k2", [32]byte{3}, []bus.Event{ev("a:b", 1)})
	if err != nil || replayed || r.First != 2 {
		t.Fatalf("after a failure the key publishes: %+v, replayed %v, %v; want id 2", r, replayed, err)
	}
}

// TestKeysAreBoundedInBytes fills the pool of remembered keys with keys of
// one peer, privileged, and of others: what they hold never passes
// idempotency_max_bytes.
func TestKeysAreBoundedInBytes(t *testing.T) {
	const max = 1 << 16
	h := newHub(t, hub.Options{AutoCreate: true, IdempotencyMaxBytes: max, PeerShare: 0.25, Logger: quiet})
	for i := range 2000 {
		p := share.UID(uint32(1000 + i%7))
		if _, _, err := h.PublishOnce(p, bustest.SessionID("s"), fmt.Sprintf("key-%06d", i), [32]byte{}, []bus.Event{ev("a:b", i)}); err != nil {
			t.Fatal(err)
		}
		if _, b := h.KeysHeld(); b > max {
			t.Fatalf("after %d keys the table holds %d bytes, over %d", i+1, b, max)
		}
	}
	n, b := h.KeysHeld()
	byShare, byPool := h.KeysForgotten()
	t.Logf("%d keys held in %d bytes; forgotten %d by share, %d by pool", n, b, byShare, byPool)
	if n == 0 || byShare+byPool == 0 {
		t.Errorf("%d keys held, %d forgotten; want some of each", n, byShare+byPool)
	}
}

// TestAStoredKeyKeepsFormat3sKeys: the record of a remembered key holds
// the keys format 3 has always stored, "status" 200 among them (which
// daemons of format 3 before this one read as the reply's status), and a
// hub restarted on it repeats the result.
func TestAStoredKeyKeepsFormat3sKeys(t *testing.T) {
	t.Parallel()
	j := newMemJournal()
	h, err := hub.New(hub.Options{Journal: j, AutoCreate: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	first, _, err := h.PublishOnce(share.UID(7), bustest.SessionID("s"), "k", [32]byte{5}, []bus.Event{ev("a:b", 1), ev("a:b", 2)})
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	rec, ok := j.keys[[2]string{"s", "k"}]
	if !ok {
		t.Fatal("no record stored for the key")
	}
	var got map[string]any
	if err := json.Unmarshal(rec, &got); err != nil {
		t.Fatalf("record %s: %v", rec, err)
	}
	keys := slices.Sorted(maps.Keys(got))
	if diff := cmp.Diff([]string{"at", "count", "digest", "first", "lastId", "peer", "status"}, keys); diff != "" {
		t.Errorf("record %s: keys mismatch (-want +got):\n%s", rec, diff)
	}
	if got["status"] != 200.0 || got["first"] != 1.0 || got["count"] != 2.0 || got["lastId"] != 2.0 || got["peer"] != "uid:7" {
		t.Errorf("record %s, want status 200, first 1, count 2, lastId 2, peer uid:7", rec)
	}
	h2, err := hub.New(hub.Options{Journal: j, AutoCreate: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	r, replayed, err := h2.PublishOnce(share.UID(7), bustest.SessionID("s"), "k", [32]byte{5}, []bus.Event{ev("a:b", 1), ev("a:b", 2)})
	if err != nil || !replayed || r != first {
		t.Fatalf("after a restart: %+v, replayed %v, %v; want %+v again", r, replayed, err, first)
	}
}

// TestZeroOptionsRememberKeysForTheDefaultWindow: a hub made, or set on
// reload, with no idempotency window remembers a key for
// DefaultIdempotencyWindow.
func TestZeroOptionsRememberKeysForTheDefaultWindow(t *testing.T) {
	for _, reload := range []bool{false, true} {
		t.Run(fmt.Sprintf("reload=%v", reload), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				opts := hub.Options{AutoCreate: true, Logger: quiet}
				if reload {
					opts.IdempotencyWindow = time.Hour
				}
				h, err := hub.New(opts)
				if err != nil {
					t.Fatal(err)
				}
				defer h.Close()
				if reload {
					h.SetOptions(hub.Options{AutoCreate: true})
				}
				once := func(key string) bool {
					t.Helper()
					_, replayed, err := h.PublishOnce(share.Unknown, bustest.SessionID("s"), key, [32]byte{}, []bus.Event{ev("a:b", 1)})
					if err != nil {
						t.Fatal(err)
					}
					return replayed
				}
				once("k")
				time.Sleep(hub.DefaultIdempotencyWindow - time.Second)
				if !once("k") {
					t.Fatal("the key was forgotten before the default window ended")
				}
				time.Sleep(time.Second)
				if once("k") {
					t.Fatal("the key was remembered past the default window")
				}
			})
		})
	}
}
