package ipc

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/bus/share"
	"github.com/localbus/localbus/ipc/wire"
	"github.com/localbus/localbus/ipc/wire/grammar"
)

// Error is an HTTP error with the JSON body of SPEC §6:
// {"error":{"code":"…","message":"…"}}. Every refusal the router makes goes
// through it, so a client can rely on the shape.
type Error struct {
	Status  int    // HTTP status
	Code    string // machine-readable, e.g. "invalid_type", "not_found"
	Message string // for people
	cause   error  // an internal error's detail: logged, never sent
	// refusal is the fair-shares refusal behind the error, if any: counted
	// in localbus_share_refusals_total by pool and share.
	refusal *share.Refusal
}

func (e *Error) Error() string { return fmt.Sprintf("ipc: %d %s: %s", e.Status, e.Code, e.Message) }

// errorf builds an *Error.
func errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// asError maps any error the router meets to the *Error it answers with.
func asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var ie *bus.InputError
	if errors.As(err, &ie) {
		return &Error{Status: http.StatusBadRequest, Code: "invalid_" + ie.Field, Message: ie.Message()}
	}
	var ge *grammar.Error
	if errors.As(err, &ge) {
		return &Error{Status: http.StatusBadRequest, Code: "invalid_" + ge.Field, Message: ge.Message()}
	}
	var r *share.Refusal
	if errors.As(err, &r) {
		e := shareError(r, err)
		e.refusal = r
		return e
	}
	switch {
	case errors.Is(err, hub.ErrNotFound), errors.Is(err, bus.ErrClosed):
		return errorf(http.StatusNotFound, wire.CodeNotFound, "no such session")
	case errors.Is(err, hub.ErrExists):
		return errorf(http.StatusConflict, wire.CodeSessionExists, "session already exists")
	case errors.Is(err, hub.ErrReadOnly):
		return errorf(http.StatusConflict, wire.CodeReadOnly, "this session mirrors another node's session: publish there")
	case errors.Is(err, hub.ErrRetry):
		return errorf(http.StatusServiceUnavailable, wire.CodeBusy, "the session was deleted while this publish ran; nothing was published, retry shortly")
	case errors.Is(err, hub.ErrKeyReused):
		return errorf(http.StatusConflict, wire.CodeIdempotencyKeyReused, "this %s was used on the session with a different request; nothing was published", wire.HeaderIdempotencyKey)
	case errors.Is(err, hub.ErrAutoSessionLimit):
		return errorf(http.StatusTooManyRequests, wire.CodeSessionLimit, "the daemon's limit of sessions created by a publish is reached; an admin can still create one")
	case errors.Is(err, hub.ErrSessionLimit):
		return errorf(http.StatusTooManyRequests, wire.CodeSessionLimit, "the daemon's session limit is reached")
	case errors.Is(err, bus.ErrSubscriberLimit):
		return errorf(http.StatusTooManyRequests, wire.CodeSubscriberLimit, "the subscriber limit is reached")
	case errors.Is(err, hub.ErrConsumerLimit):
		return errorf(http.StatusTooManyRequests, wire.CodeConsumerLimit, "the session has as many consumers as max_consumers allows; delete one, or let one expire (consumer_ttl)")
	case errors.Is(err, hub.ErrConsumerExists):
		return errorf(http.StatusConflict, wire.CodeConsumerExists, "the consumer exists: it starts after its acknowledged id; since and sinceTime apply only to a new one (delete it to start again)")
	case errors.Is(err, hub.ErrConsumerAckMode):
		return errorf(http.StatusConflict, wire.CodeConsumerAckMode, "the consumer was created with the other ack mode; leave ack out to use its own")
	case errors.Is(err, hub.ErrConsumerNotExplicit):
		return errorf(http.StatusConflict, wire.CodeConsumerNotExplicit, "the consumer acknowledges automatically (ack=auto): its position follows its stream")
	case errors.Is(err, hub.ErrEpochMismatch):
		return errorf(http.StatusConflict, wire.CodeEpochMismatch, "the ack's epoch is not the consumer's: the session's ids started again; nothing was acknowledged, read the consumer's stream again")
	case errors.Is(err, hub.ErrAckAboveLastID):
		return errorf(http.StatusBadRequest, wire.CodeInvalidID, "the id is above the session's lastId")
	case errors.Is(err, hub.ErrNoConsumer):
		return errorf(http.StatusNotFound, wire.CodeNotFound, "no such consumer")
	case errors.Is(err, hub.ErrConsumerName):
		return errorf(http.StatusBadRequest, wire.CodeInvalidConsumer, "%s", err.Error())
	case errors.Is(err, bus.ErrDiskFull):
		return errorf(http.StatusInsufficientStorage, wire.CodeDiskFull, "the journal's disk is full; nothing was published")
	case errors.Is(err, hub.ErrClosed), errors.Is(err, bus.ErrStoreClosed):
		return errorf(http.StatusServiceUnavailable, wire.CodeShuttingDown, "the daemon is shutting down")
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return errorf(http.StatusRequestEntityTooLarge, wire.CodeBodyTooLarge, "request body larger than %d bytes", mbe.Limit)
	}
	// The detail of an unexpected error may name files, buses or the
	// daemon's internals: it goes to the log (ServeHTTP), the client gets
	// a generic message.
	return &Error{Status: http.StatusInternalServerError, Code: wire.CodeInternal, Message: "internal error; the daemon's log has the details", cause: err}
}

