package access

import (
	"errors"
	"testing"
	"time"

	"github.com/localbus/localbus/bus/share"
)

// TestTicketsAreSharedByPeer: one peer takes at most its share of the
// outstanding tickets, another peer and a privileged one are still issued
// theirs, and a ticket used, expired or cleared gives its place back.
func TestTicketsAreSharedByPeer(t *testing.T) {
	clock := newFakeClock()
	s := NewTicketStore(TicketOptions{Max: 8, Share: 0.25, TTL: time.Minute, Now: clock.Now})
	hog := Grant{Path: ticketPath, Peer: share.UID(65534)}
	first, _ := issue(t, s, hog)
	issue(t, s, hog)
	_, _, err := s.Issue(hog)
	var r *share.Refusal
	if !errors.Is(err, ErrTicketLimit) || !errors.As(err, &r) || r.Kind != share.ByShare || r.Pool != PoolTickets || r.Limit != 2 {
		t.Fatalf("third ticket of one peer = %v, want its share (2) refused, unwrapping to ErrTicketLimit", err)
	}
	for _, p := range []share.Peer{share.UID(65533), share.Key("ci")} {
		issue(t, s, Grant{Path: ticketPath, Peer: p})
	}
	// The privileged fill the store, whatever the others hold; what they
	// hold counts against the others.
	for range 8 {
		issue(t, s, Grant{Path: ticketPath, Peer: share.Privileged})
	}
	if _, _, err := s.Issue(Grant{Path: ticketPath, Peer: share.UID(1)}); !errors.As(err, &r) || r.Kind != share.ByPool {
		t.Fatalf("a peer on a full store = %v, want the store's limit", err)
	}
	s.Clear()
	first, _ = issue(t, s, hog)
	issue(t, s, hog)
	// A used ticket gives its place back, to its own peer.
	g, err := s.Redeem(first, ticketPath)
	if err != nil || g.Peer != hog.Peer {
		t.Fatalf("Redeem = %+v, %v; want the grant with its peer", g, err)
	}
	issue(t, s, hog)
	if _, _, err := s.Issue(hog); !errors.As(err, &r) || r.Kind != share.ByShare {
		t.Fatalf("a peer at its share again = %v", err)
	}
	// Expired tickets too.
	clock.Advance(2 * time.Minute)
	issue(t, s, hog)
	issue(t, s, hog)
	s.Clear()
	issue(t, s, hog)
	issue(t, s, hog)
	// A reload to shares off: one peer may take the store.
	s.SetShare(1)
	for range 6 {
		issue(t, s, hog)
	}
	if _, _, err := s.Issue(hog); !errors.As(err, &r) || r.Kind != share.ByPool {
		t.Fatalf("ninth ticket with shares off = %v, want the store's limit", err)
	}
}
