package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/localbus/localbus/ipc/wire"
)

// StreamReply is the daemon's answer to a streaming publish: how many
// events it published, the first and last of their ids, and every id when
// there are at most 1000. Other publishers' events may have ids between
// FirstID and LastID.
type StreamReply = wire.StreamReply

// ErrLineTooLong is the cause of a PublishStreamError at a line longer
// than any daemon takes (its max_event_bytes is at most 64 MiB).
var ErrLineTooLong = errors.New("client: line longer than 64 MiB")

// A PublishStreamError is a streaming publish that stopped before the end
// of its input: the daemon refused a line (or the whole request), reading
// the input failed, or a line was too long. Every line before Line was
// published, nothing from Line on.
type PublishStreamError struct {
	// Line is the line of the input, counted from 1 with blank lines, that
	// the publish stopped at: the first one not published. It is 0 when
	// every line of the input was published and the daemon still answered
	// with an error.
	Line int
	// Published is what the daemon published before it stopped.
	Published StreamReply
	// Err is the cause: the daemon's *APIError, the error reading the
	// input, or ErrLineTooLong.
	Err error
}

// Error says where the publish stopped, how much it published and why.
func (e *PublishStreamError) Error() string {
	where := "publish stopped"
	if e.Line > 0 {
		where = fmt.Sprintf("publish stopped at line %d", e.Line)
	}
	return fmt.Sprintf("client: %s after %d events: %s", where, e.Published.Count, strings.TrimPrefix(e.Err.Error(), "client: "))
}

// Unwrap returns the cause.
func (e *PublishStreamError) Unwrap() error { return e.Err }

// Limits of PublishStream.
const (
	// streamKeepalive is how long the input may be quiet before a blank
	// line goes out: a third of the daemon's idle limit for a body (30 s).
	streamKeepalive = 10 * time.Second
	// streamBufSize is the read buffer's size; it grows for a longer line
	// up to maxStreamLine.
	streamBufSize = 64 << 10
	// maxStreamLine is the longest line sent: any daemon refuses a longer
	// one (max_event_bytes is at most 64 MiB; the rest is for blanks).
	maxStreamLine = 64<<20 + 4096
	// maxStreamReply bounds the reply read: 1000 ids or an error message.
	maxStreamReply = 1 << 20
)

// PublishStream publishes the newline-delimited JSON events read from r,
// one {"type","data"} object per line, to session in one streaming request
// (POST /api/v1/sessions/{id}/events?ack=end with a chunked
// application/x-ndjson body). The complete lines of each read of r go out
// at once, so the daemon publishes them while r is still producing; only
// the line being read is held in memory. Blank lines are skipped. Whenever
// r has been quiet for 10 s, PublishStream sends a blank line between two
// lines, so that the daemon's idle limit for a request body (30 s) does
// not cut off a slow producer. With the daemon's auto_create_sessions on, a
// missing session is created by the first event.
//
// Each line is its own all-or-nothing unit: the daemon publishes every line
// before the first one it refuses, and nothing from that one on. When r
// ends (io.EOF), PublishStream returns the daemon's StreamReply. When the
// publish stops early it returns what was published and a
// *PublishStreamError that says at which line of r it stopped and unwraps
// to the cause: the daemon's *APIError (so errors.Is(err, ErrForbidden)
// works), the error reading r, or ErrLineTooLong. A daemon that cannot be
// reached is an *UnreachableError, as for every call.
//
// PublishStream reads r in the calling goroutine. It stops reading as soon
// as the daemon has answered, so r need not be read to its end, but a Read
// in progress is not interrupted: PublishStream returns when it does.
// ctx governs the request; when it ends, PublishStream returns ctx.Err(),
// and what the daemon published by then is unknown: every event up to the
// last line it read.
func (c *Client) PublishStream(ctx context.Context, session string, r io.Reader) (StreamReply, error) {
	return c.publishStream(ctx, session, r, streamLimits{keepalive: streamKeepalive, maxLine: maxStreamLine})
}

// streamLimits are PublishStream's limits, which tests shorten.
type streamLimits struct {
	keepalive time.Duration // quiet input before a blank line
	maxLine   int           // the longest line sent
	// handedOver, if set, runs when a chunk has been handed to the body,
	// before the feeder waits for the transport to take it: tests delay
	// the feeder there.
	handedOver func(done <-chan struct{})
}

