package bus_test

import (
	"context"
	"errors"
	"testing"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/share"
)

// TestSubscribersAreSharedByPeer fills a bus's subscribers as one peer and
// checks that another peer and a privileged reader are still served, that
// every way a subscriber leaves gives its place back, and that a reload
// changes the share.
func TestSubscribersAreSharedByPeer(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s"), MaxSubscribers: 8, PeerShare: 0.25})
	hog := share.UID(65534)
	sub := func(p share.Peer) (*bus.Subscription, error) {
		return b.Subscribe(context.Background(), bus.SubscribeOptions{Peer: p})
	}
	var mine []*bus.Subscription
	for range 2 {
		s, err := sub(hog)
		if err != nil {
			t.Fatalf("subscriber within the share of 2: %v", err)
		}
		mine = append(mine, s)
	}
	_, err := sub(hog)
	var r *share.Refusal
	if !errors.As(err, &r) || !errors.Is(err, bus.ErrSubscriberLimit) || r.Kind != share.ByShare || r.Pool != bus.PoolSubscribers || r.Limit != 2 {
		t.Fatalf("third subscriber of one peer = %v, want its share (2) of subscribers refused, unwrapping to ErrSubscriberLimit", err)
	}
	if bus.IsInputError(err) {
		t.Error("a share refusal is an *InputError: the router would answer 400")
	}
	for _, p := range []share.Peer{share.UID(65533), share.Key("ci"), share.Unknown} {
		for range 2 {
			if _, err := sub(p); err != nil {
				t.Fatalf("%v beside a peer at its share: %v", p, err)
			}
		}
	}
	// 8 of 8: the next other peer is refused by the bus, a privileged
	// reader never.
	if _, err := sub(share.UID(1)); !errors.As(err, &r) || r.Kind != share.ByPool {
		t.Fatalf("a fifth peer on a full bus = %v, want refused by the pool", err)
	}
	for range 8 {
		if _, err := sub(share.Privileged); err != nil {
			t.Fatalf("privileged on a bus other peers fill: %v", err)
		}
	}
	// Close gives the place back.
	mine[0].Close()
	if _, err := sub(hog); !errors.Is(err, bus.ErrSubscriberLimit) {
		// the bus is full of others (privileged included): still refused…
		t.Fatalf("after Close on a full bus: %v", err)
	}
	b.EndStreams(bus.EndReload) // frees every place
	if _, err := b.Subscribe(context.Background(), bus.SubscribeOptions{Peer: hog}); err != nil {
		t.Fatalf("after EndStreams: %v", err)
	}
	// A reload to shares off: one peer may take the bus.
	if err := b.SetLimits(bus.Limits{MaxSubscribers: 8, PeerShare: 1}); err != nil {
		t.Fatal(err)
	}
	for i := range 7 {
		if _, err := sub(hog); err != nil {
			t.Fatalf("subscriber %d with shares off: %v", i+2, err)
		}
	}
	if _, err := sub(hog); !errors.As(err, &r) || r.Kind != share.ByPool {
		t.Fatalf("ninth subscriber with shares off = %v, want the bus's limit", err)
	}
}

// TestEvictedSubscriberGivesItsShareBack checks that a subscriber evicted
// as a slow reader frees its peer's place.
func TestEvictedSubscriberGivesItsShareBack(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s"), MaxSubscribers: 4, PeerShare: 0.25})
	p := share.UID(7)
	s, err := b.Subscribe(context.Background(), bus.SubscribeOptions{Peer: p, MaxQueued: 16})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Subscribe(context.Background(), bus.SubscribeOptions{Peer: p}); !errors.Is(err, bus.ErrSubscriberLimit) {
		t.Fatalf("second subscriber of a share of 1 = %v", err)
	}
	for range 17 { // one past maxQueued: evicted
		if _, _, err := b.Publish(bus.Event{Type: bustest.Type("a:b"), Data: []byte(`1`)}); err != nil {
			t.Fatal(err)
		}
	}
	if s.End() != bus.EndLagged {
		t.Fatalf("End() = %q, want lagged", s.End())
	}
	if _, err := b.Subscribe(context.Background(), bus.SubscribeOptions{Peer: p}); err != nil {
		t.Fatalf("after its eviction the peer's place is still taken: %v", err)
	}
}

func TestPeerShareOutOfRangeIsAnInputError(t *testing.T) {
	t.Parallel()
	for _, f := range []float64{-0.1, 1.5} {
		if _, err := bus.New(bus.Options{PeerShare: f}); !bus.IsInputError(err) {
			t.Errorf("New with PeerShare %v = %v, want an *InputError", f, err)
		}
	}
}
