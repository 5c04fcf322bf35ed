package ipc

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/bus/share"
	"github.com/localbus/localbus/ipc/access"
	"github.com/localbus/localbus/ipc/wire"
	"github.com/localbus/localbus/ipc/wire/grammar"
)

// Defaults of the router's options.
const (
	DefaultMaxEventBytes = 1 << 20
	DefaultMaxBatch      = 1000
	// DefaultMaxInflightBodyBytes is Options.MaxInflightBodyBytes's default.
	DefaultMaxInflightBodyBytes = 64 << 20
	DefaultKeepalive            = 15 * time.Second
	DefaultWriteTimeout         = 30 * time.Second
	DefaultBodyTimeout          = 30 * time.Second
	// MaxControlFrame is the largest WebSocket control frame a client may send.
	MaxControlFrame = 64 << 10
)

// Options are what New reads once: the hub, the stores and registries that
// outlive a reload, what /api/v1/caps reports of the daemon's build and
// journal, and the first Settings. Zero values mean the defaults.
type Options struct {
	// Hub holds the sessions and the global bus. Required.
	Hub *hub.Hub
	// Logger receives the router's log lines; nil means slog.Default().
	Logger *slog.Logger
	// Reload is called by POST /api/v1/reload and returns the changed
	// keys that wait for a restart; nil answers 503.
	Reload func(context.Context) (restartNeeded []string, err error)
	// Version is reported by /api/v1/caps.
	Version string
	// Durability and Fsync are the durability settings /api/v1/caps
	// reports ("disk" or "memory"; the fsync mode with "disk"); "" omits
	// them.
	Durability, Fsync string
	// Upstream, if set, returns the state of the NATS bridge (SPEC §12)
	// for GET /api/v1/upstream, a value that marshals to JSON; nil
	// answers that route with 404 (no bridge).
	Upstream func() any
	// AdminStatus, if set, returns what GET /api/v1/status adds for an
	// admin caller (memory, journal, upstream); nil adds nothing.
	AdminStatus func() wire.AdminStatus
	// StartedAt is when the daemon started, for GET /api/v1/status; the
	// zero time means when New was called.
	StartedAt time.Time
	// Tickets holds the browsers' single-use stream tickets; nil means a
	// store with the defaults of access.TicketOptions. Only New reads it:
	// the store outlives SetSettings, which voids its tickets.
	Tickets *access.TicketStore
	// Metrics are more collectors for GET /metrics (the bridge's); they
	// are registered by New, so a reload does not change them.
	Metrics []prometheus.Collector
	// Registry is where the router registers its metrics, and what GET
	// /metrics serves: the daemon registers its own collectors there too.
	// nil means a registry of the router's own. Only New reads it.
	Registry *prometheus.Registry
	// SlowBodyWindow is the window of the slow-body rule: after its first
	// window, a whole body slower than 64 KiB/s over a window is cut with
	// 408 body_too_slow. Default 5 s (SPEC §2); tests shorten it.
	SlowBodyWindow time.Duration
	// Settings are the first of what a reload swaps (SetSettings).
	Settings
}

// Settings are what a reload swaps (Handler.SetSettings): the caller
// policy, the limits, the timeouts of new requests and streams, and the
// figures /api/v1/caps reports. Zero values mean the defaults.
type Settings struct {
	// Authenticate names the caller of a request and its scopes, or refuses
	// it with an *Error (401) when it presents bad credentials. A caller that
	// presents none and has no peer identity is returned with Authenticated
	// false, and is refused with 401 on every route that needs a scope. nil
	// fails closed: every request to such a route is refused with 401, and
	// only /healthz, /readyz and /api/v1/caps answer. Auth.Authenticate is
	// the daemon's policy.
	Authenticate func(*http.Request) (Caller, error)
	// MaxEventBytes limits one event's size in a publish; default 1 MiB.
	MaxEventBytes int64
	// MaxBodyBytes limits a request body; default MaxBatch × MaxEventBytes,
	// at most 64 MiB. A body whose Content-Length says it is larger is
	// refused with 413 before any of it is read.
	MaxBodyBytes int64
	// MaxInflightBodyBytes caps the request bodies being read at once,
	// across every request, counted as their bytes are read (streaming
	// publishes count their line buffers): a pool with fair shares (see
	// PeerShare); past it a request is refused with 503 busy and
	// Retry-After. Default 64 MiB. A body larger than what its peer may
	// hold is a 413.
	MaxInflightBodyBytes int64
	// PeerShare is the fraction of each pool the router keeps (body bytes
	// in flight, outstanding tickets, streams open in total) that one
	// peer other than a privileged one (Caller.Share) may hold, at least
	// one unit (SPEC §2, fair shares; see package share). Default 0: no
	// shares; the daemon sets peer_share.
	PeerShare float64
	// Keepalive is the SSE comment / WebSocket ping interval; default 15 s.
	Keepalive time.Duration
	// WriteTimeout bounds one write of a stream's queued frames, so a peer
	// that stopped reading is cut off; default 30 s. A quiet stream never
	// hits it.
	WriteTimeout time.Duration
	// MaxHeaderBytes limits a request's line and headers as the router
	// counts them: a larger request gets 431 with a JSON error. 0 means no
	// check here; the http.Server's own MaxHeaderBytes still applies, and
	// answers 431 in plain text past its 4 KiB of slack.
	MaxHeaderBytes int64
	// BodyTimeout is the time a client has to send the body of a POST or
	// DELETE once its headers arrived; one that trickles in slower is cut
	// off with 408 (a slow-loris body). Default 30 s. Streams (GET) have no
	// body and are never cut by it.
	BodyTimeout time.Duration
	// MaxStreams limits the streams open at once across every bus
	// (max_subscribers_total); 0 means no limit beyond each bus's own.
	MaxStreams int
	// KeysFile is the keys file's absolute path, which /api/v1/caps
	// reports to admin callers only; "" reports nothing.
	KeysFile string
	// Caps are the limits /api/v1/caps reports.
	Caps wire.Limits
	// AllowedOrigins are the browser origins ("http://app.example:3000",
	// or a bare host) answered with CORS headers on POST /api/v1/tickets
	// and the GET stream routes (allowed_origins, SPEC §7); any other
	// origin gets none.
	AllowedOrigins []string
}

