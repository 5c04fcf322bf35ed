package ipc

import (
	"context"
	"net/http"
	"strconv"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/ipc/internal/framewriter"
	"github.com/localbus/localbus/ipc/wire"
)

// sseRetry is an SSE stream's first line (SPEC §3.2).
var sseRetry = []byte("retry: " + strconv.Itoa(wire.RetryMs) + "\n\n")

// setSSEHeaders sets the response headers of an SSE stream (SPEC §3.2).
func setSSEHeaders(hd http.Header) { framewriter.SetHeaders(hd) }

// runSSE serves a stream as Server-Sent Events (SPEC §3.2) and calls done
// once the stream is over. sub is nil when the subscription was refused,
// and refusal is then the terminal frame to send; cs is the consumer the
// stream reads through, nil for none.
//
// On an HTTP/1 connection it takes the connection over from net/http and
// returns at once, leaving the stream to a goroutine of its own, so that
// the server's per-connection buffers and goroutine are released while the
// stream lasts; done is called from that goroutine. A second goroutine
// reads the connection only to notice the client leaving, as net/http's
// background read would, and then closes the subscription, which wakes
// the writer to end the stream. Elsewhere (HTTP/2, a refusal, a
// ResponseWriter that cannot be taken over) it streams through the
// ResponseWriter until the stream ends. Either way the same loop (pump)
// writes the stream.
func (h *Handler) runSSE(w http.ResponseWriter, r *http.Request, sub *bus.Subscription, cs *consumerStream, refusal *bus.Frame, sl *streamLog, done func()) {
	o := h.options()
	s, err := framewriter.NewSSE(w, r, sub != nil, sseRetry, o.WriteTimeout)
	if err != nil {
		done()
		return
	}
	if sub == nil {
		defer done()
		refuse(s, refusal)
		return
	}
	if !s.Hijacked() {
		defer done()
		end, ok := pump(r.Context(), sub, s, nil, o, sl, cs)
		s.Close(streamEnd(end, ok))
		return
	}
	s.WatchPeer(sub.Close)
	go func() {
		defer done()
		// Not r.Context(): the request is over once the connection is
		// hijacked; the watcher closes sub when the client leaves.
		end, ok := pump(context.Background(), sub, s, nil, o, sl, cs)
		s.Close(streamEnd(end, ok))
	}()
}
