package hub

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/share"
)

// Errors a Hub returns; the router maps them to HTTP statuses.
var (
	ErrNotFound     = errors.New("hub: no such session")
	ErrExists       = errors.New("hub: session exists")
	ErrSessionLimit = errors.New("hub: session limit reached")
	// ErrAutoSessionLimit refuses a publish that would create a session
	// past MaxAutoSessions, or past its peer's share of them (a
	// *share.Refusal of the pool "auto_sessions" that unwraps to it); it
	// wraps ErrSessionLimit.
	ErrAutoSessionLimit = fmt.Errorf("%w for sessions created by a publish", ErrSessionLimit)
	ErrClosed           = errors.New("hub: closed")
	// ErrReadOnly is returned by Publish to a session that mirrors another
	// node's session (SPEC §12): only PublishMirror writes to it.
	ErrReadOnly = errors.New("hub: session is a read-only mirror")
	// ErrRetry is returned by a publish whose session was deleted under it
	// again and again (auto-create made it anew each time): nothing was
	// published, and the router answers 503 with Retry-After.
	ErrRetry = errors.New("hub: the session was deleted while publishing; nothing was published, try again")
)

// Default limits of the SPEC (§2, §10).
const (
	DefaultMaxSessions     = 4096
	DefaultMaxAutoSessions = 1024
	// DefaultMaxRingBytesTotal bounds the rings of every bus together.
	DefaultMaxRingBytesTotal = 1 << 30
)

// Options configure a Hub. Zero values mean the defaults.
type Options struct {
	// Limits apply to every bus; a session created with its own ring size
	// keeps that size.
	Limits bus.Limits
	// MaxSessions bounds the number of sessions; default 4096.
	MaxSessions int
	// MaxAutoSessions bounds the sessions created by a publish (which
	// also count against MaxSessions); default 1024, and never more than
	// half of MaxSessions whatever is set (see AutoSessionLimit), so
	// that publishers always leave room for Create.
	MaxAutoSessions int
	// PeerShare is the fraction of each shared pool one peer other than a
	// privileged one may hold (SPEC §2, fair shares; see package share):
	// the sessions a publish creates, the remembered idempotency keys,
	// and each bus's subscribers (it overrides Limits.PeerShare). Default
	// 0, no shares; the daemon sets peer_share.
	PeerShare float64
	// AutoCreate makes a publish to a missing session create it.
	AutoCreate bool
	// MaxConsumers bounds each session's consumers (SPEC §2.4), shared
	// by peer with PeerShare; default 64.
	MaxConsumers int
	// ConsumerTTL is how long a consumer may go without a stream before
	// ExpireConsumers forgets it (SPEC §2.4); 0 keeps them.
	ConsumerTTL time.Duration
	// MaxRingBytesTotal bounds the bytes the rings of every bus (sessions
	// and global) retain together; default 1 GiB. Past it the largest rings
	// evict their oldest events first (see Hub.TrimRings).
	MaxRingBytesTotal int64
	// GlobalEpoch is the global bus's epoch; "" means a fresh one. A
	// Journal's epoch wins.
	GlobalEpoch string
	// Journal, if set, backs every bus with durable storage (package
	// journal): New restores the sessions it holds, Create stores new ones,
	// Delete deletes their data. nil keeps everything in memory.
	Journal Journal
	// IdempotencyWindow is how long PublishOnce remembers a key; default
	// 10 min.
	IdempotencyWindow time.Duration
	// IdempotencyMaxBytes bounds the keys PublishOnce remembers, in
	// bytes (KeyCost each), a pool with fair shares; default
	// DefaultIdempotencyMaxBytes.
	IdempotencyMaxBytes int64
	// Logger receives what the hub reports on its own: each session
	// created (by a request or by a publish) and deleted, a key it could
	// not store, a session expired; nil means slog.Default().
	Logger *slog.Logger
	// AutoSessionTTL is how long a session a publish created may go with
	// no publish and no subscriber before ExpireIdle deletes it; 0 keeps
	// them. Sessions made by Create never expire.
	AutoSessionTTL time.Duration
	// Now is the hub's clock for the idle time of sessions; nil means
	// time.Now.
	Now func() time.Time
}

// A Hub is the set of sessions and the global bus. All methods are safe for
// concurrent use.
type Hub struct {
	global *bus.Bus
	log    *slog.Logger // Options.Logger, fixed at New

	mu       sync.Mutex // guards the fields below
	closed   bool
	opts     Options
	sessions map[string]*Session
	// deleting holds a tombstone for each session being deleted, closed
	// once the journal has forgotten it: until then nothing may create the
	// id again, or the journal would hand the new session the old one's
	// store and epoch (and then delete them under it).
	deleting map[string]chan struct{}
	retired  bus.Stats // counters of deleted sessions, so totals never go down
	// order caches the sessions sorted by id for Page; nil once the set
	// changed. orderGen counts the changes, so a sort done outside the
	// lock is kept only if nothing changed meanwhile.
	order    []*Session
	orderGen uint64
	// rates is the daemon's totals' window (SampleRates).
	rates rateWindow
	// autos holds one unit per session a publish created, on the
	// account of the peer whose publish did (MaxAutoSessions, PeerShare).
	autos *share.Pool

	readOnly atomic.Pointer[func(id string) bool] // see SetReadOnly

	ringBytes  atomic.Int64 // retained by every bus's ring together
	ringBudget atomic.Int64 // Options.MaxRingBytesTotal
	trimMu     sync.Mutex   // one TrimRings at a time

	keys keyTable // idempotency keys (Once)
}

