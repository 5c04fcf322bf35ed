package ipc

import (
	"context"
	"net/http"

	"github.com/coder/websocket"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/ipc/internal/framewriter"
	"github.com/localbus/localbus/ipc/wire"
)

// runWS serves a stream over WebSocket (SPEC §3.3, §5): one text frame per
// envelope, control frames read by a second goroutine, pings every
// keepalive. sub is nil when the subscription was refused, and refusal is
// then the terminal frame to send before closing with 1013; cs is the
// consumer the stream reads through, nil for none, whose acks the control
// reader takes.
//
// Once the upgrade is done the stream runs in goroutines of its own and
// runWS returns, so that net/http releases the connection's buffers and
// goroutine; done is called when the stream is over. coder/websocket runs
// the protocol; the writer sends the messages itself, every frame of a
// wake-up in one writev (see framewriter.WS).
func (h *Handler) runWS(w http.ResponseWriter, r *http.Request, sub *bus.Subscription, cs *consumerStream, refusal *bus.Frame, sl *streamLog, done func()) {
	o := h.options()
	s, err := framewriter.AcceptWS(w, r, &websocket.AcceptOptions{
		Subprotocols: []string{wire.Subprotocol},
		// Origin is checked by the authenticator, before the upgrade, with
		// the daemon's own policy (SPEC §7).
		InsecureSkipVerify: true,
	}, o.WriteTimeout)
	if err != nil {
		done()
		return // Accept answered the request
	}
	go func() {
		defer done()
		if sub == nil {
			refuse(s, refusal)
			return
		}
		serveWS(s, sub, cs, o, sl)
	}()
}

// serveWS runs an accepted stream until it ends or the connection fails.
func serveWS(s *framewriter.WS, sub *bus.Subscription, cs *consumerStream, o *Options, sl *streamLog) {
	c := s.Conn()
	c.SetReadLimit(MaxControlFrame)
	// Not r.Context(): the request is over once the connection is hijacked.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	replies := make(chan []byte, 4)
	if cs != nil && cs.acks != nil {
		ackerDone := make(chan struct{})
		go func() {
			defer close(ackerDone)
			cs.acks.run(ctx.Done())
		}()
		defer func() {
			cancel()
			<-ackerDone
		}()
	}
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		defer cancel()
		readControl(ctx, c, sub, cs, replies)
	}()
	defer func() {
		// The writer may stop while the reader still waits on a peer that
		// sends nothing (a ping it never answered): cancelling the read
		// closes the connection, so the reader returns.
		cancel()
		<-readerDone
	}()
	end, ok := pump(ctx, sub, s, replies, o, sl, cs)
	s.Close(streamEnd(end, ok))
}

// readControl reads control frames until the connection fails or closes,
// applying each and queueing its reply for the writer. An ack is stored
// before the next frame is read, so acks are answered in order.
func readControl(ctx context.Context, c *websocket.Conn, sub *bus.Subscription, cs *consumerStream, replies chan<- []byte) {
	for {
		typ, data, err := c.Read(ctx)
		if err != nil {
			return // closed by either side; a frame over the limit closed it with 1009
		}
		var reply []byte
		if typ != websocket.MessageText {
			reply = errorReply("binary frames are not accepted: send JSON text control frames")
		} else {
			reply = applyControl(sub, cs, data)
		}
		if reply == nil {
			continue // an ack: the acker answers once it is stored
		}
		select {
		case replies <- reply:
		case <-ctx.Done():
			return
		}
	}
}
