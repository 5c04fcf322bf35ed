package share_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/localbus/localbus/bus/share"
)

var errFull = errors.New("test: full")

func newPool(limit int64, f float64) *share.Pool {
	return share.NewPool(share.Options{Name: "things", Limit: limit, Share: f, Err: errFull})
}

// fill takes one unit at a time from a until it is refused, and returns
// how many it took and the refusal.
func fill(t *testing.T, a *share.Account) (int64, *share.Refusal) {
	t.Helper()
	for n := int64(0); n < 1<<20; n++ {
		if err := a.Acquire(1); err != nil {
			var r *share.Refusal
			if !errors.As(err, &r) {
				t.Fatalf("Acquire error %v is no *Refusal", err)
			}
			return n, r
		}
	}
	t.Fatal("never refused")
	return 0, nil
}

func TestShareOfThePool(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		limit int64
		share float64
		want  int64 // what one peer gets
	}{
		{"default share", 64, 0.25, 16},
		{"rounded down", 10, 0.25, 2},
		{"at least one unit", 3, 0.25, 1},
		{"share 1 is off", 64, 1, 64},
		{"share 0 is off", 64, 0, 64},
		{"above 1 is off", 64, 2, 64},
		{"empty pool", 0, 0.25, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newPool(tt.limit, tt.share)
			if got := p.PeerLimit(); got != tt.want {
				t.Errorf("PeerLimit() = %d, want %d", got, tt.want)
			}
			n, r := fill(t, p.Account(share.UID(1000)))
			if n != tt.want {
				t.Errorf("a peer took %d, want %d", n, tt.want)
			}
			wantKind := share.ByShare
			if tt.want == tt.limit {
				wantKind = share.ByPool // no share below the pool's limit
			}
			if r.Kind != wantKind || r.Pool != "things" || r.Peer != share.UID(1000) || !errors.Is(r, errFull) {
				t.Errorf("refusal = %+v (%v), want kind %v of pool things for uid:1000, unwrapping to errFull", r, r, wantKind)
			}
		})
	}
}

func TestOnePeerNeverRefusesAnother(t *testing.T) {
	t.Parallel()
	p := newPool(64, 0.25)
	hog := p.Account(share.UID(65534))
	if n, r := fill(t, hog); n != 16 || r.Kind != share.ByShare || r.Held != 16 || r.Limit != 16 {
		t.Fatalf("the hog took %d, refusal %+v; want 16 then its share", n, r)
	}
	// The same peer looked up again is the same account.
	if err := p.Account(share.UID(65534)).Acquire(1); err == nil {
		t.Fatal("a second look-up of the hog's account let it draw past its share")
	}
	for _, other := range []share.Peer{share.UID(1000), share.Key("ci"), share.Unknown} {
		if err := p.Account(other).Acquire(16); err != nil {
			t.Errorf("%v: %v, want its share beside the hog", other, err)
		}
	}
	// Four peers hold the pool: a fifth is refused by the pool, not by
	// its share.
	err := p.Account(share.UID(2000)).Acquire(1)
	var r *share.Refusal
	if !errors.As(err, &r) || r.Kind != share.ByPool || r.Held != 0 {
		t.Fatalf("a fifth peer: %v, want refused by the pool with nothing held", err)
	}
	if p.Held() != 64 {
		t.Errorf("Held() = %d, want 64", p.Held())
	}
}

func TestPrivilegedIsNeverRefusedBecauseOfOthers(t *testing.T) {
	t.Parallel()
	p := newPool(64, 0.25)
	for uid := uint32(1); uid <= 4; uid++ {
		if err := p.Account(share.UID(uid)).Acquire(16); err != nil {
			t.Fatal(err)
		}
	}
	priv := p.Account(share.Privileged)
	if n, r := fill(t, priv); n != 64 || r.Kind != share.ByPool || !errors.Is(r, errFull) {
		t.Fatalf("privileged took %d beside a full pool, refusal %+v; want the whole pool, 64", n, r)
	}
	if priv.Limit() != 64 || p.Held() != 128 {
		t.Errorf("privileged Limit() = %d, pool Held() = %d; want 64 and 128", priv.Limit(), p.Held())
	}
	// What the privileged account holds counts against the others.
	priv.Release(64)
	p.Account(share.UID(1)).Release(16)
	if err := priv.Acquire(50); err != nil {
		t.Fatal(err)
	}
	if err := p.Account(share.UID(1)).Acquire(1); err == nil {
		t.Error("a peer drew on a pool that the privileged account and three peers fill")
	}
}

