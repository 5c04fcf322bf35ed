package ipc

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/localbus/localbus/bus/share"
	"github.com/localbus/localbus/ipc/wire"
)

// reqWriter is the ResponseWriter every request gets from ServeHTTP: it
// notes the status, the error code and the caller, so that one place counts
// the request in the metrics and logs a refusal. Unwrap lets
// http.ResponseController (flushes, deadlines, hijacking) reach the
// writer beneath.
type reqWriter struct {
	http.ResponseWriter
	status int
	code   string // the JSON error code answered, if any
	cause  error  // the detail of an internal error, for the log only
	caller Caller // who made the request, once authenticated
	// refusal is the fair-shares refusal the request was answered with,
	// if any.
	refusal *share.Refusal
	// body is the request's body under its timeout (limitBodyTime), kept
	// here so that it needs no allocation of its own.
	body timedBody
}

func (w *reqWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *reqWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap returns the ResponseWriter beneath, for http.ResponseController.
func (w *reqWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// reqWriterOf returns the reqWriter under w, if any.
func reqWriterOf(w http.ResponseWriter) *reqWriter {
	for {
		switch x := w.(type) {
		case *reqWriter:
			return x
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return nil
		}
	}
}

// noteError records the error a request is answered with.
func noteError(w http.ResponseWriter, e *Error) {
	if rw := reqWriterOf(w); rw != nil {
		rw.code, rw.cause, rw.refusal = e.Code, e.cause, e.refusal
	}
}

// noteCaller records who made a request.
func noteCaller(w http.ResponseWriter, c Caller) {
	if rw := reqWriterOf(w); rw != nil {
		rw.caller = c
	}
}

// Refusal reasons, the reason label of localbus_refusals_total and the
// class of a refused request in the log.
const (
	reasonAuth        = "auth"        // 401, 403, 421: credentials, scope, Host or Origin
	reasonLimit       = "limit"       // 413, 429, 431, the in-band subscriber limit, 503 busy and 408 body_too_slow
	reasonBadInput    = "bad_input"   // 400, 404, 405, 408
	reasonDiskFull    = "disk_full"   // 507
	reasonUnavailable = "unavailable" // 503: shutting down, not ready
	reasonInternal    = "internal"    // 500
)

// refusalReason classifies an error status; "" for a success.
func refusalReason(status int) string {
	switch {
	case status < 400:
		return ""
	case status == http.StatusUnauthorized, status == http.StatusForbidden, status == http.StatusMisdirectedRequest:
		return reasonAuth
	case status == http.StatusRequestEntityTooLarge, status == http.StatusTooManyRequests, status == http.StatusRequestHeaderFieldsTooLarge:
		return reasonLimit
	case status == http.StatusInsufficientStorage:
		return reasonDiskFull
	case status == http.StatusServiceUnavailable:
		return reasonUnavailable
	case status >= 500:
		return reasonInternal
	}
	return reasonBadInput
}

// observe counts a request that ended with rw's status under route (a
// pattern of the route table, or "other") and logs it if it was refused.
func (h *Handler) observe(r *http.Request, rw *reqWriter, route string) {
	status := rw.status
	if status == 0 {
		status = http.StatusOK // hijacked before any write: a stream's 200 written by hand
	}
	h.metrics.request(route, status)
	reason := refusalReason(status)
	if reason == "" {
		return
	}
	code := rw.code
	if code == "" {
		code = strconv.Itoa(status)
	}
	if code == wire.CodeBusy || code == wire.CodeBodyTooSlow {
		// A 503 or a 408, but a limit refused it: the cap on bodies in
		// flight, or the slow-body rule that keeps a peer from holding
		// a place there.
		reason = reasonLimit
	}
	h.metrics.refused(reason, code)
	if rw.refusal != nil {
		h.metrics.shareRefused(rw.refusal)
	}
	h.logRefusal(r, rw, status, reason, code)
}

// logRefusal logs a refused request, at most one line per error code and
// peer class (a socket peer's uid, or TCP) per second (the next one says
// how many were left out), so that no client can flood the log: auth and limit refusals as warnings, internal errors
// (with their detail, which the client never sees) as errors, bad input
// and unavailability at debug.
func (h *Handler) logRefusal(r *http.Request, rw *reqWriter, status int, reason, code string) {
	level := slog.LevelDebug
	switch reason {
	case reasonAuth, reasonLimit, reasonDiskFull:
		level = slog.LevelWarn
	case reasonInternal:
		level = slog.LevelError
	}
	log := h.options().Logger
	if !log.Enabled(context.Background(), level) {
		return
	}
	suppressed, ok := h.refusalLimiter.allow(code+" "+peerClass(r), time.Now())
	if !ok {
		return
	}
	attrs := []any{"reason", reason, "method", r.Method, "path", r.URL.Path, "status", status, "code", code}
	if rw == nil {
		rw = &reqWriter{}
	}
	attrs = append(attrs, peerAttrs(r, rw.caller)...)
	if rw.refusal != nil {
		attrs = append(attrs, "pool", rw.refusal.Pool, "share", rw.refusal.Kind.String())
	}
	if rw.cause != nil {
		attrs = append(attrs, "err", rw.cause)
	}
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	log.Log(context.Background(), level, "refused", attrs...)
}

// logServed logs, at debug level, a line that a request the router served
// causes (a malformed Last-Event-ID, a stream opening or closing), naming
// the peer, under the refusals' limiter: at most one line per kind and
// peer class a second (the next one says how many were left out), so no
// client can flood the log with them either.
func (h *Handler) logServed(r *http.Request, c Caller, msg, kind string, attrs ...any) {
	log := h.options().Logger
	if !log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	suppressed, ok := h.refusalLimiter.allow(kind+" "+peerClass(r), time.Now())
	if !ok {
		return
	}
	attrs = append(attrs, peerAttrs(r, c)...)
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	log.Debug(msg, attrs...)
}

// peerClass is who a refusal is rate-limited for: a Unix socket peer's
// uid, or every TCP client together (a remote address is no identity, and
// a client could open any number of them).
func peerClass(r *http.Request) string {
	switch ci := connFrom(r.Context()); {
	case ci.peer != nil:
		return "uid=" + strconv.FormatUint(uint64(ci.peer.UID), 10)
	case ci.unix:
		return "unix"
	}
	return "tcp"
}

// peerAttrs are the log attributes that say who made a request: the peer's
// uid and pid on a Unix socket, the remote address on TCP, and the key's
// name, never a secret.
func peerAttrs(r *http.Request, c Caller) []any {
	var attrs []any
	if ci := connFrom(r.Context()); ci.peer != nil {
		attrs = append(attrs, "peer_uid", ci.peer.UID, "peer_pid", ci.peer.PID)
	} else if !ci.unix {
		attrs = append(attrs, "remote", r.RemoteAddr)
	}
	if c.KeyName != "" {
		attrs = append(attrs, "key", c.KeyName)
	}
	return attrs
}

// rateLimiter lets one event per key through per interval and counts the
// others. It is safe for concurrent use.
type rateLimiter struct {
	interval time.Duration

	mu   sync.Mutex // guards keys
	keys map[string]*rateState
}

type rateState struct {
	last       time.Time
	suppressed int
}

// allow reports whether an event of key at now may be logged and, if so,
// how many of its kind were suppressed since the last one that was. The
// keys are the router's error codes, a small fixed set.
func (l *rateLimiter) allow(key string, now time.Time) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys == nil {
		l.keys = make(map[string]*rateState)
	}
	st := l.keys[key]
	if st == nil {
		st = &rateState{}
		l.keys[key] = st
	} else if now.Sub(st.last) < l.interval {
		st.suppressed++
		return 0, false
	}
	suppressed, st.suppressed, st.last = st.suppressed, 0, now
	return suppressed, true
}
