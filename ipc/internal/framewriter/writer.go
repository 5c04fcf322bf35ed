package framewriter

import (
	"context"

	"github.com/localbus/localbus/bus"
)

// Writer is the seam between a stream's loop and its connection: the loop
// decides what to send and when; a Writer turns it into bytes on the
// socket. SSE and WS implement it.
type Writer interface {
	// Write sends frames, then msg when it is not nil (a control reply,
	// say), with as few system calls as the connection allows. last says
	// nothing follows: an SSE body in chunks is ended. A write the peer
	// does not take in time fails. wb lends the scratch space and may be
	// wb.Frames' own Buf.
	Write(wb *Buf, frames []*bus.Frame, msg []byte, last bool) error
	// Ping keeps a quiet stream alive: an SSE comment, or a WebSocket ping
	// that waits for its pong until ctx ends.
	Ping(ctx context.Context) error
	// Written is how many bytes Write has sent so far: frames, messages
	// and their framing, not pings or the close handshake.
	Written() int64
	// Close ends the stream and releases the connection. A reason other
	// than bus.EndNone ends it cleanly (the WebSocket close handshake with
	// the code and reason of SPEC §3.3); bus.EndNone drops it, after a
	// failed write or ping.
	Close(reason bus.EndReason)
}