// publishStream is PublishStream under lim.
func (c *Client) publishStream(ctx context.Context, session string, r io.Reader, lim streamLimits) (StreamReply, error) {
	if err := c.init(); err != nil {
		return StreamReply{}, err
	}
	body := &streamBody{
		keepalive: lim.keepalive,
		chunks:    make(chan []byte),
		taken:     make(chan struct{}, 1),
		stop:      make(chan struct{}),
	}
	path := wire.SessionEventsPath(session)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint(path, url.Values{wire.ParamAck: {wire.AckEnd}}), body)
	if err != nil {
		return StreamReply{}, fmt.Errorf("client: %w", err)
	}
	req.ContentLength = -1 // chunked, without net/http probing the body first
	req.Header = c.header()
	req.Header.Set("Content-Type", wire.ContentTypeNDJSON)
	req.Header.Set("Accept", wire.ContentTypeJSON)
	if c.ClientID != "" {
		req.Header.Set(wire.HeaderClientID, c.ClientID)
	}

	// The request runs in a goroutine of its own while this one reads r;
	// done closes when the daemon has answered or the request failed.
	done := make(chan struct{})
	var ans streamAnswer
	go func() {
		defer close(done)
		ans = c.roundTripStream(req)
		// The daemon may answer before the body ends (a refusal): release
		// the transport, which may be waiting in body.Read.
		body.Close()
	}()
	f := &streamFeed{body: body, done: done, maxLine: lim.maxLine, handedOver: lim.handedOver}
	ferr := f.run(r)
	if ferr != errStreamStopped {
		// Only whole lines were sent: end the body there, and the daemon
		// answers with what it published.
		close(body.chunks)
	}
	<-done

	switch {
	case ans.err != nil:
		if ctx.Err() != nil {
			return StreamReply{}, ctx.Err()
		}
		return StreamReply{}, asUnreachable(ans.err, c.addr)
	case ans.apiErr != nil:
		return ans.reply, &PublishStreamError{Line: f.stopLine(ans.reply.Count), Published: ans.reply, Err: ans.apiErr}
	case errors.Is(ferr, ErrLineTooLong):
		return ans.reply, &PublishStreamError{Line: f.lines + 1, Published: ans.reply, Err: ferr}
	case ferr != nil && ferr != errStreamStopped:
		return ans.reply, &PublishStreamError{Line: f.lines + 1, Published: ans.reply, Err: fmt.Errorf("client: reading the events: %w", ferr)}
	}
	return ans.reply, nil
}

// streamAnswer is the outcome of a streaming publish's request.
type streamAnswer struct {
	reply  StreamReply // the reply, or what an error reply says was published
	apiErr *APIError   // the daemon's error reply
	err    error       // no reply: the request failed
}

// roundTripStream makes the request and reads the daemon's answer.
func (c *Client) roundTripStream(req *http.Request) (a streamAnswer) {
	resp, err := c.hc.Do(req)
	if err != nil {
		a.err = err
		return a
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxStreamReply))
	if err != nil {
		a.err = err
		return a
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		a.apiErr = apiError(resp.StatusCode, bytes.NewReader(b))
		var eb wire.StreamErrorBody
		if json.Unmarshal(b, &eb) == nil && eb.Published != nil {
			a.reply = *eb.Published
		}
		return a
	}
	if err := json.Unmarshal(b, &a.reply); err != nil {
		a.err = fmt.Errorf("client: decoding the answer to a streaming publish: %w", err)
	}
	return a
}

// errStreamStopped ends the feeding of a request that is over, and the
// body of a request the transport still reads.
var errStreamStopped = errors.New("client: streaming publish stopped")

// streamBody is the body of a streaming publish: the chunks of whole lines
// the feeder hands over, read without copying, and a blank line whenever
// none came for keepalive. The transport calls Read from its write loop;
// Close may come from any goroutine.
type streamBody struct {
	keepalive time.Duration
	chunks    chan []byte   // from the feeder; closed at the end of the input
	taken     chan struct{} // a token when Read has copied a whole chunk (capacity 1: one chunk is in flight)
	stop      chan struct{} // closed by Close
	closeOnce sync.Once

	// Read's own; Read is never called concurrently.
	cur   []byte // what is left of the chunk being read
	timer *time.Timer
}

// Read returns the next bytes of the chunk being sent; when it is used up,
// the next chunk, or a blank line after keepalive without one.
func (b *streamBody) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for len(b.cur) == 0 {
		if b.timer == nil {
			b.timer = time.NewTimer(b.keepalive)
		} else {
			b.timer.Reset(b.keepalive)
		}
		select {
		case c, ok := <-b.chunks:
			if !ok {
				b.timer.Stop()
				return 0, io.EOF
			}
			b.cur = c
		case <-b.timer.C:
			// Chunks are whole lines, so this is always between two.
			p[0] = '\n'
			return 1, nil
		case <-b.stop:
			b.timer.Stop()
			return 0, errStreamStopped
		}
	}
	n := copy(p, b.cur)
	b.cur = b.cur[n:]
	if len(b.cur) == 0 {
		b.cur = nil
		b.taken <- struct{}{}
	}
	return n, nil
}