func (o *Options) fill() {
	if o.MaxEventBytes <= 0 {
		o.MaxEventBytes = DefaultMaxEventBytes
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = min(DefaultMaxBatch*o.MaxEventBytes, 64<<20)
	}
	if o.MaxInflightBodyBytes <= 0 {
		o.MaxInflightBodyBytes = DefaultMaxInflightBodyBytes
	}
	if o.Keepalive <= 0 {
		o.Keepalive = DefaultKeepalive
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = DefaultBodyTimeout
	}
	if o.SlowBodyWindow <= 0 {
		o.SlowBodyWindow = DefaultSlowBodyWindow
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Caps.MaxEventBytes = o.MaxEventBytes
	o.Caps.MaxBatch = DefaultMaxBatch
	o.Caps.MinMaxQueued, o.Caps.MaxMaxQueued = grammar.MinMaxQueued, grammar.MaxMaxQueued
	o.Caps.KeepaliveMs = o.Keepalive.Milliseconds()
}

// Caller is who made a request and what it may do, as the authenticator
// found it before anything else ran.
type Caller struct {
	// Authenticated reports whether the caller has an identity: a Unix
	// socket peer or a valid key.
	Authenticated bool
	// Scopes are what the caller may do.
	Scopes access.Scopes
	// Peer is the Unix socket peer, nil on TCP.
	Peer *access.Peer
	// KeyName names the bearer key used, "" for none.
	KeyName string
	// Share is who the caller's draws on the daemon's shared pools count
	// for (SPEC §2, fair shares): share.Privileged for root and the
	// daemon's uid on the socket, its uid for another socket peer (also
	// when it sends a key), its key's name elsewhere. The zero value,
	// share.Unknown, is one account for every caller nobody named.
	Share share.Peer
}

// A Handler is the router shared by every listener: every route of SPEC §6.
// It is safe for concurrent use. Streams it serves end when their bus ends
// them (Hub.EndStreams on reload and shutdown, a session's deletion) or when
// the client goes; Wait waits for them.
type Handler struct {
	mux      *http.ServeMux
	opts     atomic.Pointer[Options]
	ready    atomic.Bool
	draining atomic.Bool
	// drainCtx is cancelled by Drain: streaming publishes stop reading.
	drainCtx    context.Context
	drainCancel context.CancelFunc
	streams     sync.WaitGroup
	// open holds one unit per stream open now, on its peer's account
	// (MaxStreams); bodies the bytes of request bodies being read
	// (MaxInflightBodyBytes). Both follow PeerShare.
	open    *share.Pool
	bodies  *share.Pool
	metrics *metrics
	tickets *access.TicketStore
	// presence is every live stream, for GET …/subscribers.
	presence *presence
	started  time.Time // Options.StartedAt, for GET /api/v1/status
	// refusalLimiter keeps refused requests from flooding the log.
	refusalLimiter rateLimiter
}

// New returns a Handler serving the routes of SPEC §6 over opts.Hub.
func New(opts Options) *Handler {
	h := &Handler{mux: http.NewServeMux(), refusalLimiter: rateLimiter{interval: time.Second}}
	h.drainCtx, h.drainCancel = context.WithCancel(context.Background())
	h.presence = newPresence()
	h.started = opts.StartedAt.UTC().Truncate(time.Second)
	if opts.StartedAt.IsZero() {
		h.started = time.Now().UTC().Truncate(time.Second)
	}
	h.open = share.NewPool(share.Options{Name: PoolStreams, Err: bus.ErrSubscriberLimit})
	h.bodies = share.NewPool(share.Options{Name: PoolBodyBytes})
	h.tickets = opts.Tickets
	if h.tickets == nil {
		h.tickets = access.NewTicketStore(access.TicketOptions{})
	}
	h.setOptions(opts)
	h.metrics = newMetrics(h, opts.Registry)
	h.ready.Store(true)
	paths := map[string]bool{}
	for _, rt := range routes {
		h.mux.Handle(rt.method+" "+rt.pattern, h.wrap(rt))
		if !paths[rt.pattern] {
			paths[rt.pattern] = true
			h.mux.Handle(rt.pattern, http.HandlerFunc(methodNotAllowed))
		}
	}
	h.mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errorf(http.StatusNotFound, wire.CodeNotFound, "no route for %s", r.URL.Path))
	}))
	return h
}

