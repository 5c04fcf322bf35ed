package access

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 8, 22, 10, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

const ticketPath = "/api/v1/sessions/s1/events"

func issue(t *testing.T, s *TicketStore, g Grant) (string, time.Time) {
	t.Helper()
	tk, exp, err := s.Issue(g)
	if err != nil {
		t.Fatalf("Issue: %v", err)
	}
	return tk, exp
}

func TestTicketIsAcceptedOnceWithItsGrant(t *testing.T) {
	clock := newFakeClock()
	s := NewTicketStore(TicketOptions{Now: clock.Now})
	want := Grant{Path: ticketPath, Scopes: NewScopes(Read), KeyName: "web"}
	tk, exp := issue(t, s, want)
	if !strings.HasPrefix(tk, TicketPrefix) || !WellFormedTicket(tk) {
		t.Fatalf("ticket %q is not lbt_ and 43 base64url characters", tk)
	}
	if !exp.Equal(clock.Now().Add(DefaultTicketTTL)) {
		t.Errorf("expires %v, want now + %v", exp, DefaultTicketTTL)
	}
	g, err := s.Redeem(tk, ticketPath)
	if err != nil {
		t.Fatalf("first Redeem: %v", err)
	}
	if g.Path != want.Path || g.KeyName != want.KeyName || !g.Scopes.Equal(want.Scopes) {
		t.Errorf("grant = %+v, want %+v", g, want)
	}
	if _, err := s.Redeem(tk, ticketPath); !errors.Is(err, ErrTicketInvalid) {
		t.Errorf("second Redeem = %v, want ErrTicketInvalid", err)
	}
	if n := s.Outstanding(); n != 0 {
		t.Errorf("Outstanding = %d after use, want 0", n)
	}
}

func TestTicketExpiresAfterItsTTL(t *testing.T) {
	clock := newFakeClock()
	s := NewTicketStore(TicketOptions{Now: clock.Now})
	g := Grant{Path: ticketPath, Scopes: NewScopes(Read)}
	early, _ := issue(t, s, g)
	late, _ := issue(t, s, g)
	clock.Advance(DefaultTicketTTL - time.Millisecond)
	if _, err := s.Redeem(early, ticketPath); err != nil {
		t.Errorf("Redeem just before expiry: %v", err)
	}
	clock.Advance(time.Millisecond)
	if _, err := s.Redeem(late, ticketPath); !errors.Is(err, ErrTicketInvalid) {
		t.Errorf("Redeem at expiry = %v, want ErrTicketInvalid", err)
	}
}

func TestTicketIsBoundToItsPathAndUsedUpByAWrongOne(t *testing.T) {
	s := NewTicketStore(TicketOptions{})
	tk, _ := issue(t, s, Grant{Path: ticketPath, Scopes: NewScopes(Read)})
	for _, p := range []string{"/api/v1/sessions/s2/events", "/api/v1/sessions/s1/ws", ticketPath + "/", ""} {
		if _, err := s.Redeem(tk, p); !errors.Is(err, ErrTicketInvalid) {
			t.Errorf("Redeem for %q = %v, want ErrTicketInvalid", p, err)
		}
	}
	if _, err := s.Redeem(tk, ticketPath); !errors.Is(err, ErrTicketInvalid) {
		t.Errorf("Redeem for its path after a wrong one = %v, want ErrTicketInvalid (shown once, used up)", err)
	}
}

func TestUnknownAndMalformedTicketsAreRefused(t *testing.T) {
	s := NewTicketStore(TicketOptions{})
	tk, _ := issue(t, s, Grant{Path: ticketPath})
	for _, bad := range []string{"", "lbt_", tk[:len(tk)-1], tk + "A", "lb_" + tk[4:], strings.ToUpper(tk), tk[:10] + "!" + tk[11:]} {
		if _, err := s.Redeem(bad, ticketPath); !errors.Is(err, ErrTicketInvalid) {
			t.Errorf("Redeem(%q) = %v, want ErrTicketInvalid", bad, err)
		}
	}
	if _, err := s.Redeem(tk, ticketPath); err != nil {
		t.Errorf("the real ticket after the bad ones: %v", err)
	}
}

