package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/localbus/localbus/ipc/wire"
)

// Sentinels an *APIError unwraps to, for errors.Is.
var (
	ErrUnauthorized = errors.New("client: unauthorized")   // 401: no or invalid credentials
	ErrForbidden    = errors.New("client: forbidden")      // 403: the credentials lack the scope
	ErrNotFound     = errors.New("client: not found")      // 404: no such session or route
	ErrConflict     = errors.New("client: already exists") // 409: the session exists
)

// ErrClosed is returned by Stream.Next after Close.
var ErrClosed = errors.New("client: stream closed")

// An APIError is a refusal by the daemon: an HTTP error status with the JSON
// body of SPEC §6, {"error":{"code","message"}}. It unwraps to ErrUnauthorized,
// ErrForbidden, ErrNotFound or ErrConflict for those statuses.
type APIError struct {
	Status  int    // the HTTP status, e.g. 404
	Code    string // the daemon's machine-readable code, e.g. "not_found"
	Message string // the daemon's explanation, for people
}

// Error returns "client: STATUS CODE: MESSAGE".
func (e *APIError) Error() string {
	return fmt.Sprintf("client: %d %s: %s", e.Status, e.Code, e.Message)
}

// Unwrap returns the sentinel of the status, or nil.
func (e *APIError) Unwrap() error {
	switch e.Status {
	case http.StatusUnauthorized:
		return ErrUnauthorized
	case http.StatusForbidden:
		return ErrForbidden
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusConflict:
		return ErrConflict
	}
	return nil
}

// Refused reports whether the daemon refused the caller's credentials or
// scopes (401 or 403).
func (e *APIError) Refused() bool {
	return e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden
}

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// apiError builds the *APIError of a non-2xx response from its body. A body
// that is not the daemon's JSON (a proxy's page, say) becomes the message,
// shortened.
func apiError(status int, body io.Reader) *APIError {
	b, _ := io.ReadAll(io.LimitReader(body, maxErrorBody))
	e := &APIError{Status: status}
	var eb wire.ErrorBody
	if json.Unmarshal(b, &eb) == nil && eb.Error.Code != "" {
		e.Code, e.Message = eb.Error.Code, eb.Error.Message
		return e
	}
	e.Code = strings.ToLower(strings.ReplaceAll(http.StatusText(status), " ", "_"))
	msg := strings.TrimSpace(string(b))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	e.Message = msg
	return e
}

// An UnreachableError means the daemon could not be reached: nothing listens
// on the socket or address, the socket file is missing, or permission to it
// is denied. Err is the dial error.
type UnreachableError struct {
	Addr string // "unix:/run/localbus/localbus.sock" or "tcp:127.0.0.1:8001"
	Err  error
}

// Error names the address and the dial error.
func (e *UnreachableError) Error() string {
	return fmt.Sprintf("client: cannot reach the daemon at %s: %v", e.Addr, e.Err)
}

// Unwrap returns the dial error.
func (e *UnreachableError) Unwrap() error { return e.Err }

// asUnreachable returns err as an *UnreachableError when it is a failure to
// dial, so that a caller-supplied HTTP client's dial errors classify too.
func asUnreachable(err error, addr string) error {
	var ue *UnreachableError
	if errors.As(err, &ue) {
		return ue
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return &UnreachableError{Addr: addr, Err: oe}
	}
	return err
}

// An EndedError means the daemon ended a stream for good: its session was
// deleted (Reason "session_deleted", after the stream:closed frame),
// another stream took its consumer over or the consumer was deleted
// (Reason "replaced", after the stream:closed frame; Err is ErrReplaced),
// the WebSocket was closed with 1000 (Reason "closed"), or the session
// does not exist (Reason "not_found", Err the *APIError). Reconnecting
// would not help.
type EndedError struct {
	Reason  string
	Session string // the stream's session, "" for the global or a family stream
	Err     error  // the cause, if any
}

// Error says which stream ended and why.
func (e *EndedError) Error() string {
	what := "stream"
	if e.Session != "" {
		what = fmt.Sprintf("stream of session %q", e.Session)
	}
	switch e.Reason {
	case "session_deleted":
		return fmt.Sprintf("client: %s ended: the session was deleted", what)
	case "not_found":
		return fmt.Sprintf("client: %s ended: no such session", what)
	case "replaced":
		return fmt.Sprintf("client: %s ended: another stream took its consumer over, or it was deleted", what)
	}
	if e.Err != nil {
		return fmt.Sprintf("client: %s ended by the daemon: %v", what, e.Err)
	}
	return fmt.Sprintf("client: %s ended by the daemon (%s)", what, e.Reason)
}

// Unwrap returns the cause, nil if none.
func (e *EndedError) Unwrap() error { return e.Err }

// A URLError means Client.URL is not an http:// or https:// URL with a
// host; every call returns it.
type URLError struct {
	URL string
}

// Error names the URL and what is expected.
func (e *URLError) Error() string {
	return fmt.Sprintf("client: URL %q: want http://HOST:PORT", e.URL)
}