// SetReadOnly makes Publish refuse, with ErrReadOnly, every session id for
// which readOnly reports true; nil makes every session writable again. The
// upstream bridge sets it to recognise its mirrors before the daemon serves.
func (h *Hub) SetReadOnly(readOnly func(id string) bool) {
	if readOnly == nil {
		h.readOnly.Store(nil)
		return
	}
	h.readOnly.Store(&readOnly)
}

// ReadOnly reports whether Publish refuses session id as a mirror.
func (h *Hub) ReadOnly(id string) bool {
	f := h.readOnly.Load()
	return f != nil && (*f)(id)
}

// fill writes the defaults into the zero fields of o, for New,
// SetOptions and AutoSessionLimit: the one place the hub's defaults are
// written. It gives every bus the hub's PeerShare.
func (o *Options) fill() {
	if o.MaxSessions <= 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.MaxAutoSessions <= 0 {
		o.MaxAutoSessions = DefaultMaxAutoSessions
	}
	if o.MaxRingBytesTotal <= 0 {
		o.MaxRingBytesTotal = DefaultMaxRingBytesTotal
	}
	if o.MaxConsumers <= 0 {
		o.MaxConsumers = DefaultMaxConsumers
	}
	if o.IdempotencyWindow <= 0 {
		o.IdempotencyWindow = DefaultIdempotencyWindow
	}
	if o.IdempotencyMaxBytes <= 0 {
		o.IdempotencyMaxBytes = DefaultIdempotencyMaxBytes
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Limits.PeerShare = o.PeerShare
}

// New returns a hub with the sessions its Journal holds, if any. It fails
// with an *bus.InputError when a limit is out of range.
func New(opts Options) (*Hub, error) {
	opts.fill()
	if err := opts.Limits.Validate(); err != nil {
		return nil, err
	}
	h := &Hub{opts: opts, log: opts.Logger, sessions: make(map[string]*Session), deleting: make(map[string]chan struct{})}
	h.ringBudget.Store(opts.MaxRingBytesTotal)
	h.autos = share.NewPool(share.Options{Name: PoolAutoSessions, Err: ErrAutoSessionLimit})
	h.setShares(opts)
	l := h.busLimits()
	gopts := bus.Options{
		Epoch: opts.GlobalEpoch, RingSize: l.RingSize, RingMaxBytes: l.RingMaxBytes,
		MaxQueued: l.MaxQueued, MaxQueuedBytes: l.MaxQueuedBytes, MaxSubscribers: l.MaxSubscribers, PeerShare: l.PeerShare,
		OnRingBytes: h.addRingBytes,
	}
	if j := opts.Journal; j != nil {
		st, epoch, _, err := j.OpenBus("", 0)
		if err != nil {
			return nil, err
		}
		gopts.Store, gopts.Epoch = st, epoch
	}
	g, err := bus.New(gopts)
	if err != nil {
		return nil, err
	}
	h.global = g
	h.setKeyWindow(opts.IdempotencyWindow)
	if err := h.loadKeys(time.Now()); err != nil {
		return nil, err
	}
	if opts.Journal != nil {
		// Restored sessions are not announced: they were opened before.
		// No one else holds h yet; the lock is the rule createLocked states.
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, name := range opts.Journal.Sessions() {
			id, err := bus.ParseSessionID(name)
			if err != nil {
				return nil, err
			}
			if _, err := h.createLocked(id, 0, byRestore, share.Unknown); err != nil {
				return nil, err
			}
		}
	}
	return h, nil
}

// Global returns the global bus.
func (h *Hub) Global() *bus.Bus { return h.global }

// logSession logs a session's creation or deletion, if the hub has a
// logger.
func (h *Hub) logSession(msg, id string, attrs ...any) {
	if h.log != nil {
		h.log.Info(msg, append([]any{"session", id}, attrs...)...)
	}
}

// EndStreams ends every stream of every bus, global included, with
// stream:closed and reason (shutdown or reload). Buses, rings and ids stay.
func (h *Hub) EndStreams(reason bus.EndReason) {
	for _, s := range h.Sessions() {
		s.Bus.EndStreams(reason)
	}
	h.global.EndStreams(reason)
}

// Close closes every bus; Publish, Create and Subscribe fail from then on.
// Streams still open get stream:closed with reason session_deleted, so the
// daemon calls EndStreams with the real reason first.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	sessions := h.sessions
	h.sessions = map[string]*Session{}
	h.order, h.orderGen = nil, h.orderGen+1
	h.mu.Unlock()
	for _, s := range sessions {
		s.Bus.Close()
	}
	h.global.Close()
}

// logKeyError reports a failure to store or forget an idempotency key.
func (h *Hub) logKeyError(err error) {
	h.opts.Logger.Error("hub: idempotency key", "err", err)
}