// Close makes Read return errStreamStopped from now on.
func (b *streamBody) Close() error {
	b.closeOnce.Do(func() { close(b.stop) })
	return nil
}

// streamFeed reads the input of a streaming publish and hands its complete
// lines to the body, counting what it sent so that the daemon's count of
// published events maps back to a line of the input.
type streamFeed struct {
	body       *streamBody
	done       <-chan struct{} // closed when the request is over
	maxLine    int             // the longest line to send
	handedOver func(done <-chan struct{})

	lines  int         // lines handed over, blank ones included
	events int         // lines sent that are not blank: the daemon's events
	blanks int         // blank lines sent
	shifts []lineShift // where the number of blank lines before an event changes
	eof    bool        // every line of the input was sent
}

// A lineShift says that from event number event on, blanks blank lines
// come before each event: event k is line k+blanks.
type lineShift struct{ event, blanks int }

// run feeds the body until r ends (nil), the request is over
// (errStreamStopped), a line is too long (ErrLineTooLong) or r fails (its
// error).
func (f *streamFeed) run(r io.Reader) error {
	buf := make([]byte, min(streamBufSize, f.maxLine))
	w := 0 // buf[:w] is read and not sent: the start of a line
	for {
		if w == len(buf) {
			if len(buf) >= f.maxLine {
				return ErrLineTooLong
			}
			nb := make([]byte, min(2*len(buf), f.maxLine))
			copy(nb, buf[:w])
			buf = nb
		}
		n, err := r.Read(buf[w:])
		w += n
		end := 0 // send buf[:end]: the complete lines
		if i := bytes.LastIndexByte(buf[w-n:w], '\n'); i >= 0 {
			end = w - n + i + 1
		}
		if err == io.EOF {
			end = w // the last line may lack its newline
		}
		if end > 0 {
			// Counted first: the daemon may read the chunk and answer
			// before send learns that it was taken.
			f.count(buf[:end])
			if !f.send(buf[:end]) {
				return errStreamStopped
			}
			w = copy(buf, buf[end:w])
			if w == 0 && len(buf) > streamBufSize {
				buf = make([]byte, streamBufSize) // let a long line's buffer go
			}
		}
		switch {
		case err == io.EOF:
			f.eof = true
			return nil
		case err != nil:
			return err
		}
	}
}

// send hands chunk to the body and waits until the transport has read
// it, so that the buffer can be reused. It reports whether the request
// is still going.
func (f *streamFeed) send(chunk []byte) bool {
	select {
	case f.body.chunks <- chunk:
	case <-f.done:
		return false
	}
	if f.handedOver != nil {
		f.handedOver(f.done)
	}
	select {
	case <-f.body.taken:
		return true
	case <-f.done:
		return false
	}
}

// count records the lines of a chunk handed to the body, which may be
// sent in part or not at all if the request ends meanwhile: whole lines,
// but for the last line of the input. stopLine maps the daemon's count of
// published events to these lines.
func (f *streamFeed) count(chunk []byte) {
	for len(chunk) > 0 {
		line := chunk
		if i := bytes.IndexByte(chunk, '\n'); i >= 0 {
			line, chunk = chunk[:i], chunk[i+1:]
		} else {
			chunk = nil
		}
		f.lines++
		// The daemon's rule: a line that is only white space is no event.
		if len(bytes.TrimSpace(line)) == 0 {
			f.blanks++
			continue
		}
		f.events++
		last := 0
		if len(f.shifts) > 0 {
			last = f.shifts[len(f.shifts)-1].blanks
		}
		if f.blanks != last {
			f.shifts = append(f.shifts, lineShift{event: f.events, blanks: f.blanks})
		}
	}
}

// stopLine returns the line of the input at which a publish that
// published count events stopped: the line of the next event, else the
// line after those sent, 0 when the input was sent to its end.
func (f *streamFeed) stopLine(count int) int {
	k := count + 1
	if k > f.events {
		if f.eof {
			return 0
		}
		return f.lines + 1
	}
	i := sort.Search(len(f.shifts), func(i int) bool { return f.shifts[i].event > k }) - 1
	if i < 0 {
		return k
	}
	return k + f.shifts[i].blanks
}
