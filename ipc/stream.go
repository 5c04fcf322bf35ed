package ipc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/bus/share"
	"github.com/localbus/localbus/ipc/access"
	"github.com/localbus/localbus/ipc/internal/framewriter"
	"github.com/localbus/localbus/ipc/wire"
	"github.com/localbus/localbus/ipc/wire/grammar"
)

// streamTarget is the bus a stream request reads and the restriction it
// carries.
type streamTarget struct {
	bus    *bus.Bus
	family string // family streams only
}

// streamParams are a stream request's inputs, parsed once.
type streamParams struct {
	opts bus.SubscribeOptions
	// consumer names the consumer the stream reads through (SPEC §2.4),
	// "" for none; ack is the ack mode it asks for, "" for the
	// consumer's own. With a consumer, opts.Cursor and opts.Since are
	// where a new consumer starts (?since=, ?sinceTime=; Last-Event-ID is
	// not read), and opts.Epoch is the epoch of ?since=.
	consumer string
	ack      grammar.AckMode
}

// parseStreamParams validates a stream request's resume, filter and
// consumer inputs (SPEC §2.3, §2.4) before anything is looked up, so bad
// input is a 400 whatever the session. session reports whether the route
// is a session's (the only ones consumers are on); family is the family
// of a family route, the zero Family otherwise.
func (h *Handler) parseStreamParams(r *http.Request, c Caller, session bool, family bus.Family) (streamParams, error) {
	var p streamParams
	opts := &p.opts
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return p, errorf(http.StatusBadRequest, wire.CodeInvalidQuery, "malformed query string")
	}
	one := func(name string) (string, bool, error) {
		vs, ok := q[name]
		if !ok {
			return "", false, nil
		}
		if len(vs) > 1 {
			return "", false, errorf(http.StatusBadRequest, "invalid_"+name, "%s given more than once", name)
		}
		return vs[0], true, nil
	}
	opts.Family = family
	if s, ok, err := one(wire.ParamSince); err != nil {
		return p, err
	} else if ok {
		c, err := grammar.ParseCursor(s)
		if err != nil {
			return p, errorf(http.StatusBadRequest, wire.CodeInvalidSince, "since: %s", inputReason(err))
		}
		opts.Cursor = &c
	}
	if s, ok, err := one(wire.ParamSinceTime); err != nil {
		return p, err
	} else if ok {
		if opts.Cursor != nil {
			return p, errorf(http.StatusBadRequest, wire.CodeInvalidSinceTime, "give since or sinceTime, not both")
		}
		t, err := grammar.ParseSinceTime(s, time.Now())
		if err != nil {
			return p, errorf(http.StatusBadRequest, wire.CodeInvalidSinceTime, "sinceTime: %s", inputReason(err))
		}
		opts.Since = t
	}
	if s, ok, err := one(wire.ParamMaxQueued); err != nil {
		return p, err
	} else if ok {
		n, err := grammar.ParseMaxQueued(s)
		if err != nil {
			return p, err
		}
		opts.MaxQueued = n
	}
	if s, ok, err := one(wire.ParamTypes); err != nil {
		return p, err
	} else if ok {
		f, err := bus.ParseFilter(s)
		if err != nil {
			return p, err
		}
		if !family.IsZero() && !f.Within(family.String()) {
			return p, errorf(http.StatusBadRequest, wire.CodeInvalidTypes, "types: every type must be in family %s on this route", family)
		}
		opts.Filter = f
	}
	if s, ok, err := one(wire.ParamEpoch); err != nil {
		return p, err
	} else if ok {
		opts.Epoch = s
	}
	if s, ok, err := one(wire.ParamConsumer); err != nil {
		return p, err
	} else if ok {
		if !session {
			return p, errorf(http.StatusBadRequest, wire.CodeInvalidConsumer, "consumers are on session streams only, not on family or global ones")
		}
		if p.consumer, err = grammar.ParseConsumer(s); err != nil {
			return p, err
		}
	}
	if s, ok, err := one(wire.ParamAck); err != nil {
		return p, err
	} else if ok {
		if p.consumer == "" {
			return p, errorf(http.StatusBadRequest, wire.CodeInvalidAck, "ack applies to a stream through a consumer: give consumer too")
		}
		if p.ack, err = grammar.ParseAckMode(s); err != nil {
			return p, err
		}
	}
	if p.consumer != "" {
		// The consumer's position is the one that counts: EventSource
		// sends Last-Event-ID on every reconnection, and the epoch header
		// goes with it: both are left unread.
		return p, nil
	}
	if e := r.Header.Get(wire.HeaderEpoch); e != "" {
		opts.Epoch = e
	}
	if vs, ok := r.Header[http.CanonicalHeaderKey(wire.HeaderLastEventID)]; ok {
		if cur, err := grammar.ParseCursor(lastValue(vs)); err == nil {
			opts.Cursor = &cur // the header wins over ?since=
		} else if opts.Cursor == nil {
			opts.CursorIgnored = true
			h.logServed(r, c, "ignoring malformed Last-Event-ID", "last_event_id", "path", r.URL.Path)
		}
	}
	return p, nil
}

