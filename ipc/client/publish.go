package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"time"

	"github.com/localbus/localbus/ipc/wire"
)

// An Event is one event to publish.
type Event struct {
	// Type is family:name, e.g. "build:step".
	Type string `json:"type"`
	// Data is the payload, marshalled with encoding/json; nil publishes
	// null. Pass a json.RawMessage for JSON you already have.
	Data any `json:"data"`
}

// PublishReply is the daemon's answer to a publish: the ids it assigned, in
// order, and the session's last id.
type PublishReply = wire.PublishReply

// Publish publishes one event of type typ with data (marshalled with
// encoding/json; pass a json.RawMessage for JSON you already have) to
// session, and returns its id. With the daemon's auto_create_sessions on, a
// missing session is created.
func (c *Client) Publish(ctx context.Context, session, typ string, data any) (uint64, error) {
	r, err := c.PublishBatch(ctx, session, []Event{{Type: typ, Data: data}})
	if err != nil {
		return 0, err
	}
	if len(r.IDs) != 1 {
		return 0, fmt.Errorf("client: publish answered %d ids for one event", len(r.IDs))
	}
	return r.IDs[0], nil
}

// PublishBatch publishes events to session in one request: all of them or,
// on any error, none. The daemon takes at most Caps().Limits.MaxBatch
// events (1000) at once. The request carries a fresh Idempotency-Key, and
// is sent again with it when the connection drops before the reply (see
// publish), so a daemon restarting under it never publishes it twice.
func (c *Client) PublishBatch(ctx context.Context, session string, events []Event) (PublishReply, error) {
	body, err := json.Marshal(events)
	if err != nil {
		return PublishReply{}, fmt.Errorf("client: encoding events: %w", err)
	}
	if len(events) == 1 {
		// The single-event form: smaller, and what a script would send.
		body = bytes.TrimSuffix(bytes.TrimPrefix(body, []byte("[")), []byte("]"))
	}
	return c.publish(ctx, session, wire.ContentTypeJSON, body)
}

// PublishNDJSON publishes newline-delimited JSON events, one
// {"type","data"} object per line, read from body to its end. It is one
// batch: all or nothing, at most Caps().Limits.MaxBatch events. For more
// events, or a producer that writes them over time, use PublishStream.
func (c *Client) PublishNDJSON(ctx context.Context, session string, body io.Reader) (PublishReply, error) {
	b, err := io.ReadAll(body)
	if err != nil {
		return PublishReply{}, fmt.Errorf("client: reading events: %w", err)
	}
	return c.publish(ctx, session, wire.ContentTypeNDJSON, b)
}

// Retries of a publish whose connection dropped: publishRetries more
// attempts, waiting publishBackoff, doubled each time (about 3 s in all,
// room for a daemon to restart).
const (
	publishRetries = 5
	publishBackoff = 100 * time.Millisecond
)

// publish sends one publish request with a fresh Idempotency-Key, and sends
// it again with the same key when the connection dropped before the reply
// (a daemon shutting down closes kept-alive connections) or the daemon
// answered 503 shutting_down: the daemon publishes a key at most once
// within its idempotency_window, so a retry never publishes twice. A daemon
// that cannot be reached at the first attempt is reported at once.
func (c *Client) publish(ctx context.Context, session, contentType string, body []byte) (PublishReply, error) {
	hdr := http.Header{"Content-Type": {contentType}}
	if c.ClientID != "" {
		hdr.Set(wire.HeaderClientID, c.ClientID)
	}
	hdr.Set(wire.HeaderIdempotencyKey, newIdempotencyKey())
	wait := publishBackoff
	for attempt := 0; ; attempt++ {
		var r PublishReply
		err := c.do(ctx, http.MethodPost, wire.SessionEventsPath(session), hdr, body, &r)
		if err == nil || attempt == publishRetries || !retryablePublish(err, attempt) {
			return r, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return PublishReply{}, ctx.Err()
		case <-t.C:
		}
		wait *= 2
	}
}

// retryablePublish reports whether a publish that failed with err may be
// sent again with its key: the connection broke before the reply, the
// daemon was shutting down, or (after the first attempt) it is not back
// yet.
func retryablePublish(err error, attempt int) bool {
	var ue *UnreachableError
	if errors.As(err, &ue) {
		return attempt > 0
	}
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status == http.StatusServiceUnavailable && (ae.Code == wire.CodeShuttingDown || ae.Code == wire.CodeNotReady)
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNREFUSED)
}

// newIdempotencyKey returns a random key of 22 characters.
func newIdempotencyKey() string {
	var b [16]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