// shareError is the answer to a draw a pool with fair shares refused:
// the pool's own refusal, saying whose share it was.
func shareError(r *share.Refusal, err error) *Error {
	if r.Kind != share.ByShare {
		return asError(errors.Unwrap(r))
	}
	switch {
	case errors.Is(err, hub.ErrAutoSessionLimit):
		return errorf(http.StatusTooManyRequests, wire.CodeSessionLimit, "this peer holds its share of the sessions a publish may create (%d, peer_share); publish to sessions it has, or let some expire", r.Limit)
	case errors.Is(err, bus.ErrSubscriberLimit):
		return errorf(http.StatusTooManyRequests, wire.CodeSubscriberLimit, "this peer holds its share of the bus's subscribers (%d, peer_share)", r.Limit)
	case errors.Is(err, hub.ErrConsumerLimit):
		return errorf(http.StatusTooManyRequests, wire.CodeConsumerLimit, "this peer holds its share of the session's consumers (%d, peer_share); delete one of its consumers, or let one expire", r.Limit)
	}
	e := asError(errors.Unwrap(r))
	e.Message = fmt.Sprintf("this peer holds its share (%d, peer_share): %s", r.Limit, e.Message)
	return e
}

// writeError answers with err as a JSON error body.
func writeError(w http.ResponseWriter, err error) {
	e := asError(err)
	noteError(w, e)
	if e.Code == wire.CodeBusy {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, e.Status, wire.ErrorBody{Error: wire.ErrorDetail{Code: e.Code, Message: e.Message}})
}

// writeJSON answers with v as a one-line JSON body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"response encoding failed"}}`)
	}
	setJSONHeaders(w)
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// The values of the headers every JSON reply carries, shared by every
// reply: net/http only reads them (and copies them when it snapshots the
// header), so setting them costs no allocation of its own.
var (
	headerJSON    = []string{wire.ContentTypeJSON}
	headerNoStore = []string{"no-store"}
)

// setJSONHeaders sets the Content-Type and Cache-Control of a JSON reply.
func setJSONHeaders(w http.ResponseWriter) {
	h := w.Header()
	h["Content-Type"] = headerJSON
	h["Cache-Control"] = headerNoStore
}

// inputReason returns why input was refused: the reason of an
// *bus.InputError or a *grammar.Error, else the error's text.
func inputReason(err error) string {
	var ie *bus.InputError
	if errors.As(err, &ie) {
		return ie.Reason
	}
	var ge *grammar.Error
	if errors.As(err, &ge) {
		return ge.Reason
	}
	return err.Error()
}
