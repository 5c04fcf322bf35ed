package ipc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/share"
	"github.com/localbus/localbus/ipc/wire"
)

// Streaming publish (SPEC §6, NDJSON): POST /api/v1/sessions/{id}/events
// with Content-Type: application/x-ndjson and a body of unknown length
// (chunked), or with ?ack= on any NDJSON body, publishes the lines as they
// arrive, so that "producer | localbus publish --session s" costs one
// request. Each read's complete lines are published together (at most
// DefaultMaxBatch at a time), so a stream's events are published in order
// and never wait for the body to end.
//
// Each line is its own all-or-nothing unit: a line that is malformed, too
// large or of a family the caller may not publish stops the stream there;
// the lines before it stay published, and the reply says which were. Blank
// lines are skipped, and keep an otherwise quiet stream open: the body may
// be idle for at most BodyTimeout between reads.
//
// With ?ack=end (the default) the reply comes when the body ends: a
// wire.StreamReply with status 200, or on a failure the JSON error with the
// same wire.StreamReply as "published" (absent when nothing was). With
// ?ack=line the reply is NDJSON and streams: {"id":N} per event as soon as
// it is published, then a wire.StreamReply line at the end, or an error line
// {"error":{…}}. A failure before any event was published is always a
// plain JSON error with its status.

// streamBuf is the initial read buffer of a streaming publish; it grows
// to hold the longest line allowed.
const streamBuf = 64 << 10

// pubStream is one streaming publish in progress.
type pubStream struct {
	h          *Handler
	w          http.ResponseWriter
	rc         *http.ResponseController
	c          Caller
	id         bus.SessionID
	originator string
	lineAcks   bool
	o          *Options

	reply  wire.StreamReply
	wrote  bool // the response began (line acks)
	line   int  // lines read so far, blank ones included
	events []bus.Event
	ack    []byte
}

// publishStream publishes the lines of body as they arrive and answers; it
// returns the reply of what it published (Count 0: nothing).
func (h *Handler) publishStream(w http.ResponseWriter, r *http.Request, body io.Reader, c Caller, id bus.SessionID, originator string, lineAcks bool) wire.StreamReply {
	o := h.options()
	ps := &pubStream{
		h: h, w: w, rc: http.NewResponseController(w), c: c, id: id, originator: originator,
		lineAcks: lineAcks, o: o, events: make([]bus.Event, 0, 64),
	}
	if lineAcks {
		// Acknowledgements go out while the body is still coming.
		ps.rc.EnableFullDuplex()
	}
	// At shutdown, stop reading: what was read is published and
	// acknowledged, the rest is refused.
	stop := context.AfterFunc(h.drainCtx, func() { ps.rc.SetReadDeadline(time.Now()) })
	defer stop()
	if err := ps.run(body); err != nil {
		ps.fail(err)
		return ps.reply
	}
	ps.finish()
	return ps.reply
}

// run reads and publishes until the body ends or a line fails.
func (ps *pubStream) run(body io.Reader) error {
	maxLine := int(ps.o.MaxEventBytes) + 4096 // room for blanks around the longest event
	// The line buffer counts on the peer's account of the in-flight body
	// bytes.
	acct := ps.h.bodyAccount(ps.c)
	take := func(n int) error {
		if err := acct.Acquire(int64(n)); err != nil {
			var r *share.Refusal
			errors.As(err, &r)
			return busyError(r)
		}
		return nil
	}
	size := min(streamBuf, maxLine)
	if err := take(size); err != nil {
		return err
	}
	defer func() { acct.Release(int64(size)) }()
	buf := make([]byte, size)
	rd, wr := 0, 0 // buf[rd:wr] is read and not yet processed
	for {
		if wr == len(buf) {
			switch {
			case rd > 0:
				wr = copy(buf, buf[rd:wr])
				rd = 0
			case len(buf) < maxLine:
				grow := min(2*len(buf), maxLine)
				if err := take(grow - size); err != nil {
					return err
				}
				size = grow
				nb := make([]byte, grow)
				copy(nb, buf[:wr])
				buf = nb
			default:
				return errorf(http.StatusRequestEntityTooLarge, wire.CodeEventTooLarge, "line %d is longer than %d bytes", ps.line+1, maxLine)
			}
		}
		n, rerr := body.Read(buf[wr:])
		wr += n
		if n > 0 {
			ps.rc.SetReadDeadline(time.Now().Add(ps.o.BodyTimeout))
		}
		// Every complete line, then at the end of the body the last one.
		for rd < wr {
			i := bytes.IndexByte(buf[rd:wr], '\n')
			if i < 0 {
				if rerr != io.EOF {
					break
				}
				i = wr - rd
			}
			raw := bytes.TrimSpace(buf[rd : rd+i])
			rd = min(rd+i+1, wr)
			ps.line++
			if len(raw) == 0 {
				continue
			}
			if err := ps.add(raw); err != nil {
				if perr := ps.flush(); perr != nil {
					return perr
				}
				return err
			}
			if len(ps.events) == DefaultMaxBatch {
				if err := ps.flush(); err != nil {
					return err
				}
			}
		}
		// The events refer to buf: publish them before reading over it.
		if err := ps.flush(); err != nil {
			return err
		}
		switch {
		case rerr == io.EOF:
			return nil
		case rerr != nil:
			return ps.readError(rerr)
		}
	}
}

