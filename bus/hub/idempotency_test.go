package hub_test

import (
	"strconv"
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
		publish := func() (hub.Result, bool) {
			runs++
			return hub.Result(strconv.Itoa(runs)), true
		}
		once := func() (hub.Result, bool) {
			t.Helper()
			r, replayed, err := h.OnceAs(share.Unknown, "s", "k", [32]byte{}, publish)
			if err != nil {
				t.Fatal(err)
			}
			return r, replayed
		}
		once()
		time.Sleep(time.Minute - time.Second)
		if r, replayed := once(); !replayed || string(r) != "1" || runs != 1 {
			t.Fatalf("within the window: replayed %v, result %s, %d runs; want the first result", replayed, r, runs)
		}
		time.Sleep(time.Second)
		if _, replayed := once(); replayed || runs != 2 {
			t.Fatalf("after the window: replayed %v, %d runs; want a second publish", replayed, runs)
		}
	})
}