func TestReleaseAndForce(t *testing.T) {
	t.Parallel()
	p := newPool(8, 0.25)
	a := p.Account(share.UID(7))
	a.Force(5) // restored: past the share of 2
	if a.Held() != 5 || p.Held() != 5 {
		t.Fatalf("after Force(5): account %d, pool %d", a.Held(), p.Held())
	}
	if err := a.Acquire(1); err == nil {
		t.Fatal("a peer past its share by a restore could draw more")
	}
	a.Release(4)
	if err := a.Acquire(1); err != nil {
		t.Fatalf("back within its share: %v", err)
	}
	if a.Held() != 2 || p.Held() != 2 {
		t.Errorf("account %d, pool %d; want 2 and 2", a.Held(), p.Held())
	}
}

func TestSetLimit(t *testing.T) {
	t.Parallel()
	p := newPool(64, 0.25)
	a := p.Account(share.Key("ci"))
	if err := a.Acquire(16); err != nil {
		t.Fatal(err)
	}
	p.SetLimit(32, 0.25) // share 8: holds 16, keeps them
	if a.Held() != 16 {
		t.Fatalf("a lowered limit took units back: held %d", a.Held())
	}
	if err := a.Acquire(1); err == nil {
		t.Fatal("drew past a lowered share")
	}
	a.Release(10)
	if err := a.Acquire(2); err != nil {
		t.Fatalf("within the lowered share: %v", err)
	}
	p.SetLimit(32, 1) // shares off
	if n, _ := fill(t, a); n != 24 {
		t.Errorf("with shares off the peer took %d more, want the rest of the pool, 24", n)
	}
	if p.Limit() != 32 || p.PeerLimit() != 32 || p.Name() != "things" {
		t.Errorf("Limit %d, PeerLimit %d, Name %q", p.Limit(), p.PeerLimit(), p.Name())
	}
}

func TestRefusalWithoutErrUnwrapsToErrRefused(t *testing.T) {
	t.Parallel()
	p := share.NewPool(share.Options{Name: "x", Limit: 1})
	if err := p.Account(share.Unknown).Acquire(2); !errors.Is(err, share.ErrRefused) {
		t.Fatalf("Acquire(2) of 1 = %v, want ErrRefused", err)
	}
}

// TestConcurrentDrawsKeepTheLimits races peers drawing and releasing and
// checks, every step, that no account passes its limit, and at the end that
// everything was given back.
func TestConcurrentDrawsKeepTheLimits(t *testing.T) {
	t.Parallel()
	const limit = 40
	p := newPool(limit, 0.25)
	peers := []share.Peer{share.UID(1), share.UID(2), share.Key("a"), share.Unknown, share.UID(3), share.Privileged}
	var wg sync.WaitGroup
	errs := make(chan error, len(peers))
	for _, peer := range peers {
		wg.Go(func() {
			a := p.Account(peer)
			held := int64(0)
			for i := range 2000 {
				if i%3 != 2 {
					if a.Acquire(1) == nil {
						held++
					}
				} else if held > 0 {
					a.Release(1)
					held--
				}
				if h := a.Held(); h > a.Limit() {
					errs <- errors.New(peer.String() + " passed its limit")
					return
				}
			}
			a.Release(held)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if p.Held() != 0 {
		t.Errorf("Held() = %d after every peer released, want 0", p.Held())
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	p := newPool(1<<40, 0.25)
	b.Run("one peer", func(b *testing.B) {
		a := p.Account(share.UID(1))
		for b.Loop() {
			a.Acquire(1)
			a.Release(1)
		}
	})
	b.Run("look-up and draw", func(b *testing.B) {
		for b.Loop() {
			a := p.Account(share.UID(2))
			a.Acquire(1)
			a.Release(1)
		}
	})
	b.Run("parallel peers", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			a := p.Account(share.Key("k"))
			for pb.Next() {
				a.Acquire(1)
				a.Release(1)
			}
		})
	})
}
