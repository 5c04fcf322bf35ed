package access

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/localbus/localbus/bus/share"
	"github.com/localbus/localbus/ipc/wire"
)

// TicketPrefix starts every ticket a [TicketStore] issues, so people and
// secret scanners can tell a ticket from a key ([KeyPrefix]).
const TicketPrefix = "lbt_"

// TicketBytes is the number of random bytes in a ticket.
const TicketBytes = 32

// TicketParam is the only query parameter that ever carries a credential:
// a ticket, on a GET stream route (SPEC §7).
const TicketParam = wire.ParamTicket

// Defaults of [TicketOptions].
const (
	// DefaultTicketTTL is how long a ticket may wait for its one use.
	DefaultTicketTTL = 30 * time.Second
	// DefaultMaxTickets is how many tickets may be outstanding at once.
	DefaultMaxTickets = 10000
)

// Errors of [TicketStore]. None of them carries any part of a ticket.
var (
	// ErrTicketLimit: as many tickets are outstanding as the store holds.
	ErrTicketLimit = errors.New("access: too many outstanding tickets")
	// ErrTicketInvalid: the ticket is malformed, unknown, used already,
	// expired, or names another path.
	ErrTicketInvalid = errors.New("access: unknown, used, expired or wrong-path ticket")
)

// A Grant is what a ticket stands for: the one path it opens and the
// scopes it carries, at most those of the caller it was issued to.
type Grant struct {
	// Path is the request path (decoded, as in url.URL.Path) the ticket
	// is for.
	Path string
	// Scopes are what the ticket's holder may do on Path.
	Scopes Scopes
	// KeyName names the key the ticket was issued to, "" for none (a Unix
	// socket peer). It is for log lines.
	KeyName string
	// Peer is who the ticket was issued to, for fair shares: the ticket
	// counts on its share of outstanding tickets until it is used or
	// expires, and its holder draws on the daemon's pools as that peer.
	Peer share.Peer
}

// TicketOptions configure a [TicketStore]. Zero values mean the defaults.
type TicketOptions struct {
	// TTL is how long a ticket is valid; default DefaultTicketTTL.
	TTL time.Duration
	// Max is the most tickets outstanding at once (issued, neither used
	// nor expired); default DefaultMaxTickets. It is a pool with fair
	// shares: see Share.
	Max int
	// Share is the fraction of Max one peer other than a privileged one
	// (Grant.Peer) may hold, at least one ticket (SPEC §2, fair shares);
	// default 0, no shares. SetShare changes it.
	Share float64
	// Now is the clock; default time.Now. Tests pass a fake one.
	Now func() time.Time
}

// A TicketStore issues and redeems single-use tickets: the way a browser's
// EventSource, which cannot send an Authorization header, authenticates a
// stream (SPEC §7). A ticket is [TicketPrefix] and [TicketBytes] random
// bytes in unpadded base64url; the store keeps only its SHA-256 digest. A
// ticket is accepted once, for the path it was issued for, within the TTL;
// presenting it in any way, even for the wrong path, uses it up.
//
// The store is bounded: at most Max tickets are outstanding, expired ones
// are pruned as tickets are issued and redeemed, and its bookkeeping never
// exceeds a small multiple of Max. A TicketStore is safe for concurrent
// use.
type TicketStore struct {
	ttl time.Duration
	max int
	now func() time.Time

	// pool holds one unit per outstanding ticket, on its peer's account;
	// changed under mu with tickets.
	pool *share.Pool

	mu      sync.Mutex
	tickets map[[sha256.Size]byte]ticket // guarded by mu: outstanding
	// order holds digests in the order issued (so by expiry, the TTL
	// being fixed), for pruning; it may hold digests already redeemed.
	order []issued // guarded by mu
}

type ticket struct {
	grant   Grant
	expires time.Time
	acct    *share.Account // its unit of pool
}

type issued struct {
	digest  [sha256.Size]byte
	expires time.Time
}

