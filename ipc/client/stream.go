package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/localbus/localbus/ipc/wire"
)

// Transport is how a stream travels.
type Transport string

// The stream transports.
const (
	SSE       Transport = "sse" // Server-Sent Events, the default
	WebSocket Transport = "ws"  // WebSocket text frames
)

// StreamOptions say what a Stream follows and how. The zero value follows
// the global bus live over SSE.
type StreamOptions struct {
	// Session is the session to follow. With Family also "", the stream
	// follows the global bus (every session, and the daemon's localbus:*
	// events; admin scope).
	Session string
	// Family follows one family of the global bus (read:FAMILY scope). It
	// excludes Session.
	Family string
	// Types filters the stream to these types, exact or "family:*"; nil
	// means every type. Reserved frames always pass.
	Types []string
	// Since is the resume point: the id of the last event already received.
	// nil starts live, after the bus's last id; 0 replays the whole ring.
	// With Consumer it places a new consumer only (nil: at 0, the whole
	// ring); on an existing one the daemon refuses it (409
	// consumer_exists).
	Since *uint64
	// SinceTime, when not zero and Since is nil, starts the stream at the
	// first event the daemon still holds that was published at or after
	// it (?sinceTime=), with a stream:gap when its ring does not reach
	// back so far. Reconnections resume from the last id, as always.
	SinceTime time.Time
	// Epoch is the epoch Since belongs to, as stream:ready reported it;
	// with it a bus whose id sequence restarted is reported as a gap even
	// when the ids overlap. "" sends none.
	Epoch string
	// Transport is SSE (the default) or WebSocket.
	Transport Transport
	// MaxQueued asks the daemon for this live queue limit, 16 to 2048; 0
	// leaves the daemon's max_queued.
	MaxQueued int
	// WaitForSession makes a stream of a session that does not exist (yet)
	// wait for it, retrying with backoff, instead of ending with an
	// *EndedError: for a follower started before the session's first
	// publish creates it. A live stream (Since nil) then gets the session
	// from its first event, since all of it is newer than the stream.
	WaitForSession bool
	// MaxBackoff caps the wait between failed reconnection attempts;
	// default 30 s.
	MaxBackoff time.Duration
	// Consumer follows Session through the consumer of that name (SPEC
	// §2.4): the daemon keeps the position, so a program that restarts
	// resumes where the consumer is, without keeping ids. The first
	// stream creates it (at Since or SinceTime, else at the start of the
	// ring); every connection starts after its acknowledged id, and a
	// stream that takes it over ends this one with an *EndedError that
	// unwraps to ErrReplaced. A family or global stream has none.
	Consumer string
	// Ack is the ack mode of a new consumer: AckAuto (the position
	// follows what the daemon wrote to the stream) or AckExplicit (it
	// moves when Stream.Ack says so). "" uses the consumer's own, auto
	// for a new one; the other mode than the consumer's is refused (409
	// consumer_ack_mode).
	Ack AckMode
	// OnRetry, when set, is called before the stream waits to reconnect
	// after a connection attempt failed or a connection was lost without a
	// terminal frame, with the cause and the wait. Terminal frames, which
	// Next returns, explain themselves and do not call it. It runs on the
	// goroutine that called Next.
	OnRetry func(err error, wait time.Duration)
}

// Reconnection delays (the policy is in the Stream doc comment).
const (
	minBackoff        = 250 * time.Millisecond
	defaultMaxBackoff = 30 * time.Second
	laggedWait        = 250 * time.Millisecond
)

// A Stream follows one bus across connections: it reconnects with jittered
// exponential backoff, resumes after the last event it returned, in the
// epoch it belongs to, and returns every frame to the caller, reserved ones
// included, so the caller sees stream:gap, stream:lagged and the like.
//
// Reconnection: after stream:closed for a shutdown or reload it waits the
// frame's retryMs (which the daemon jitters, so its clients do not all
// come back in the same millisecond), after a WebSocket close 1001 without
// that frame a random 0.5–1.5 s, after stream:lagged (evicted as a slow
// reader: the missed events are still in the ring) up to 250 ms. After a
// connection lost without a terminal frame it waits a random time between
// half and all of the SSE retry: value (3 s until the daemon sends one),
// doubling with each further failure up to StreamOptions.MaxBackoff. A
// failed attempt after an announced close backs off from 250 ms the same
// way. The count restarts at every stream:ready.
//
// A stream ends for good, with an *EndedError, when its session is deleted
// or another stream took its consumer over (after the stream:closed frame,
// which Next returns first), when the WebSocket is closed with 1000, or
// when the session does not exist, unless
// the daemon went away before (a restarted daemon that keeps no state has
// not recreated the session yet, and the stream waits for it) or
// StreamOptions.WaitForSession is set. 401, 403
// and 400 answers end it with the *APIError.
//
// Next must be called from one goroutine at a time; Cursor and Close may be
// called from any.
type Stream struct {
	c       *Client
	opts    StreamOptions
	path    string
	query   url.Values
	ctx     context.Context // the stream's lifetime: Stream's ctx, or Close
	cancel  context.CancelFunc
	closed  atomic.Bool
	readers sync.WaitGroup // the connections' reader goroutines

	mu        sync.Mutex // guards cursor, hasCursor, epoch; orders readers.Add before Close's Wait
	cursor    uint64
	hasCursor bool
	epoch     string

	// Owned by the goroutine calling Next.
	conn       *streamConn
	retry      time.Duration // the SSE retry: value
	base       time.Duration // the first backoff step of the current outage
	retryAt    time.Time     // when to connect next
	failures   int           // failed attempts since the last stream:ready
	mayRestart bool          // the daemon may have restarted: a 404 is worth retrying
	err        error         // the stream ended for good
}

