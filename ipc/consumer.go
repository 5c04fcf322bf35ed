package ipc

import (
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/hub"
)

// A stream through a consumer (SPEC §2.4): the session stream of
// ?consumer=NAME starts after the consumer's acknowledged id, not after
// a cursor of the client's, and holds the consumer's lease until it ends.
// Under ack mode auto the stream's writer moves the position as it writes
// (Subscription.Through, so events the filter skipped count) and stores
// it at most once a second and at the end; under explicit the reader
// acknowledges, on the WebSocket ({"op":"ack","id":N}) or with a POST
// (consumer_routes.go). Another stream naming the consumer takes it over,
// and this one ends with stream:closed replaced, final.

// consumerStream is the consumer a stream reads through. The stream's
// writer owns it; ack, which the WebSocket's control reader calls, and
// replaced are safe from any goroutine. Every method is a no-op on a nil
// *consumerStream (a stream without a consumer).
type consumerStream struct {
	h     *Handler
	sess  *hub.Session
	lease *hub.Lease
	log   *streamLog
	// timer stores an auto position at most once a second (hub.SyncEvery)
	// after the writer moved it; armed while it runs.
	timer *time.Timer
	armed bool
	// acks stores the acks of an explicit consumer's WebSocket stream;
	// nil on any other.
	acks *acker
}

// attachConsumer attaches the stream that p asks for to its consumer on
// session s, creating the consumer if needed, and sets p.opts to start
// after its acknowledged id with stream:ready's consumer object. On an
// existing consumer ?since= and ?sinceTime= are refused
// (hub.ErrConsumerExists), and so is the other ack mode.
func (h *Handler) attachConsumer(s *hub.Session, p *streamParams, c Caller, sl *streamLog) (*consumerStream, error) {
	req := hub.AttachRequest{Name: p.consumer, Ack: p.ack, Epoch: s.Bus.Epoch(), LastID: s.Bus.LastID(), Peer: c.Share, Now: time.Now()}
	switch {
	case p.opts.Cursor != nil:
		req.Since, req.SinceEpoch = p.opts.Cursor, p.opts.Epoch
	case !p.opts.Since.IsZero():
		at := s.Bus.CursorAt(p.opts.Since)
		req.Since = &at
	}
	l, err := s.Consumers().Attach(req)
	if err != nil {
		return nil, err
	}
	st := l.Start()
	acked := st.AckedID
	p.opts.Cursor, p.opts.Epoch, p.opts.Since, p.opts.CursorIgnored = &acked, st.Epoch, time.Time{}, false
	p.opts.Consumer = &bus.ReadyConsumer{Name: st.Name, AckedID: acked, Ack: string(st.Ack), Created: l.Created()}
	cs := &consumerStream{h: h, sess: s, lease: l, log: sl}
	switch {
	case st.Ack == hub.AckAuto:
		cs.timer = time.NewTimer(hub.SyncEvery)
		cs.timer.Stop()
	case sl.transport == transportWS:
		cs.acks = newAcker(cs)
	}
	return cs, nil
}

// name returns the consumer's name, "" for none.
func (cs *consumerStream) name() string {
	if cs == nil {
		return ""
	}
	return cs.lease.Name()
}

// replaced is closed when another stream took the consumer over or it was
// deleted; nil (never ready) without a consumer.
func (cs *consumerStream) replaced() <-chan struct{} {
	if cs == nil {
		return nil
	}
	return cs.lease.Done()
}

// syncDue is ready when an auto position is due to be stored; nil when
// nothing waits.
func (cs *consumerStream) syncDue() <-chan time.Time {
	if cs == nil || !cs.armed {
		return nil
	}
	return cs.timer.C
}

// wrote moves an auto position to what the writer just wrote of sub (the
// events its filter skipped included) and arms the timer that stores it.
func (cs *consumerStream) wrote(sub *bus.Subscription) {
	if cs == nil || cs.timer == nil {
		return
	}
	if cs.lease.Wrote(sub.Through()) && !cs.armed {
		cs.timer.Reset(hub.SyncEvery)
		cs.armed = true
	}
}

// sync stores an auto position once its timer fired.
func (cs *consumerStream) sync() {
	cs.armed = false
	if err := cs.lease.Sync(time.Now()); err != nil {
		cs.log.log.Error("storing a consumer's position", append(cs.log.attrs, "consumer", cs.name(), "err", err)...)
	}
}

// end lets the consumer go once the stream is over, storing it a last
// time.
func (cs *consumerStream) end() {
	if cs == nil {
		return
	}
	if cs.timer != nil {
		cs.timer.Stop()
	}
	if err := cs.lease.End(time.Now()); err != nil {
		cs.log.log.Error("storing a consumer at the end of its stream", append(cs.log.attrs, "consumer", cs.name(), "err", err)...)
	}
}