// NewTicketStore returns an empty store.
func NewTicketStore(opts TicketOptions) *TicketStore {
	if opts.TTL <= 0 {
		opts.TTL = DefaultTicketTTL
	}
	if opts.Max <= 0 {
		opts.Max = DefaultMaxTickets
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	pool := share.NewPool(share.Options{Name: PoolTickets, Limit: int64(opts.Max), Share: opts.Share, Err: ErrTicketLimit})
	return &TicketStore{ttl: opts.TTL, max: opts.Max, now: opts.Now, pool: pool, tickets: map[[sha256.Size]byte]ticket{}}
}

// PoolTickets names the pool of outstanding tickets, in refusals and
// metrics.
const PoolTickets = "tickets"

// SetShare changes the store's fair share (on reload).
func (s *TicketStore) SetShare(f float64) { s.pool.SetLimit(int64(s.max), f) }

// Issue returns a new ticket for g and the time it expires. It fails with
// [ErrTicketLimit] when Max tickets are outstanding, or g.Peer holds its
// share of them: then the error is a *share.Refusal that unwraps to it.
func (s *TicketStore) Issue(g Grant) (string, time.Time, error) {
	var b [TicketBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", time.Time{}, fmt.Errorf("access: generate ticket: %w", err)
	}
	t := TicketPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	d := sha256.Sum256([]byte(t))

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.prune(now)
	acct := s.pool.Account(g.Peer)
	if err := acct.Acquire(1); err != nil {
		return "", time.Time{}, err
	}
	exp := now.Add(s.ttl)
	s.tickets[d] = ticket{grant: g, expires: exp, acct: acct}
	s.order = append(s.order, issued{digest: d, expires: exp})
	return t, exp, nil
}

// Redeem uses up the ticket t presented for path and returns its grant.
// It fails with [ErrTicketInvalid] when t is malformed, unknown, used,
// expired or issued for another path; a known ticket is used up even
// then.
func (s *TicketStore) Redeem(t, path string) (Grant, error) {
	if !WellFormedTicket(t) {
		return Grant{}, ErrTicketInvalid
	}
	d := sha256.Sum256([]byte(t))

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.prune(now)
	tk, ok := s.tickets[d]
	if !ok {
		return Grant{}, ErrTicketInvalid
	}
	s.dropLocked(d, tk)
	if !now.Before(tk.expires) || tk.grant.Path != path {
		return Grant{}, ErrTicketInvalid
	}
	return tk.grant, nil
}

// Clear voids every outstanding ticket (the daemon does it on reload: the
// keys that granted them may be gone).
func (s *TicketStore) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for d, tk := range s.tickets {
		s.dropLocked(d, tk)
	}
	s.order = nil
}

// dropLocked forgets outstanding ticket tk of digest d and gives back its
// unit. s.mu is held.
func (s *TicketStore) dropLocked(d [sha256.Size]byte, tk ticket) {
	delete(s.tickets, d)
	tk.acct.Release(1)
}

// Outstanding returns the number of tickets issued and neither used nor
// expired.
func (s *TicketStore) Outstanding() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prune(s.now())
	return len(s.tickets)
}

// prune forgets expired tickets, and compacts order when it holds many
// digests already redeemed. s.mu is held.
func (s *TicketStore) prune(now time.Time) {
	i := 0
	for i < len(s.order) && !now.Before(s.order[i].expires) {
		if tk, ok := s.tickets[s.order[i].digest]; ok {
			s.dropLocked(s.order[i].digest, tk)
		}
		i++
	}
	s.order = s.order[i:]
	if len(s.order) > 2*s.max && len(s.order) > 2*len(s.tickets) {
		kept := make([]issued, 0, len(s.tickets))
		for _, o := range s.order {
			if _, ok := s.tickets[o.digest]; ok {
				kept = append(kept, o)
			}
		}
		s.order = kept
	}
}

// WellFormedTicket reports whether t has the shape of a ticket:
// [TicketPrefix] and the base64url of [TicketBytes] bytes.
func WellFormedTicket(t string) bool {
	rest, ok := strings.CutPrefix(t, TicketPrefix)
	return ok && len(rest) == base64.RawURLEncoding.EncodedLen(TicketBytes) && allBase64URL(rest)
}

// SplitTicket finds the ticket parameter in a raw query string (the part
// after "?"): one "&"-separated piece whose name is exactly "ticket" and
// whose value is made of base64url characters only. It returns the value
// and the query without that piece, for [QueryCredential] to examine what
// is left. ok is false when there is no such piece; a second ticket
// parameter, or one spelled or encoded otherwise, stays in rest, where
// QueryCredential finds it.
func SplitTicket(rawQuery string) (ticket, rest string, ok bool) {
	pieces := strings.Split(rawQuery, "&")
	for i, p := range pieces {
		v, found := strings.CutPrefix(p, TicketParam+"=")
		if !found || v == "" || !allBase64URL(v) {
			continue
		}
		rest := strings.Join(append(pieces[:i:i], pieces[i+1:]...), "&")
		return v, rest, true
	}
	return "", rawQuery, false
}

func allBase64URL(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isBase64URL(s[i]) {
			return false
		}
	}
	return true
}