// SetSettings replaces the settings (on reload); the rest of the Options
// New read stays. Streams already open keep the keepalive they started
// with. Every outstanding ticket is void from then on: the keys that
// granted them may be gone.
func (h *Handler) SetSettings(st Settings) {
	opts := *h.opts.Load()
	opts.Settings = st
	h.setOptions(opts)
	h.tickets.Clear()
}

// setOptions fills opts with the defaults and makes them the handler's.
func (h *Handler) setOptions(opts Options) {
	opts.fill()
	streams := int64(opts.MaxStreams)
	if streams <= 0 {
		streams = math.MaxInt64 // no limit beyond each bus's own
	}
	h.open.SetLimit(streams, opts.PeerShare)
	h.bodies.SetLimit(opts.MaxInflightBodyBytes, opts.PeerShare)
	h.tickets.SetShare(opts.PeerShare)
	h.opts.Store(&opts)
}

// PoolStreams names the pool of streams open on every bus together
// (max_subscribers_total), in refusals and metrics.
const PoolStreams = "streams"

func (h *Handler) options() *Options { return h.opts.Load() }

// SetReady sets what /readyz answers.
func (h *Handler) SetReady(ready bool) { h.ready.Store(ready) }

// Drain makes the handler refuse new streams with 503 from now on, and
// ends streaming publishes after the lines they have read; the daemon
// calls it when it begins to shut down, before ending the open streams.
func (h *Handler) Drain() {
	h.draining.Store(true)
	h.ready.Store(false)
	h.drainCancel()
}

// Wait blocks until every stream the handler serves has returned, or ctx
// is done. http.Server.Shutdown does not wait for upgraded (WebSocket)
// connections; this does.
func (h *Handler) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		h.streams.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ServeHTTP implements http.Handler. A query string that carries something
// like a credential (but the one ticket a GET stream route may carry) is
// refused with 401 before anything else, whatever the path: before the mux
// could answer 404 or 405, or redirect an unclean path with the query (and
// so the secret) echoed in its Location header. Before that, a request from
// an allowed origin on a CORS route gets its CORS headers, so a page can
// read the refusal; its preflight is answered right after the check.
//
// Every request is counted in the metrics by route and status once its
// handler returns, and a refused one is logged (rate-limited).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rw := &reqWriter{ResponseWriter: w}
	preflight := h.cors(rw, r)
	if name, found := queryCredential(r); found {
		h.refuse(rw, r, Caller{}, errQueryCredential(name))
		h.observe(r, rw, routeOther)
		return
	}
	if preflight {
		answerPreflight(rw)
		h.observe(r, rw, routeOther)
		return
	}
	if limit := h.options().MaxHeaderBytes; limit > 0 && headerBytes(r) > limit {
		h.refuse(rw, r, Caller{}, errorf(http.StatusRequestHeaderFieldsTooLarge, wire.CodeHeadersTooLarge,
			"the request line and headers exceed %d bytes", limit))
		h.observe(r, rw, routeOther)
		return
	}
	h.mux.ServeHTTP(rw, r)
	route := routeOther
	if strings.Contains(r.Pattern, " ") {
		route = r.Pattern // a route of the table, "METHOD /path"
	}
	h.observe(r, rw, route)
}

// routeOther is the route label of a request that matched no route of the
// table: a 404, a 405, or one refused before routing.
const routeOther = "other"

// headerBytes returns the size of r's request line and headers as they
// were sent, give or take the spelling of white space.
func headerBytes(r *http.Request) int64 {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2
	n += len("Host: \r\n") + len(r.Host)
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return int64(n + 2)
}

