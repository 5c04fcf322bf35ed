package share_test

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/localbus/localbus/bus/share"
)

// TestPoolMatchesModel checks a pool against a plain model of the rule,
// one operation at a time: every Acquire is granted exactly when the model
// says so, and refused by the limit the model names.
func TestPoolMatchesModel(t *testing.T) {
	t.Parallel()
	peers := []share.Peer{share.Privileged, share.Unknown, share.UID(1), share.UID(2), share.Key("k")}
	rapid.Check(t, func(t *rapid.T) {
		limit := rapid.Int64Range(0, 20).Draw(t, "limit")
		f := rapid.SampledFrom([]float64{0, 0.1, 0.25, 0.5, 1}).Draw(t, "share")
		p := share.NewPool(share.Options{Name: "m", Limit: limit, Share: f})
		held := map[share.Peer]int64{}
		total := int64(0)
		for range rapid.IntRange(1, 60).Draw(t, "ops") {
			peer := rapid.SampledFrom(peers).Draw(t, "peer")
			a := p.Account(peer)
			n := rapid.Int64Range(1, 4).Draw(t, "n")
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0, 1:
				peerLimit := limit
				if f > 0 && f < 1 && limit > 0 {
					peerLimit = max(int64(float64(limit)*f), 1)
				}
				var want share.Kind // 0: granted
				switch {
				case peer.IsPrivileged() && held[peer]+n > limit:
					want = share.ByPool
				case peer.IsPrivileged():
				case held[peer]+n > peerLimit && peerLimit < limit:
					want = share.ByShare
				case held[peer]+n > peerLimit, total+n > limit:
					want = share.ByPool
				}
				err := a.Acquire(n)
				var got share.Kind
				if r, ok := err.(*share.Refusal); ok {
					got = r.Kind
				} else if err != nil {
					t.Fatalf("Acquire: %v", err)
				}
				if got != want {
					t.Fatalf("%v Acquire(%d) holding %d of pool %d/%d (share %v, total %d): %v, want %v",
						peer, n, held[peer], limit, peerLimit, f, total, got, want)
				}
				if want == 0 {
					held[peer] += n
					total += n
				}
			case 2:
				n = min(n, held[peer])
				a.Release(n)
				held[peer] -= n
				total -= n
			case 3:
				limit = rapid.Int64Range(0, 20).Draw(t, "new limit")
				p.SetLimit(limit, f)
			}
			if a.Held() != held[peer] || p.Held() != total {
				t.Fatalf("%v holds %d, pool %d; model %d, %d", peer, a.Held(), p.Held(), held[peer], total)
			}
		}
	})
}
