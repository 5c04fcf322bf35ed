package share

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
)

// Options configure a Pool.
type Options struct {
	// Name names the pool in refusals, logs and metrics, e.g.
	// "subscribers".
	Name string
	// Limit is the most units the pool holds for peers other than
	// privileged ones, and the most the privileged account holds. 0 or
	// less refuses every draw.
	Limit int64
	// Share is the fraction of Limit one peer other than a privileged one
	// may hold, at least one unit; 0 or 1 and above mean no shares (any
	// peer may take up to Limit).
	Share float64
	// Err is what a refusal unwraps to, so callers can test for it with
	// errors.Is, e.g. bus.ErrSubscriberLimit; nil means ErrRefused.
	Err error
}

// ErrRefused is what a refusal of a pool without its own Options.Err
// unwraps to.
var ErrRefused = errors.New("share: refused")

// A Pool is a limit that peers draw on with fair shares (see the package
// doc). It is safe for concurrent use.
type Pool struct {
	name string
	err  error

	limit     atomic.Int64 // Options.Limit
	peerLimit atomic.Int64 // what one peer other than a privileged one may hold
	total     atomic.Int64 // held by every account, the privileged one included

	priv Account // every privileged peer's

	mu       sync.Mutex // taken only to add an account
	accounts sync.Map   // Peer → *Account, never privileged
}

// NewPool returns an empty pool.
func NewPool(o Options) *Pool {
	p := &Pool{name: o.Name, err: o.Err}
	if p.err == nil {
		p.err = ErrRefused
	}
	p.priv = Account{pool: p, peer: Privileged}
	p.SetLimit(o.Limit, o.Share)
	return p
}

// SetLimit changes the pool's limit and share (on reload). Units held stay
// held; past a lowered limit, draws are refused until enough are released.
func (p *Pool) SetLimit(limit int64, share float64) {
	p.limit.Store(limit)
	p.peerLimit.Store(shareOf(limit, share))
}

// shareOf returns what one peer may hold of limit under share f.
func shareOf(limit int64, f float64) int64 {
	if limit <= 0 {
		return 0
	}
	if !(f > 0 && f < 1) { // NaN too
		return limit
	}
	return max(int64(math.Floor(float64(limit)*f)), 1)
}

// Name returns the pool's name.
func (p *Pool) Name() string { return p.name }

// Limit returns the pool's limit.
func (p *Pool) Limit() int64 { return p.limit.Load() }

// PeerLimit returns what one peer other than a privileged one may hold.
func (p *Pool) PeerLimit() int64 { return p.peerLimit.Load() }

// Held returns what every account holds together.
func (p *Pool) Held() int64 { return p.total.Load() }

// Account returns peer's account. Every privileged peer gets the same one.
// Look it up once per request and draw on it from then on.
func (p *Pool) Account(peer Peer) *Account {
	if peer.IsPrivileged() {
		return &p.priv
	}
	if a, ok := p.accounts.Load(peer); ok {
		return a.(*Account)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	a, _ := p.accounts.LoadOrStore(peer, &Account{pool: p, peer: peer})
	return a.(*Account)
}

// An Account is what one peer holds of a pool. It is safe for concurrent
// use.
type Account struct {
	pool *Pool
	peer Peer
	held atomic.Int64
}

// Peer returns whose account it is.
func (a *Account) Peer() Peer { return a.peer }

// Held returns what the account holds.
func (a *Account) Held() int64 { return a.held.Load() }

// Limit returns the most the account may hold: the pool's limit for the
// privileged account, the peer's share for any other. Others may be
// refused sooner, when the pool as a whole is full.
func (a *Account) Limit() int64 {
	if a.peer.IsPrivileged() {
		return a.pool.Limit()
	}
	return a.pool.PeerLimit()
}

// Acquire takes n units (n > 0), or takes nothing and returns a
// *Refusal: the privileged account is refused only past the pool's limit
// for what it holds itself; another is refused past its share, or when the
// pool as a whole would pass its limit.
func (a *Account) Acquire(n int64) error {
	p := a.pool
	if a.peer.IsPrivileged() {
		limit := p.limit.Load()
		if held := a.held.Add(n); held > limit {
			a.held.Add(-n)
			return p.refusal(a, held-n, ByPool, limit)
		}
		p.total.Add(n)
		return nil
	}
	peerLimit := p.peerLimit.Load()
	if held := a.held.Add(n); held > peerLimit {
		a.held.Add(-n)
		if limit := p.limit.Load(); peerLimit >= limit {
			return p.refusal(a, held-n, ByPool, limit) // no shares: the pool's limit
		}
		return p.refusal(a, held-n, ByShare, peerLimit)
	}
	if limit := p.limit.Load(); p.total.Add(n) > limit {
		p.total.Add(-n)
		held := a.held.Add(-n)
		return p.refusal(a, held, ByPool, limit)
	}
	return nil
}

// Force takes n units whatever the limits say: for what a restart restores,
// which was granted before it.
func (a *Account) Force(n int64) {
	a.held.Add(n)
	a.pool.total.Add(n)
}

// Release gives back n units taken with Acquire or Force.
func (a *Account) Release(n int64) {
	a.held.Add(-n)
	a.pool.total.Add(-n)
}

func (p *Pool) refusal(a *Account, held int64, k Kind, limit int64) *Refusal {
	return &Refusal{Pool: p.name, Peer: a.peer, Kind: k, Held: held, Limit: limit, err: p.err}
}

// Kind is which limit refused a draw.
type Kind uint8

const (
	// ByShare: the peer already holds its share.
	ByShare Kind = iota + 1
	// ByPool: the pool is full (for the privileged account: what it holds
	// itself reached the pool's limit).
	ByPool
)

// String returns "peer" for ByShare and "pool" for ByPool: the share label
// of localbus_share_refusals_total.
func (k Kind) String() string {
	switch k {
	case ByShare:
		return "peer"
	case ByPool:
		return "pool"
	}
	return "none"
}

// A Refusal is a draw a pool refused. It unwraps to the pool's
// Options.Err.
type Refusal struct {
	// Pool is the pool's name.
	Pool string
	// Peer is who was refused.
	Peer Peer
	// Kind is which limit refused it.
	Kind Kind
	// Held is what the peer's account held; Limit is the limit that
	// refused it (the peer's share, or the pool's limit).
	Held, Limit int64

	err error
}

func (r *Refusal) Error() string {
	if r.Kind == ByShare {
		return fmt.Sprintf("share: %s: %s holds its share (%d of %d)", r.Pool, r.Peer, r.Held, r.Limit)
	}
	return fmt.Sprintf("share: %s: the pool is full (%d)", r.Pool, r.Limit)
}

// Unwrap returns the pool's Options.Err.
func (r *Refusal) Unwrap() error { return r.err }
