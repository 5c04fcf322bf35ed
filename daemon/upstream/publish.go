package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/localbus/localbus/bus"
)

// A publisher sends one exporter round's events to the stream as core
// NATS publishes, each with a reply subject of its own, and reads
// JetStream's acknowledgements on a subscription to them, in publish
// order. It is what JetStream's asynchronous publish does, without its
// cost per event (a future and its channels, a map, a JSON decoding of
// every acknowledgement), which was most of what an export cost.
type publisher struct {
	e       *exporter
	sub     *nats.Subscription
	replies chan *nats.Msg
	inbox   string        // the replies' subject, up to the publish's number
	changed chan struct{} // closed when the connection's state changes
	msg     nats.Msg      // reused: PublishMsg copies it out before returning
	id      []byte        // Nats-Msg-Id being built
	n       uint64        // publishes so far
}

// inflight is one publish waiting for its acknowledgement: its number in
// the round and the event's cursor.
type inflight struct {
	n  uint64
	at exportCursor
}

// newPublisher subscribes to the acknowledgements of a round of at most
// window publishes in flight.
func newPublisher(e *exporter, window int) (*publisher, error) {
	b := e.b
	p := &publisher{e: e, inbox: b.nc.NewInbox() + ".", replies: make(chan *nats.Msg, window+16)}
	b.mu.Lock()
	p.changed = b.connWait
	b.mu.Unlock()
	sub, err := b.nc.ChanSubscribe(p.inbox+"*", p.replies)
	if err != nil {
		return nil, err
	}
	p.sub = sub
	p.msg = nats.Msg{Subject: e.subject, Header: nats.Header{
		jsMsgID:          []string{""},
		jsExpectedStream: []string{b.cfg.Stream},
	}}
	return p, nil
}

// The headers of a JetStream publish.
const (
	jsMsgID          = "Nats-Msg-Id"
	jsExpectedStream = "Nats-Expected-Stream"
)

func (p *publisher) close() { p.sub.Unsubscribe() }

// send publishes f, whose cursor is at, and returns its number.
func (p *publisher) send(f *bus.Frame, at exportCursor) (uint64, error) {
	p.n++
	p.id = append(p.id[:0], p.e.b.cfg.Node...)
	p.id = append(append(append(p.id, '/'), p.e.session...), '/')
	p.id = append(append(p.id, at.epoch...), '/')
	p.id = strconv.AppendUint(p.id, at.id, 10)
	p.msg.Header[jsMsgID][0] = string(p.id)
	p.msg.Reply = p.inbox + strconv.FormatUint(p.n, 10)
	p.msg.Data = f.JSON()
	err := p.e.b.nc.PublishMsg(&p.msg)
	p.msg.Data = nil
	return p.n, err
}

// errConnChanged ends a round: the connection to NATS was lost or made
// again.
var errConnChanged = errors.New("the connection to NATS changed")

// errAckTimeout fails a round whose publish JetStream did not acknowledge
// in time.
var errAckTimeout = errors.New("no acknowledgement from JetStream in time")

// await waits for the acknowledgement of publish n, the oldest one
// unacknowledged, with t (stopped) for its timeout. It returns nil when
// ctx ends first.
func (p *publisher) await(ctx context.Context, n uint64, t *time.Timer) error {
	t.Reset(p.e.b.opts.AckTimeout)
	defer t.Stop()
	select {
	case m := <-p.replies:
		return checkAck(m, n)
	case <-t.C:
		return errAckTimeout
	case <-p.changed:
		return errConnChanged
	case <-ctx.Done():
		return nil
	}
}

// checkAck reads m, the reply to publish n: JetStream's acknowledgement
// (a duplicate is one too: the event was stored before), or its refusal,
// or a status without one (503: no stream takes the subject).
func checkAck(m *nats.Msg, n uint64) error {
	num, err := strconv.ParseUint(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:], 10, 64)
	switch {
	case err != nil || num != n:
		return fmt.Errorf("acknowledgement of publish %s where %d was due", m.Subject, n)
	case len(m.Data) == 0:
		return fmt.Errorf("no acknowledgement: status %s %s", m.Header.Get("Status"), m.Header.Get("Description"))
	case bytes.Contains(m.Data, []byte(`"error"`)):
		return fmt.Errorf("publish refused: %s", m.Data)
	}
	return nil
}

// publish sends one event; the first of a round waits for its
// acknowledgement, so that a server that refuses publishes (JetStream
// not ready yet) fails the round before anything else is sent.
func (e *exporter) publish(ctx context.Context, p *publisher, f *bus.Frame, at exportCursor, first bool, acks chan<- inflight, ackErr <-chan error) error {
	n, err := p.send(f, at)
	if err != nil {
		return err
	}
	if first {
		if err := p.await(ctx, n, time.NewTimer(time.Hour)); err != nil || ctx.Err() != nil {
			return err
		}
		e.advance(at)
		return nil
	}
	select {
	case acks <- inflight{n, at}:
		return nil
	case err := <-ackErr:
		return err
	case <-ctx.Done():
		return nil
	}
}

// readAcks advances the cursor over acknowledgements in publish order,
// and stops advancing at the first failure, which it reports on ackErr.
// The cursor is written by a goroutine of its own (a journal write waits
// for fsync), so reading acknowledgements never waits for the disk.
func (e *exporter) readAcks(ctx context.Context, p *publisher, acks <-chan inflight, ackErr chan<- error) {
	kick := make(chan struct{}, 1)
	saved := make(chan struct{})
	go func() {
		defer close(saved)
		for range kick {
			e.save()
		}
	}()
	defer func() {
		close(kick)
		<-saved
	}()
	failed := false
	last := time.Now()
	t := time.NewTimer(time.Hour)
	t.Stop()
	for in := range acks {
		if failed {
			continue
		}
		if err := p.await(ctx, in.n, t); err != nil || ctx.Err() != nil {
			failed = true
			if err != nil {
				ackErr <- err
			}
			continue
		}
		e.advance(in.at)
		if len(acks) == 0 || time.Since(last) >= e.b.opts.CursorInterval {
			select {
			case kick <- struct{}{}:
			default: // a write is pending; it takes the newest cursor
			}
			last = time.Now()
		}
	}
}

// advance moves the cursor to at, acknowledged; an acknowledgement of an
// event at or before the cursor (a resend JetStream found a duplicate of)
// counts once.
func (e *exporter) advance(at exportCursor) {
	e.mu.Lock()
	if e.has && at.epoch == e.acked.epoch && at.id <= e.acked.id {
		e.mu.Unlock()
		return
	}
	e.acked, e.has = at, true
	e.exported++
	e.mu.Unlock()
	e.b.exported.Add(1)
}
