package hub_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/bus/share"
)

// TestOnceForgetsAKeyAfterTheWindow: within the idempotency window a key
// repeats its first reply; after it, the same key publishes again.
func TestOnceForgetsAKeyAfterTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := hub.New(hub.Options{IdempotencyWindow: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		runs := 0
		publish := func() (hub.Reply, bool) {
			runs++
			return hub.Reply{Status: 200, Body: []byte{byte(runs)}}, true
		}
		once := func() (hub.Reply, bool) {
			t.Helper()
			r, replayed, err := h.OnceAs(share.Unknown, "s", "k", [32]byte{}, publish)
			if err != nil {
				t.Fatal(err)
			}
			return r, replayed
		}
		once()
		time.Sleep(time.Minute - time.Second)
		if r, replayed := once(); !replayed || r.Body[0] != 1 || runs != 1 {
			t.Fatalf("within the window: replayed %v, reply %v, %d runs; want the first reply", replayed, r.Body, runs)
		}
		time.Sleep(time.Second)
		if _, replayed := once(); replayed || runs != 2 {
			t.Fatalf("after the window: replayed %v, %d runs; want a second publish", replayed, runs)
		}
	})
}