func lastValue(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// streamKind is the transport a stream route serves.
type streamKind int

const (
	kindSSE streamKind = iota
	kindWS
)

// The transport label of the stream metrics.
const (
	transportSSE = "sse"
	transportWS  = "ws"
)

func (k streamKind) transport() string {
	if k == kindWS {
		return transportWS
	}
	return transportSSE
}

func (h *Handler) serveSessionSSE(w http.ResponseWriter, r *http.Request, c Caller) {
	h.serveStream(w, r, c, kindSSE, r.PathValue("id"), bus.Family{})
}

func (h *Handler) serveSessionWS(w http.ResponseWriter, r *http.Request, c Caller) {
	h.serveStream(w, r, c, kindWS, r.PathValue("id"), bus.Family{})
}

func (h *Handler) serveGlobalSSE(w http.ResponseWriter, r *http.Request, c Caller) {
	h.serveStream(w, r, c, kindSSE, "", bus.Family{})
}

func (h *Handler) serveGlobalWS(w http.ResponseWriter, r *http.Request, c Caller) {
	h.serveStream(w, r, c, kindWS, "", bus.Family{})
}

// The family routes get their family parsed once, by their scope's check
// (scopeReadFamily), which needs it first.

func (h *Handler) serveFamilySSE(w http.ResponseWriter, r *http.Request, c Caller, fam bus.Family) {
	h.serveStream(w, r, c, kindSSE, "", fam)
}

func (h *Handler) serveFamilyWS(w http.ResponseWriter, r *http.Request, c Caller, fam bus.Family) {
	h.serveStream(w, r, c, kindWS, "", fam)
}

// serveStream validates, looks up, subscribes and hands over to the
// transport. The subscription exists before the response begins, so an event
// published once the client sees the stream open is delivered.
func (h *Handler) serveStream(w http.ResponseWriter, r *http.Request, c Caller, kind streamKind, session string, family bus.Family) {
	if family.Reserved() && family.String() != bus.FamilyLocalbus {
		writeError(w, errorf(http.StatusBadRequest, wire.CodeInvalidFamily, "family %s is reserved for stream frames", family))
		return
	}
	if session != "" {
		if _, err := bus.ParseSessionID(session); err != nil {
			writeError(w, err)
			return
		}
	}
	p, err := h.parseStreamParams(r, c, session != "", family)
	if err != nil {
		writeError(w, err)
		return
	}
	if kind == kindWS && !access.IsWebSocketUpgrade(r) {
		writeError(w, errorf(http.StatusBadRequest, wire.CodeWebSocketRequired, "this route needs a WebSocket upgrade request"))
		return
	}
	if h.draining.Load() {
		writeError(w, errorf(http.StatusServiceUnavailable, wire.CodeShuttingDown, "the daemon is shutting down"))
		return
	}
	o := h.options()
	b := o.Hub.Global()
	var sess *hub.Session
	if session != "" {
		s, ok := o.Hub.Session(session)
		if !ok {
			writeError(w, errorf(http.StatusNotFound, wire.CodeNotFound, "no such session %q", session))
			return
		}
		b, sess = s.Bus, s
	}
	if r.Method == http.MethodHead {
		// The headers of the stream, not a stream: a HEAD response has no
		// body to end, so a stream would keep its connection busy for good.
		setSSEHeaders(w.Header())
		w.WriteHeader(http.StatusOK)
		return
	}
	h.streams.Add(1)
	var sub *bus.Subscription
	var live *liveStream
	var cons *consumerStream // the consumer it reads through, if any
	sl := newStreamLog(h, r, c, kind, session, family.String())
	// The stream's unit of every bus's streams, on its peer's account.
	open := h.open.Account(c.Share)
	err = open.Acquire(1)
	held := err == nil
	// done ends the stream's bookkeeping. The transport calls it once the
	// stream is over, which may be after this handler has returned: a
	// stream on a taken-over connection outlives its request.
	done := func() {
		if sub != nil {
			// Closed first, so that a stream whose peer left ends as
			// cancelled, whichever transport noticed it.
			sub.Close()
			h.presence.remove(live)
			sl.ended(sub)
		}
		cons.end()
		if held {
			open.Release(1)
		}
		h.streams.Done()
	}
	if held {
		if p.consumer != "" {
			// Before the subscription, which starts where the consumer is.
			cons, err = h.attachConsumer(sess, &p, c, sl)
		}
		if err == nil {
			// The subscription lives as long as the stream: done closes it.
			p.opts.Peer = c.Share
			sub, err = b.Subscribe(nil, p.opts)
		}
	}
	switch {
	case errors.Is(err, bus.ErrSubscriberLimit):
		// Refused after the response could begin: the reason goes in-band.
		sub = nil
	case err != nil:
		done()
		writeError(w, err)
		return
	}
	if sub != nil {
		if h.draining.Load() {
			// Shutdown began while this stream was being set up, and may
			// already have ended the others: end this one the same way.
			// (Drain happens before the hub ends streams, so a stream that
			// subscribed after that sees draining here.)
			b.EndStreams(bus.EndShutdown)
		}
	}
	var refusal *bus.Frame
	if sub == nil {
		msg := "the subscriber limit is reached; retry later"
		var sr *share.Refusal
		if errors.As(err, &sr) {
			h.metrics.shareRefused(sr)
			if sr.Kind == share.ByShare {
				msg = fmt.Sprintf("this peer holds its share of the %s (%d, peer_share); close one of its streams, or retry later", streamPoolText(sr.Pool), sr.Limit)
			}
		}
		refusal = bus.ErrorFrame(b.Session(), wire.CodeSubscriberLimit, msg)
		// Refused in-band, with a 200 or 101: counted and logged as the
		// limit refusal it is.
		h.metrics.refused(reasonLimit, wire.CodeSubscriberLimit)
		h.logRefusal(r, reqWriterOf(w), http.StatusTooManyRequests, reasonLimit, wire.CodeSubscriberLimit)
	} else {
		live = h.presence.add(r, c, kind, subscriberBus(session, family), sub, cons.name())
		sl.live = live
		sl.opened()
	}
	switch kind {
	case kindSSE:
		h.runSSE(w, r, sub, cons, refusal, sl, done)
	case kindWS:
		h.runWS(w, r, sub, cons, refusal, sl, done)
	}
}

// subscriberBus names the bus a stream reads, as GET /api/v1/subscribers
// shows it.
func subscriberBus(session string, family bus.Family) wire.SubscriberBus {
	switch {
	case session != "":
		return wire.SubscriberBus{Session: session}
	case !family.IsZero():
		return wire.SubscriberBus{Family: family.String()}
	}
	return wire.SubscriberBus{Global: true}
}

// streamPoolText names a pool a stream is refused by, for its
// stream:error.
func streamPoolText(pool string) string {
	if pool == PoolStreams {
		return "streams open on every bus together"
	}
	return "bus's subscribers"
}

// refuse sends a refused stream its terminal frame and closes it: an SSE
// stream's retry: line and the frame; a WebSocket's message, then the close
// handshake with 1013.
func refuse(w framewriter.Writer, refusal *bus.Frame) {
	wb := framewriter.GetBuf()
	err := w.Write(wb, []*bus.Frame{refusal}, nil, true)
	framewriter.PutBuf(wb)
	if err != nil {
		w.Close(bus.EndNone)
		return
	}
	w.Close(framewriter.EndSubscriberLimit)
}

// sendReply writes a control reply (a WebSocket message) and reports
// whether it was written.
func sendReply(w framewriter.Writer, reply []byte) bool {
	wb := framewriter.GetBuf()
	err := w.Write(wb, nil, reply, false)
	framewriter.PutBuf(wb)
	return err == nil
}

// streamEnd is the reason to close a stream with, from pump's results.
func streamEnd(end bus.EndReason, ok bool) bus.EndReason {
	if !ok {
		return bus.EndNone
	}
	return end
}

// pump is the one loop of every stream, SSE or WebSocket: each wake-up it
// takes every queued frame and writes them in one Write (serialized once
// by the bus, shared by every subscriber, coalesced into one system call
// by the writer), sends control replies in between, and pings a stream
// that was quiet for a keepalive interval. A stream through a consumer
// (cs, nil for none) moves its auto position after each write, stores it
// when its timer says, and ends with stream:closed replaced once another
// stream took the consumer over. It returns when the stream ended (ok,
// with why, its terminal frame written) or the connection failed or ctx
// ended (not ok).
func pump(ctx context.Context, sub *bus.Subscription, w framewriter.Writer, replies <-chan []byte, o *Options, sl *streamLog, cs *consumerStream) (end bus.EndReason, ok bool) {
	keepalive := newKeepalive(o.Keepalive)
	defer keepalive.stop()
	defer sl.wrote(w)
	for {
		wb := framewriter.GetBuf()
		var ended bool
		wb.Frames, ended = sub.Take(wb.Frames)
		n := len(wb.Frames)
		sl.checkSlow(sub)
		err := w.Write(wb, wb.Frames, nil, ended)
		if err == nil {
			sl.live.flushed(wb.Frames)
			cs.wrote(sub)
		}
		framewriter.PutBuf(wb)
		if err != nil {
			return bus.EndNone, false
		}
		sl.wrote(w)
		if ended {
			return sub.End(), true
		}
		if n > 0 {
			keepalive.wrote()
		}
		select {
		case <-sub.Ready():
		case <-cs.replaced():
			sub.EndReplaced() // the next Take returns its terminal frame
		case <-cs.syncDue():
			cs.sync()
		case <-cs.acked():
			if reply := cs.acks.take(); reply != nil && !sendReply(w, reply) {
				return bus.EndNone, false
			}
		case reply := <-replies:
			if !sendReply(w, reply) {
				return bus.EndNone, false
			}
		case <-keepalive.C():
			if !keepalive.due() {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, o.Keepalive)
			err := w.Ping(pctx)
			cancel()
			if err != nil {
				return bus.EndNone, false // the peer did not answer: close it
			}
			keepalive.wrote()
		case <-ctx.Done():
			return bus.EndNone, false
		}
	}
}

// streamLog logs what happens to one stream: its opening and its end
// (debug, under the refusals' limiter: lines a served request causes),
// each stream:slow warning (debug) and an eviction (info), naming the bus
// and the peer. It is used by the stream's writer goroutine only, but for
// opened.
type streamLog struct {
	h     *Handler
	r     *http.Request
	c     Caller
	log   *slog.Logger
	attrs []any
	nbus  int // attrs[:nbus] name the path, the transport and the bus; the rest the peer
	slow  int // warnings logged so far
	// live is the stream's entry in the handler's presence, which the
	// writer's flushes update; nil for a refused stream.
	live *liveStream

	transport string
	bytes     prometheus.Counter // the transport's localbus_stream_bytes_written_total
	counted   int64              // the writer's bytes added to it so far
}

// opened logs and counts that the stream opened.
func (l *streamLog) opened() {
	l.h.metrics.streamsOpened.WithLabelValues(l.transport).Inc()
	l.h.logServed(l.r, l.c, "stream opened", "stream_opened", l.attrs[:l.nbus]...)
}

// wrote counts the bytes the stream's writer sent since the last call:
// once per wake-up, by the writer's goroutine.
func (l *streamLog) wrote(w framewriter.Writer) {
	if n := w.Written(); n > l.counted {
		l.bytes.Add(float64(n - l.counted))
		l.counted = n
	}
}

func newStreamLog(h *Handler, r *http.Request, c Caller, kind streamKind, session, family string) *streamLog {
	log := h.options().Logger
	attrs := []any{"path", r.URL.Path, "transport", kind.transport()}
	switch {
	case session != "":
		attrs = append(attrs, "session", session)
	case family != "":
		attrs = append(attrs, "bus", "global", "family", family)
	default:
		attrs = append(attrs, "bus", "global")
	}
	t := kind.transport()
	return &streamLog{h: h, r: r, c: c, log: log, nbus: len(attrs), attrs: append(attrs, peerAttrs(r, c)...),
		transport: t, bytes: h.metrics.streamBytes.WithLabelValues(t)}
}

// checkSlow logs the stream:slow warnings sub was sent since the last
// check: at debug, since a warning is the client's business until it is
// evicted.
func (l *streamLog) checkSlow(sub *bus.Subscription) {
	n := sub.SlowWarnings()
	if n == l.slow {
		return
	}
	l.slow = n
	st := sub.Stats()
	l.log.Debug("slow subscriber warned", append(l.attrs, "warnings", n, "queued", st.Live, "queued_bytes", st.LiveBytes)...)
}

// ended logs the warnings not logged yet and an eviction, once sub's
// stream is over: a writer blocked on a peer that stopped reading never
// took the frames that carry them.
func (l *streamLog) ended(sub *bus.Subscription) {
	l.checkSlow(sub)
	if reason := sub.LagReason(); reason != "" {
		l.log.Info("subscriber evicted", append(l.attrs, "reason", reason, "max_queued", sub.MaxQueued())...)
	}
	end := string(sub.End())
	l.h.metrics.streamsClosed.WithLabelValues(l.transport, end).Inc()
	l.h.logServed(l.r, l.c, "stream closed", "stream_closed", append(l.attrs[:l.nbus:l.nbus], "end", end)...)
}

// keepalive times the pings of a quiet stream: one every interval of
// silence. Writes only note their time; the timer is moved when it fires
// early, not on every write, which would cost a timer update per wake-up.
type keepalive struct {
	t        *time.Timer
	interval time.Duration
	last     time.Time
}

func newKeepalive(interval time.Duration) *keepalive {
	return &keepalive{t: time.NewTimer(interval), interval: interval, last: time.Now()}
}

func (k *keepalive) C() <-chan time.Time { return k.t.C }
func (k *keepalive) stop()               { k.t.Stop() }

// wrote notes that the stream just sent something.
func (k *keepalive) wrote() { k.last = time.Now() }

// due reports, after the timer fired, whether a ping is due; if not, it
// sets the timer for the end of the current silence. When a ping is due
// the timer is set for the next interval.
func (k *keepalive) due() bool {
	if quiet := time.Since(k.last); quiet < k.interval {
		k.t.Reset(k.interval - quiet)
		return false
	}
	k.t.Reset(k.interval)
	return true
}
