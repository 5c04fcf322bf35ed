package ipc

import (
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/localbus/localbus/bus/hub"
)

// An acker stores the acks of an explicit consumer's WebSocket stream
// ({"op":"ack","id":N}, SPEC §5). The control reader hands it each ack
// (offer), which never blocks; the acker's goroutine stores the highest
// id asked for, one store at a time, so acks that arrive during a store
// share the next one; and the stream's writer sends the reply,
// {"op":"acked","id":N} with the consumer's acknowledged id, which stands
// for every ack up to N. A reply the writer has not sent yet is replaced
// by the next one.
//
// The reader must never wait for the writer here: a client that reads and
// writes in one loop, and acks each event as it comes, stops reading while
// its socket cannot take another ack; a reader waiting for the writer,
// which waits for that client to read, would stop the stream for good.
type acker struct {
	cs    *consumerStream
	wake  chan struct{} // an ack waits to be stored; capacity 1
	ready chan struct{} // a reply waits for the writer; capacity 1

	mu    sync.Mutex // guards the fields below
	want  uint64     // the highest id asked for and not stored yet
	asked int        // acks asked for since the last store
	reply []byte     // the reply the writer has not sent yet
}

func newAcker(cs *consumerStream) *acker {
	return &acker{cs: cs, wake: make(chan struct{}, 1), ready: make(chan struct{}, 1)}
}

// offer asks for id to be stored.
func (a *acker) offer(id uint64) {
	a.mu.Lock()
	a.want = max(a.want, id)
	a.asked++
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// run stores what is offered until done is closed.
func (a *acker) run(done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case <-a.wake:
		}
		a.mu.Lock()
		id, n := a.want, a.asked
		a.want, a.asked = 0, 0
		a.mu.Unlock()
		if n == 0 {
			continue
		}
		reply := a.cs.store(id, n)
		a.mu.Lock()
		a.reply = reply
		a.mu.Unlock()
		select {
		case a.ready <- struct{}{}:
		default:
		}
	}
}

// take returns the reply waiting for the writer, nil for none.
func (a *acker) take() []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.reply
	a.reply = nil
	return r
}

// acked is ready when a reply waits for the writer; nil (never ready)
// without an acker.
func (cs *consumerStream) acked() <-chan struct{} {
	if cs == nil || cs.acks == nil {
		return nil
	}
	return cs.acks.ready
}

// ackedReply is the answer to ack control frames, once stored: the
// consumer's acknowledged id, which an ack below it does not lower.
type ackedReply struct {
	Op string `json:"op"`
	ID uint64 `json:"id"`
}

// ack takes {"op":"ack","id":N} from the WebSocket's reader: it answers at
// once what is refused, and hands the rest to the acker, whose reply the
// writer sends once the ack is stored (nil here).
func (cs *consumerStream) ack(id uint64) []byte {
	switch {
	case cs == nil:
		return errorReply("ack applies to a stream through a consumer with ack=explicit (?consumer=NAME&ack=explicit)")
	case cs.lease.Ack() != hub.AckExplicit:
		return errorReply("the consumer acknowledges automatically (ack=auto): nothing to acknowledge")
	case id > cs.sess.Bus.LastID():
		// Checked here, so that a refused id never holds back the ones it
		// would share a store with: lastId only grows.
		return errorReply("the id is above the session's lastId")
	}
	cs.acks.offer(id)
	return nil
}

// store stores id, the highest of n acks, in the stream's epoch, and
// returns the reply to them.
func (cs *consumerStream) store(id uint64, n int) []byte {
	acked, err := cs.sess.Consumers().Ack(cs.name(), id, cs.lease.Epoch(), cs.sess.Bus.LastID(), time.Now())
	if err != nil {
		switch {
		case errors.Is(err, hub.ErrNoConsumer):
			return errorReply("the consumer was deleted")
		case errors.Is(err, hub.ErrEpochMismatch):
			return errorReply("the session's ids started again since this stream began: nothing was acknowledged")
		case errors.Is(err, hub.ErrAckAboveLastID):
			return errorReply("the id is above the session's lastId")
		}
		cs.log.log.Error("storing a consumer's ack", append(cs.log.attrs, "consumer", cs.name(), "err", err)...)
		return errorReply(asError(consumerStoreError(err)).Message)
	}
	cs.h.metrics.acks.Add(float64(n))
	b, _ := json.Marshal(ackedReply{Op: opAcked, ID: acked})
	return b
}
