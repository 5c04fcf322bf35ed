package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/localbus/localbus/ipc/wire"
)

// Consumers (SPEC §2.4): a named cursor on one session that the daemon
// keeps for a reader. Follow one with StreamOptions.Consumer; acknowledge
// with Stream.Ack (ack mode explicit); list, acknowledge and forget them
// by name with the Client's methods below.

// AckMode is a consumer's ack mode, fixed when the consumer is created.
type AckMode string

// The ack modes.
const (
	// AckAuto: the consumer's position follows what the daemon wrote to
	// its stream (events a filter skipped included), stored at least once
	// a second and when the stream ends: after a crash of the daemon at
	// most the last second comes again.
	AckAuto AckMode = wire.AckAuto
	// AckExplicit: the position moves only when the reader acknowledges
	// (Stream.Ack): everything after the last answered ack comes again on
	// the next stream, so nothing is lost when the reader dies mid-event.
	AckExplicit AckMode = wire.AckExplicit
)

// ErrReplaced is what the *EndedError of a stream whose consumer another
// stream took over, or that was deleted, unwraps to: reconnecting would
// take it back from the stream that now reads it, so the stream ends for
// good. Test for it with errors.Is.
var ErrReplaced = errors.New("client: another stream took the consumer over, or it was deleted")

// Consumer is one of a session's consumers, as Client.Consumers lists it.
type Consumer = wire.Consumer

// consumerStarted drops, once a connection of a consumer's stream is
// open, where a new consumer starts: the consumer exists from then on, and
// the daemon would refuse it (409 consumer_exists). It runs on the
// goroutine that connects.
func (s *Stream) consumerStarted() {
	if s.opts.Consumer == "" {
		return
	}
	s.query.Del(wire.ParamSince)
	s.query.Del(wire.ParamSinceTime)
	s.query.Del(wire.ParamEpoch)
}

// Ack acknowledges, for the stream's consumer, every event up to id, in
// the epoch of the events Next returns (Cursor's): call it from the loop
// that handles them, once id is handled, before Next returns a stream:ready
// of another epoch. It returns once the daemon has stored the ack, which
// then survives a crash of the daemon; the next stream of the consumer
// starts after it. It sends POST …/consumers/{name}/ack with the epoch,
// whatever the stream's transport, so an ack from before the daemon's ids
// started again never skips events of the new sequence: the daemon
// refuses it with an *APIError, 409 epoch_mismatch, that unwraps to
// ErrConflict. Ack is safe to call from any goroutine.
//
// It needs StreamOptions.Consumer, with ack mode explicit (an auto
// consumer refuses it: 409 consumer_not_explicit); an id above the
// session's last is a 400, a lower id than the acknowledged one moves
// nothing.
func (s *Stream) Ack(ctx context.Context, id uint64) error {
	if s.opts.Consumer == "" {
		return errors.New("client: Ack acknowledges for a consumer: set StreamOptions.Consumer")
	}
	s.mu.Lock()
	epoch := s.epoch
	s.mu.Unlock()
	_, err := s.c.Ack(ctx, s.opts.Session, s.opts.Consumer, id, epoch)
	return err
}

// Ack acknowledges every event up to id for the explicit consumer named
// consumer of session, with the epoch id belongs to ("" sends none, and
// the id is taken in the consumer's epoch). It returns the consumer's
// acknowledged id once stored: id, or a higher one it had already. See
// Stream.Ack for the refusals.
func (c *Client) Ack(ctx context.Context, session, consumer string, id uint64, epoch string) (uint64, error) {
	body, _ := json.Marshal(wire.AckRequest{ID: id, Epoch: epoch})
	var r wire.AckReply
	if err := c.do(ctx, http.MethodPost, wire.ConsumerAckPath(session, consumer), nil, body, &r); err != nil {
		return 0, err
	}
	return r.AckedID, nil
}

// Consumers lists the consumers of session, sorted by name.
func (c *Client) Consumers(ctx context.Context, session string) ([]Consumer, error) {
	var list []Consumer
	if err := c.do(ctx, http.MethodGet, wire.SessionConsumersPath(session), nil, nil, &list); err != nil {
		return nil, err
	}
	return list, nil
}

// DeleteConsumer forgets the consumer named name of session; a stream
// reading through it ends with ErrReplaced. It needs the admin scope. An
// unknown consumer is an *APIError that unwraps to ErrNotFound.
func (c *Client) DeleteConsumer(ctx context.Context, session, name string) error {
	return c.do(ctx, http.MethodDelete, wire.ConsumerPath(session, name), nil, nil, nil)
}
