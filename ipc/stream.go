package ipc

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/ipc/access"
)

// streamTarget is the bus a stream request reads and the restriction it
// carries.
type streamTarget struct {
	bus    *bus.Bus
	family string // family streams only
}

// parseStreamParams validates a stream request's resume and filter inputs
// (SPEC §2.3) before anything is looked up, so bad input is a 400 whatever
// the session. family is the family of a family route, "" otherwise.
func (h *Handler) parseStreamParams(r *http.Request, family string) (bus.SubscribeOptions, error) {
	var opts bus.SubscribeOptions
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return opts, errorf(http.StatusBadRequest, "invalid_query", "malformed query string")
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
	if family != "" {
		opts.Family = family
	}
	if s, ok, err := one("since"); err != nil {
		return opts, err
	} else if ok {
		c, err := bus.ParseCursor(s)
		if err != nil {
			return opts, errorf(http.StatusBadRequest, "invalid_since", "since: %s", inputReason(err))
		}
		opts.Cursor = &c
	}
	if s, ok, err := one("maxQueued"); err != nil {
		return opts, err
	} else if ok {
		n, err := bus.ParseMaxQueued(s)
		if err != nil {
			return opts, err
		}
		opts.MaxQueued = n
	}
	if s, ok, err := one("types"); err != nil {
		return opts, err
	} else if ok {
		f, err := bus.ParseFilter(s)
		if err != nil {
			return opts, err
		}
		if family != "" && !f.Within(family) {
			return opts, errorf(http.StatusBadRequest, "invalid_types", "types: every type must be in family %s on this route", family)
		}
		opts.Filter = f
	}
	if s, ok, err := one("epoch"); err != nil {
		return opts, err
	} else if ok {
		opts.Epoch = s
	}
	if e := r.Header.Get("Localbus-Epoch"); e != "" {
		opts.Epoch = e
	}
	if vs, ok := r.Header["Last-Event-Id"]; ok {
		if c, err := bus.ParseCursor(lastValue(vs)); err == nil {
			opts.Cursor = &c // the header wins over ?since=
		} else if opts.Cursor == nil {
			opts.CursorIgnored = true
			h.options().Logger.Info("ignoring malformed Last-Event-ID", "path", r.URL.Path)
		}
	}
	return opts, nil
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

func (h *Handler) serveSessionSSE(w http.ResponseWriter, r *http.Request, c Caller) {
	h.serveStream(w, r, c, kindSSE, r.PathValue("id"), "")
}

func (h *Handler) serveSessionWS(w http.ResponseWriter, r *http.Request, c Caller) {
	h.serveStream(w, r, c, kindWS, r.PathValue("id"), "")
}

func (h *Handler) serveGlobalSSE(w http.ResponseWriter, r *http.Request, c Caller) {
	h.serveStream(w, r, c, kindSSE, "", "")
}

func (h *Handler) serveGlobalWS(w http.ResponseWriter, r *http.Request, c Caller) {
	h.serveStream(w, r, c, kindWS, "", "")
}

func (h *Handler) serveFamilySSE(w http.ResponseWriter, r *http.Request, c Caller) {
	h.serveStream(w, r, c, kindSSE, "", r.PathValue("family"))
}

func (h *Handler) serveFamilyWS(w http.ResponseWriter, r *http.Request, c Caller) {
	h.serveStream(w, r, c, kindWS, "", r.PathValue("family"))
}

// serveStream validates, looks up, subscribes and hands over to the
// transport. The subscription exists before the response begins, so an event
// published once the client sees the stream open is delivered.
func (h *Handler) serveStream(w http.ResponseWriter, r *http.Request, c Caller, kind streamKind, session, family string) {
	if family != "" && bus.IsReservedFamily(family) && family != bus.FamilyLocalbus {
		writeError(w, errorf(http.StatusBadRequest, "invalid_family", "family %s is reserved for stream frames", family))
		return
	}
	if session != "" {
		if err := bus.ValidateSessionID(session); err != nil {
			writeError(w, err)
			return
		}
	}
	opts, err := h.parseStreamParams(r, family)
	if err != nil {
		writeError(w, err)
		return
	}
	if kind == kindWS && !access.IsWebSocketUpgrade(r) {
		writeError(w, errorf(http.StatusBadRequest, "websocket_required", "this route needs a WebSocket upgrade request"))
		return
	}
	if h.draining.Load() {
		writeError(w, errorf(http.StatusServiceUnavailable, "shutting_down", "the daemon is shutting down"))
		return
	}
	o := h.options()
	b := o.Hub.Global()
	if session != "" {
		s, ok := o.Hub.Session(session)
		if !ok {
			writeError(w, errorf(http.StatusNotFound, "not_found", "no such session %q", session))
			return
		}
		b = s.Bus
	}
	if r.Method == http.MethodHead {
		// The headers of the stream, not a stream: a HEAD response has no
		// body to end, so a stream would keep its connection busy for good.
		setSSEHeaders(w.Header())
		w.WriteHeader(http.StatusOK)
		return
	}
	h.streams.Add(1)
	n := h.open.Add(1)
	var sub *bus.Subscription
	// done ends the stream's bookkeeping. The transport calls it once the
	// stream is over, which may be after this handler has returned: a
	// stream on a taken-over connection outlives its request.
	done := func() {
		if sub != nil {
			sub.Close()
		}
		h.open.Add(-1)
		h.streams.Done()
	}
	if o.MaxStreams > 0 && n > int64(o.MaxStreams) {
		err = bus.ErrSubscriberLimit
	} else {
		// The subscription lives as long as the stream: done closes it.
		sub, err = b.Subscribe(nil, opts)
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
		refusal = bus.ErrorFrame(b.Session(), "subscriber_limit", "the subscriber limit is reached; retry later")
	}
	switch kind {
	case kindSSE:
		h.runSSE(w, r, sub, refusal, done)
	case kindWS:
		h.runWS(w, r, sub, refusal, done)
	}
}