// A streamConn is one connection of a Stream. Its reader goroutine owns the
// network connection and hands frames over on items, one at a time, so a
// caller that does not call Next pushes back on the daemon.
type streamConn struct {
	items  chan item
	cancel context.CancelFunc
	done   chan struct{} // closed when the reader has returned
}

type item struct {
	frame Frame
	retry time.Duration // SSE retry: so far, 0 for none
	err   error
}

// Stream connects to the bus opts names and returns the stream. It
// returns the first connection's error: an *UnreachableError when the
// daemon cannot be reached, an *APIError when it refuses, an *EndedError
// when the session does not exist (unless opts.WaitForSession). ctx bounds the stream's whole life:
// when it is done the stream stops as if closed. Call Close when done.
func (c *Client) Stream(ctx context.Context, opts StreamOptions) (*Stream, error) {
	if err := c.init(); err != nil {
		return nil, err
	}
	s := &Stream{c: c, opts: opts, retry: wire.RetryMs * time.Millisecond, base: minBackoff}
	if s.opts.MaxBackoff <= 0 {
		s.opts.MaxBackoff = defaultMaxBackoff
	}
	var err error
	if s.path, err = streamPath(opts); err != nil {
		return nil, err
	}
	s.query = url.Values{}
	if len(opts.Types) > 0 {
		s.query.Set(wire.ParamTypes, strings.Join(opts.Types, ","))
	}
	if opts.MaxQueued != 0 {
		s.query.Set(wire.ParamMaxQueued, strconv.Itoa(opts.MaxQueued))
	}
	if opts.Consumer != "" {
		if opts.Session == "" {
			return nil, errors.New("client: a consumer follows a session: set Session")
		}
		s.query.Set(wire.ParamConsumer, opts.Consumer)
		if opts.Ack != "" {
			s.query.Set(wire.ParamAck, string(opts.Ack))
		}
	} else if opts.Ack != "" {
		return nil, errors.New("client: Ack is a consumer's ack mode: set Consumer")
	}
	switch {
	case opts.Consumer != "" && opts.Since != nil:
		// Where a new consumer starts: in the query, since the daemon
		// reads no Last-Event-ID on a consumer's stream, and only until a
		// connection is made (see connect).
		s.query.Set(wire.ParamSince, strconv.FormatUint(*opts.Since, 10))
		if opts.Epoch != "" {
			s.query.Set(wire.ParamEpoch, opts.Epoch)
		}
	case opts.Consumer != "" && !opts.SinceTime.IsZero():
		s.query.Set(wire.ParamSinceTime, opts.SinceTime.UTC().Format(time.RFC3339Nano))
	case opts.Since != nil:
		s.cursor, s.hasCursor, s.epoch = *opts.Since, true, opts.Epoch
	case !opts.SinceTime.IsZero():
		// Sent on every connection; the daemon lets the Last-Event-ID of a
		// reconnection win over it.
		s.query.Set(wire.ParamSinceTime, opts.SinceTime.UTC().Format(time.RFC3339Nano))
	}
	s.ctx, s.cancel = context.WithCancel(ctx)
	if err := s.connect(ctx); err != nil {
		if !s.waitsFor(err) {
			s.Close()
			return nil, s.classify(err, true)
		}
		// No session yet: Next waits for it.
		s.failures = 1
		d := s.backoff()
		s.retryAt = time.Now().Add(d)
		s.notify(err, d)
	}
	return s, nil
}