// add decodes one line into the next event.
func (ps *pubStream) add(raw []byte) error {
	if int64(len(raw)) > ps.o.MaxEventBytes {
		return errorf(http.StatusRequestEntityTooLarge, wire.CodeEventTooLarge, "line %d is %d bytes; at most %d", ps.line, len(raw), ps.o.MaxEventBytes)
	}
	var ev bus.Event
	if !scanEvent(raw, &ev) {
		var err error
		if ev, err = decodeEvent(raw); err != nil {
			return eventError(err, "line", ps.line)
		}
	}
	if fam := ev.Type.Family().String(); !ps.c.Scopes.CanPublish(fam) {
		return errorf(http.StatusForbidden, wire.CodeForbidden, "line %d: this caller may not publish family %s", ps.line, fam)
	}
	ev.Originator = ps.originator
	ps.events = append(ps.events, ev)
	return nil
}

// flush publishes the events gathered and acknowledges them.
func (ps *pubStream) flush() error {
	if len(ps.events) == 0 {
		return nil
	}
	first, last, err := ps.h.publish(ps.c, ps.id, ps.events)
	clear(ps.events)
	ps.events = ps.events[:0]
	if err != nil {
		return err
	}
	r := &ps.reply
	if r.Count == 0 {
		r.FirstID = first
	}
	r.LastID = last
	for n := first; n <= last; n++ {
		if r.Count < wire.MaxStreamAckIDs {
			r.IDs = append(r.IDs, n)
		}
		r.Count++
	}
	if r.Count > wire.MaxStreamAckIDs {
		r.IDs = nil
	}
	if !ps.lineAcks {
		return nil
	}
	ps.begin()
	b := ps.ack[:0]
	for n := first; n <= last; n++ {
		b = append(b, `{"id":`...)
		b = strconv.AppendUint(b, n, 10)
		b = append(b, "}\n"...)
	}
	ps.ack = b
	return ps.write(b)
}

// begin starts a line-acknowledged response.
func (ps *pubStream) begin() {
	if ps.wrote {
		return
	}
	ps.wrote = true
	ps.w.Header().Set("Content-Type", wire.ContentTypeNDJSON)
	ps.w.Header().Set("Cache-Control", "no-store")
	ps.w.WriteHeader(http.StatusOK)
}

// write sends acknowledgement lines now, under the write timeout: a
// client that stops reading them is cut off.
func (ps *pubStream) write(b []byte) error {
	ps.rc.SetWriteDeadline(time.Now().Add(ps.o.WriteTimeout))
	if _, err := ps.w.Write(b); err != nil {
		return errClientGone
	}
	if err := ps.rc.Flush(); err != nil {
		return errClientGone
	}
	return nil
}

// errClientGone stops a stream whose client no longer reads its replies.
var errClientGone = errors.New("ipc: the client stopped reading the acknowledgements")

// readError turns a failed body read into the error to report.
func (ps *pubStream) readError(err error) error {
	if ps.h.draining.Load() {
		return errorf(http.StatusServiceUnavailable, wire.CodeShuttingDown, "the daemon is shutting down: lines after line %d were not read", ps.line)
	}
	var e *Error
	if errors.As(err, &e) && e.Code == wire.CodeBodyTimeout {
		return errorf(http.StatusRequestTimeout, wire.CodeBodyTimeout, "no data for %v after line %d: send a line, or a blank line to keep a quiet stream open, at least every %v", ps.o.BodyTimeout, ps.line, ps.o.BodyTimeout)
	}
	if e != nil {
		return e
	}
	// The client went away, or its chunked body broke: nobody may read
	// the reply, but it says what happened.
	return errorf(http.StatusBadRequest, wire.CodeInvalidBody, "the body broke off after line %d: %v", ps.line, err)
}

// finish sends the final acknowledgement.
func (ps *pubStream) finish() {
	if !ps.lineAcks {
		writeJSON(ps.w, http.StatusOK, &ps.reply)
		return
	}
	ps.begin()
	b, _ := jsonLine(&ps.reply)
	ps.write(b)
}

// fail reports err, with what was published before it.
func (ps *pubStream) fail(err error) {
	if errors.Is(err, errClientGone) {
		return
	}
	e := asError(err)
	noteError(ps.w, e)
	body := wire.StreamErrorBody{Error: wire.ErrorDetail{Code: e.Code, Message: e.Message}}
	if ps.reply.Count > 0 {
		body.Published = &ps.reply
	}
	if !ps.wrote {
		// The rest of the body is not wanted: without this net/http would
		// read up to 256 KiB of it before answering, which for a slow
		// producer means waiting out the idle limit.
		ps.w.Header().Set("Connection", "close")
		if e.Code == wire.CodeBusy {
			ps.w.Header().Set("Retry-After", "1")
		}
		writeJSON(ps.w, e.Status, body)
		return
	}
	body.Published = nil // the acknowledgements said it, line by line
	b, _ := jsonLine(body)
	ps.write(b)
}

func jsonLine(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	return append(b, '\n'), err
}
