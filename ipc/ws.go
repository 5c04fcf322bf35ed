package ipc

import (
	"context"
	"net/http"

	"github.com/coder/websocket"

	"github.com/localbus/localbus/bus"
)

// Subprotocol is the WebSocket subprotocol the server selects when a browser
// offers "localbus-key.<key>, localbus-key" to authenticate (SPEC §7).
const Subprotocol = "localbus-key"

// closeFor maps why a subscription ended to the WebSocket close code and
// reason (SPEC §3.3); the same reason went in-band as the terminal frame.
func closeFor(end bus.EndReason) (websocket.StatusCode, string) {
	switch end {
	case bus.EndLagged:
		return websocket.StatusTryAgainLater, "lagged"
	case bus.EndSessionDeleted:
		return websocket.StatusNormalClosure, "session deleted"
	case bus.EndShutdown:
		return websocket.StatusGoingAway, "shutdown"
	case bus.EndReload:
		return websocket.StatusGoingAway, "reload"
	}
	return websocket.StatusNormalClosure, ""
}

// runWS serves a stream over WebSocket (SPEC §3.3, §5): one text frame per
// envelope, control frames read by a second goroutine, pings every
// keepalive. sub is nil when the subscription was refused, and refusal is
// then the terminal frame to send before closing with 1013.
//
// Once the upgrade is done the stream runs in goroutines of its own and
// runWS returns, so that net/http releases the connection's buffers and
// goroutine; done is called when the stream is over. coder/websocket runs
// the protocol over a wsConn; the writer sends the messages itself, every
// frame of a wake-up in one writev (see wsConn).
func (h *Handler) runWS(w http.ResponseWriter, r *http.Request, sub *bus.Subscription, refusal *bus.Frame, done func()) {
	o := h.options()
	hw := &wsHijacker{ResponseWriter: w}
	c, err := websocket.Accept(hw, r, &websocket.AcceptOptions{
		Subprotocols: []string{Subprotocol},
		// Origin is checked by the authenticator, before the upgrade, with
		// the daemon's own policy (SPEC §7).
		InsecureSkipVerify: true,
	})
	if err != nil {
		done()
		return // Accept answered the request
	}
	go func() {
		defer done()
		defer c.CloseNow()
		if sub == nil {
			wb := getWriteBuf()
			err := hw.conn.writeText(nil, refusal.JSON(), wb, o.WriteTimeout)
			putWriteBuf(wb)
			if err == nil {
				c.Close(websocket.StatusTryAgainLater, "subscriber limit")
			}
			return
		}
		h.serveWS(c, hw.conn, sub, o)
	}()
}

// serveWS runs an accepted stream until it ends or the connection fails.
func (h *Handler) serveWS(c *websocket.Conn, wc *wsConn, sub *bus.Subscription, o *Options) {
	c.SetReadLimit(MaxControlFrame)
	// Not r.Context(): the request is over once the connection is hijacked.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	replies := make(chan []byte, 4)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		defer cancel()
		readControl(ctx, c, sub, replies)
	}()
	defer func() {
		// The writer may stop while the reader still waits on a peer that
		// sends nothing (a ping it never answered): cancelling the read
		// closes the connection, so the reader returns.
		cancel()
		<-readerDone
	}()

	if end, ok := h.writeWS(ctx, c, wc, sub, replies, o); ok {
		code, reason := closeFor(end)
		c.Close(code, reason)
	}
}

// readControl reads control frames until the connection fails or closes,
// applying each and queueing its reply for the writer.
func readControl(ctx context.Context, c *websocket.Conn, sub *bus.Subscription, replies chan<- []byte) {
	for {
		typ, data, err := c.Read(ctx)
		if err != nil {
			return // closed by either side; a frame over the limit closed it with 1009
		}
		var reply []byte
		if typ != websocket.MessageText {
			reply = errorReply("binary frames are not accepted: send JSON text control frames")
		} else {
			reply = applyControl(sub, data)
		}
		select {
		case replies <- reply:
		case <-ctx.Done():
			return
		}
	}
}

// writeWS writes frames and replies until the stream ends (ok, with why) or
// the connection fails (not ok).
func (h *Handler) writeWS(ctx context.Context, c *websocket.Conn, wc *wsConn, sub *bus.Subscription, replies <-chan []byte, o *Options) (end bus.EndReason, ok bool) {
	keepalive := newKeepalive(o.Keepalive)
	defer keepalive.stop()
	for {
		wb := getWriteBuf()
		var ended bool
		wb.frames, ended = sub.Take(wb.frames)
		err := wc.writeText(wb.frames, nil, wb, o.WriteTimeout)
		n := len(wb.frames)
		putWriteBuf(wb)
		if err != nil {
			return "", false
		}
		if ended {
			return sub.End(), true
		}
		if n > 0 {
			keepalive.wrote()
		}
		select {
		case <-sub.Ready():
		case reply := <-replies:
			wb := getWriteBuf()
			err := wc.writeText(nil, reply, wb, o.WriteTimeout)
			putWriteBuf(wb)
			if err != nil {
				return "", false
			}
		case <-keepalive.C():
			if !keepalive.due() {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, o.Keepalive)
			err := c.Ping(pctx)
			cancel()
			if err != nil {
				return "", false // the peer did not answer: close it
			}
			keepalive.wrote()
		case <-ctx.Done():
			return "", false
		}
	}
}