// streamPath returns the route of the bus opts names, for the transport.
func streamPath(opts StreamOptions) (string, error) {
	var events, ws string
	switch {
	case opts.Session != "" && opts.Family != "":
		return "", errors.New("client: a stream follows a session or a family, not both")
	case opts.Session != "":
		events, ws = wire.SessionEventsPath(opts.Session), wire.SessionWSPath(opts.Session)
	case opts.Family != "":
		events, ws = wire.FamilyEventsPath(opts.Family), wire.FamilyWSPath(opts.Family)
	default:
		events, ws = wire.PathEvents, wire.PathEventsWS
	}
	switch opts.Transport {
	case "", SSE:
		return events, nil
	case WebSocket:
		return ws, nil
	}
	return "", fmt.Errorf("client: unknown transport %q: want %q or %q", opts.Transport, SSE, WebSocket)
}

// Cursor returns where the stream would resume: the id of the last event
// Next returned (or, before any, the anchor stream:ready gave or Since)
// and the epoch of its bus. ok is false while there is none. A caller that
// keeps them can later resume with StreamOptions.Since and Epoch.
func (s *Stream) Cursor() (id uint64, epoch string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cursor, s.epoch, s.hasCursor
}

// Close stops the stream: it closes the connection and waits for the
// stream's goroutines to return. A Next in progress or to come returns
// ErrClosed. Close is idempotent.
func (s *Stream) Close() error {
	s.closed.Store(true)
	s.mu.Lock()
	s.cancel()
	s.mu.Unlock()
	s.readers.Wait()
	return nil
}

// Next returns the next frame, reconnecting as needed (see Stream). It
// blocks until a frame arrives, the stream ends for good (the *EndedError
// or *APIError that ended it, again on every later call), ctx is done
// (ctx.Err(); the stream is intact and a later Next goes on), or the
// stream is closed (ErrClosed, or the error of Stream's ctx).
func (s *Stream) Next(ctx context.Context) (Frame, error) {
	for {
		if s.err != nil {
			return Frame{}, s.err
		}
		if s.ctx.Err() != nil {
			s.drop()
			return Frame{}, s.stopped()
		}
		if s.conn == nil {
			if err := s.reconnect(ctx); err != nil {
				return Frame{}, err
			}
			continue
		}
		select {
		case it := <-s.conn.items:
			if it.retry > 0 {
				s.retry = it.retry
			}
			if it.err != nil {
				s.lost(it.err)
				continue
			}
			s.apply(it.frame)
			return it.frame, nil
		case <-ctx.Done():
			return Frame{}, ctx.Err()
		case <-s.ctx.Done():
		}
	}
}

// stopped is Next's error once the stream's context is done.
func (s *Stream) stopped() error {
	if s.closed.Load() {
		return ErrClosed
	}
	return s.ctx.Err()
}

// drop closes the current connection and waits for its reader.
func (s *Stream) drop() {
	if s.conn == nil {
		return
	}
	s.conn.cancel()
	<-s.conn.done
	s.conn = nil
}

// connect opens a connection with the current cursor and starts its
// reader. ctx aborts the attempt; the connection, once open, lives until
// dropped or the stream ends.
func (s *Stream) connect(ctx context.Context) error {
	connCtx, cancel := context.WithCancel(s.ctx)
	stop := context.AfterFunc(ctx, cancel)
	var start func(ctx context.Context, items chan<- item)
	var err error
	if s.opts.Transport == WebSocket {
		start, err = s.dialWS(connCtx)
	} else {
		start, err = s.dialSSE(connCtx)
	}
	if !stop() && err == nil {
		// Aborted just as it opened: release the connection at once.
		start(connCtx, nil)
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		return err
	}
	sc := &streamConn{items: make(chan item), cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	if s.ctx.Err() != nil {
		// Closed meanwhile: Close may be waiting, so no reader may start.
		s.mu.Unlock()
		cancel()
		start(connCtx, nil) // releases the connection at once
		return s.stopped()
	}
	s.readers.Add(1)
	s.mu.Unlock()
	s.consumerStarted()
	go func() {
		defer s.readers.Done()
		defer close(sc.done)
		start(connCtx, sc.items)
	}()
	s.conn = sc
	return nil
}

// resumeHeader returns the request headers of a connection: credentials
// and the resume point, but on a consumer's stream, which the daemon
// resumes where the consumer is.
func (s *Stream) resumeHeader() http.Header {
	h := s.c.header()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hasCursor && s.opts.Consumer == "" {
		h.Set(wire.HeaderLastEventID, strconv.FormatUint(s.cursor, 10))
		if s.epoch != "" {
			h.Set(wire.HeaderEpoch, s.epoch)
		}
	}
	return h
}

// send hands it to Next, unless ctx ends first. It reports whether it did.
func send(ctx context.Context, items chan<- item, it item) bool {
	if items == nil {
		return false
	}
	select {
	case items <- it:
		return true
	case <-ctx.Done():
		return false
	}
}
