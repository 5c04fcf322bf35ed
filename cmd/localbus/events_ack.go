package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/localbus/localbus/ipc/client"
	"github.com/localbus/localbus/ipc/wire"
)

// ackFlushWait bounds how long Close waits for the last acknowledgement,
// so a daemon that went away does not hold up the command's exit.
const ackFlushWait = 5 * time.Second

// An acker acknowledges the events a command has handled, for an
// explicit consumer, in a goroutine of its own, so the command handles the
// next event while the daemon stores the last one. An ack covers every
// event up to its id, so it sends only the latest event it was given:
// acks given while one is stored share the next one. Each ack carries the
// epoch of its event, so an ack from before the session's ids started
// again moves nothing (the daemon refuses it: epoch_mismatch).
//
// add may be called from one goroutine; Close stops the acker.
type acker struct {
	cl                *client.Client
	session, consumer string
	errw              io.Writer

	mu   sync.Mutex // guards want
	want eventPoint // the latest event handled

	kick   chan struct{} // a new want, or one to send again
	stop   chan struct{} // closed by Close
	done   chan struct{} // closed when run has returned
	ctx    context.Context
	cancel context.CancelFunc

	// Owned by run.
	stored  eventPoint // the last event the daemon answered for
	failing bool       // the last attempt failed (and said so)
}

// newAcker returns a running acker of consumer of session.
func newAcker(cl *client.Client, session, consumer string, errw io.Writer) *acker {
	a := &acker{
		cl: cl, session: session, consumer: consumer, errw: errw,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	go a.run()
	return a
}

// add asks for p, an event just handled, to be acknowledged. Giving the
// same event again sends it again if the daemon has not answered for it.
func (a *acker) add(p eventPoint) {
	a.mu.Lock()
	a.want = p
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// Close sends the last acknowledgement still due, waiting at most
// ackFlushWait for it, and stops the acker.
func (a *acker) Close() {
	close(a.stop)
	t := time.NewTimer(ackFlushWait)
	defer t.Stop()
	select {
	case <-a.done:
	case <-t.C:
		a.cancel()
		<-a.done
	}
	a.cancel()
}

func (a *acker) run() {
	defer close(a.done)
	for {
		select {
		case <-a.kick:
			a.send()
		case <-a.stop:
			a.send()
			return
		}
	}
}

// send acknowledges want unless the daemon has answered for it already.
func (a *acker) send() {
	a.mu.Lock()
	want := a.want
	a.mu.Unlock()
	if !want.ok || want == a.stored {
		return
	}
	ctx, cancel := context.WithTimeout(a.ctx, requestTimeout)
	defer cancel()
	_, err := a.cl.Ack(ctx, a.session, a.consumer, want.id, want.epoch)
	if err == nil {
		a.stored, a.failing = want, false
		return
	}
	why := rootCause(err).Error()
	var ae *client.APIError
	if errors.As(err, &ae) {
		if ae.Code == wire.CodeEpochMismatch || ae.Status == http.StatusNotFound {
			// The session's ids started again (the stream reports the
			// gap), or the consumer is gone (the stream ends): nothing
			// is left to acknowledge.
			a.stored = want
			return
		}
		why = fmt.Sprintf("%d %s: %s", ae.Status, ae.Code, ae.Message)
	}
	if a.failing {
		return // said already
	}
	a.failing = true
	fmt.Fprintf(a.errw, "localbus: could not acknowledge event %d (%s); it is handled again after a restart unless a later acknowledgement gets through\n", want.id, why)
}