func TestOutstandingTicketsAreCappedAndExpiredOnesPruned(t *testing.T) {
	clock := newFakeClock()
	s := NewTicketStore(TicketOptions{Max: 3, Now: clock.Now})
	g := Grant{Path: ticketPath}
	var tks []string
	for range 3 {
		tk, _ := issue(t, s, g)
		tks = append(tks, tk)
	}
	if _, _, err := s.Issue(g); !errors.Is(err, ErrTicketLimit) {
		t.Fatalf("fourth Issue = %v, want ErrTicketLimit", err)
	}
	if _, err := s.Redeem(tks[0], ticketPath); err != nil {
		t.Fatal(err)
	}
	issue(t, s, g) // a used ticket frees its place
	if _, _, err := s.Issue(g); !errors.Is(err, ErrTicketLimit) {
		t.Fatalf("Issue at the cap again = %v, want ErrTicketLimit", err)
	}
	clock.Advance(DefaultTicketTTL)
	if n := s.Outstanding(); n != 0 {
		t.Errorf("Outstanding after the TTL = %d, want 0 (expired ones pruned)", n)
	}
	for range 3 {
		issue(t, s, g)
	}
}

func TestTicketBookkeepingStaysBoundedUnderChurn(t *testing.T) {
	s := NewTicketStore(TicketOptions{Max: 10})
	for range 1000 {
		tk, _ := issue(t, s, Grant{Path: ticketPath})
		if _, err := s.Redeem(tk, ticketPath); err != nil {
			t.Fatal(err)
		}
	}
	s.mu.Lock()
	n, m := len(s.order), len(s.tickets)
	s.mu.Unlock()
	if n > 2*10+1 || m != 0 {
		t.Errorf("after 1000 tickets issued and used: order holds %d, map %d; want at most 21 and 0", n, m)
	}
}

func TestClearVoidsEveryTicket(t *testing.T) {
	s := NewTicketStore(TicketOptions{})
	tk, _ := issue(t, s, Grant{Path: ticketPath})
	s.Clear()
	if _, err := s.Redeem(tk, ticketPath); !errors.Is(err, ErrTicketInvalid) {
		t.Errorf("Redeem after Clear = %v, want ErrTicketInvalid", err)
	}
}

func TestTicketsAreDistinct(t *testing.T) {
	s := NewTicketStore(TicketOptions{})
	seen := map[string]bool{}
	for range 100 {
		tk, _ := issue(t, s, Grant{Path: ticketPath})
		if seen[tk] {
			t.Fatalf("ticket %q issued twice", tk)
		}
		seen[tk] = true
	}
}

func TestSplitTicketTakesOutExactlyOneTicketParameter(t *testing.T) {
	const tk = "lbt_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	tests := []struct {
		query, ticket, rest string
		ok                  bool
	}{
		{"ticket=" + tk, tk, "", true},
		{"since=4&ticket=" + tk + "&types=a:b", tk, "since=4&types=a:b", true},
		{"ticket=" + tk + "&ticket=" + tk, tk, "ticket=" + tk, true},
		{"Ticket=" + tk, "", "Ticket=" + tk, false},
		{"tick%65t=" + tk, "", "tick%65t=" + tk, false},
		{"ticket=" + tk + ";key=x", "", "ticket=" + tk + ";key=x", false},
		{"ticket=", "", "ticket=", false},
		{"since=1", "", "since=1", false},
	}
	for _, tt := range tests {
		ticket, rest, ok := SplitTicket(tt.query)
		if ticket != tt.ticket || rest != tt.rest || ok != tt.ok {
			t.Errorf("SplitTicket(%q) = %q, %q, %v; want %q, %q, %v", tt.query, ticket, rest, ok, tt.ticket, tt.rest, tt.ok)
		}
	}
}

func TestQueryCredentialRefusesATicketLeftInTheQuery(t *testing.T) {
	for _, q := range []string{"ticket=x", "since=1&Ticket=x", "tick%65t=x", "x_ticket=1"} {
		if name, found := QueryCredential(q); !found {
			t.Errorf("QueryCredential(%q) found nothing, want the ticket refused (name %q)", q, name)
		}
	}
}