// timedBody is a request body read under BodyTimeout: the connection's
// read deadline turns into a 408 that writeError answers as JSON.
type timedBody struct {
	io.ReadCloser
	timeout time.Duration
	// start is when the body could begin (its headers were read), and
	// deadline when BodyTimeout ends it: for the slow-body rule.
	start, deadline time.Time
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		err = errorf(http.StatusRequestTimeout, wire.CodeBodyTimeout, "the request body did not arrive within %v", b.timeout)
	}
	return n, err
}

// setReadDeadline is http.ResponseController's SetReadDeadline without
// the controller: it finds the writer that has the method the way the
// controller does, through Unwrap, and allocates nothing.
func setReadDeadline(w http.ResponseWriter, d time.Time) error {
	for {
		switch t := w.(type) {
		case interface{ SetReadDeadline(time.Time) error }:
			return t.SetReadDeadline(d)
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		default:
			return http.ErrNotSupported
		}
	}
}

// limitBodyTime puts a POST or DELETE body under o.BodyTimeout. The
// timedBody lives in the request's reqWriter, when there is one, so that
// it costs no allocation of its own.
func limitBodyTime(w http.ResponseWriter, r *http.Request, o *Options) {
	if r.Method == http.MethodGet || r.Body == nil || r.Body == http.NoBody {
		return
	}
	now := time.Now()
	deadline := now.Add(o.BodyTimeout)
	if setReadDeadline(w, deadline) != nil {
		return
	}
	var tb *timedBody
	if rw := reqWriterOf(w); rw != nil {
		tb = &rw.body
	} else {
		tb = new(timedBody)
	}
	*tb = timedBody{ReadCloser: r.Body, timeout: o.BodyTimeout, start: now, deadline: deadline}
	r.Body = tb
}

// refuse answers a request the access policy refused. ServeHTTP logs it,
// with who it was (see peerAttrs).
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, c Caller, err error) {
	noteCaller(w, c)
	writeError(w, err)
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, rt := range routes {
		if matchPattern(rt.pattern, r.URL.Path) {
			allow = append(allow, rt.method)
		}
	}
	for _, m := range allow {
		w.Header().Add("Allow", m)
	}
	writeError(w, errorf(http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, "%s is not allowed on %s", r.Method, r.URL.Path))
}

// matchPattern reports whether path matches a mux pattern's path with
// {wildcards} standing for one segment.
func matchPattern(pattern, path string) bool {
	for {
		var ps, xs string
		ps, pattern = nextSegment(pattern)
		xs, path = nextSegment(path)
		switch {
		case ps == "" || xs == "":
			return ps == xs
		case ps[0] == '{':
		case ps != xs:
			return false
		}
	}
}

// patternValue returns the segment of path that stands for the wildcard
// {name} of pattern, which path matches.
func patternValue(pattern, path, name string) (string, bool) {
	for {
		var ps, xs string
		ps, pattern = nextSegment(pattern)
		xs, path = nextSegment(path)
		if ps == "" || xs == "" {
			return "", false
		}
		if ps == "{"+name+"}" {
			return xs, true
		}
	}
}

// nextSegment returns p's first non-empty segment and what follows it:
// splitPath one segment at a time, allocating nothing.
func nextSegment(p string) (seg, rest string) {
	for len(p) > 0 && p[0] == '/' {
		p = p[1:]
	}
	if i := strings.IndexByte(p, '/'); i >= 0 {
		return p[:i], p[i:]
	}
	return p, ""
}

func splitPath(p string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(p); i++ {
		if i == len(p) || p[i] == '/' {
			if i > start {
				out = append(out, p[start:i])
			}
			start = i + 1
		}
	}
	return out
}

// errNoPolicy refuses every request that needs a scope when the router has
// no authenticator: without a policy nobody is anybody.
var errNoPolicy = errorf(http.StatusUnauthorized, wire.CodeUnauthorized, "this server has no access policy: every request that needs credentials is refused")

// wrap authenticates and authorizes a request for its route, before any of
// the route's work, upgrade or first byte.
func (h *Handler) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o := h.options()
		var caller Caller
		switch {
		case o.Authenticate != nil:
			c, err := o.Authenticate(r)
			if err != nil {
				h.refuse(w, r, c, err)
				return
			}
			caller = c
			if tc, ok, err := h.redeemTicket(r); ok {
				if err != nil {
					h.refuse(w, r, caller, err)
					return
				}
				caller = tc
			}
		case rt.scope != scopeNone:
			h.refuse(w, r, caller, errNoPolicy)
			return
		}
		noteCaller(w, caller)
		fam, err := rt.scope.check(caller, r)
		if err != nil {
			h.refuse(w, r, caller, err)
			return
		}
		limitBodyTime(w, r, o)
		if rt.serveFamily != nil {
			rt.serveFamily(h, w, r, caller, fam)
			return
		}
		rt.serve(h, w, r, caller)
	})
}
