package framewriter

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/localbus/localbus/bus"
)

var (
	ssePing = []byte(": ping\n\n")
	crlf    = []byte("\r\n")
	// lastChunk ends a chunked body: the zero-length chunk and no trailer.
	lastChunk = []byte("0\r\n\r\n")
)

// SSE writes a Server-Sent Events stream (SPEC §3.2). Its first write
// starts with the retry: line, and each write is one chunk of every
// frame's shared SSE bytes.
//
// On an HTTP/1 connection taken over from net/http (NewSSE with hijack),
// the SSE owns the connection: it writes the response head itself with the
// first chunk, then each wake-up as one chunk with one writev (the chunk
// header, the frames' bytes, no copy, the chunk's CRLF), and Close closes
// the connection. Otherwise it writes through the ResponseWriter: each
// wake-up copied into one Write and one Flush.
type SSE struct {
	retry   []byte
	timeout time.Duration
	first   bool
	written int64 // by Write, which one goroutine calls

	// Through net/http.
	w  http.ResponseWriter
	rc *http.ResponseController

	// On a hijacked connection.
	conn    vecConn
	head    []byte // the response head, sent with the first chunk
	chunked bool   // HTTP/1.1: a chunked body; HTTP/1.0: the body ends at close
	gone    chan struct{}
}

// SetHeaders sets the response headers of an SSE stream (SPEC §3.2).
func SetHeaders(hd http.Header) {
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no")
}

// NewSSE starts an SSE response on w: it sets the headers, and with hijack
// on an HTTP/1 request takes the connection over from net/http; where
// net/http cannot give it up (http.ErrNotSupported) the stream goes
// through w instead. Any other error means the connection is lost and
// nothing was written. retry is the stream's first line (a "retry:" field
// and a blank line); a write that waits for the peer fails after timeout.
//
// A hijacked SSE prepares the response head: the headers set on w, Date,
// and Connection: close, since the connection cannot go back to net/http
// for another request after the stream. Anything the client sent after
// its request is ignored.
func NewSSE(w http.ResponseWriter, r *http.Request, hijack bool, retry []byte, timeout time.Duration) (*SSE, error) {
	SetHeaders(w.Header())
	s := &SSE{retry: retry, timeout: timeout, first: true}
	if hijack && r.ProtoMajor == 1 {
		err := s.hijack(w, r)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, http.ErrNotSupported) {
			return nil, err
		}
	}
	s.w, s.rc = w, http.NewResponseController(w)
	w.WriteHeader(http.StatusOK)
	return s, nil
}

func (s *SSE) hijack(w http.ResponseWriter, r *http.Request) error {
	chunked := r.ProtoAtLeast(1, 1)
	head := make([]byte, 0, 256)
	if chunked {
		head = append(head, "HTTP/1.1 200 OK\r\n"...)
	} else {
		head = append(head, "HTTP/1.0 200 OK\r\n"...)
	}
	hd := w.Header().Clone()
	hd.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	hd.Set("Connection", "close")
	if chunked {
		hd.Set("Transfer-Encoding", "chunked")
	}
	hw := headerWriter{b: head}
	hd.Write(&hw)
	head = append(hw.b, "\r\n"...)

	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return err
	}
	s.conn, s.head, s.chunked = newVecConn(conn), head, chunked
	return nil
}

// headerWriter collects http.Header.Write's output.
type headerWriter struct{ b []byte }

func (hw *headerWriter) Write(p []byte) (int, error) {
	hw.b = append(hw.b, p...)
	return len(p), nil
}

// Hijacked reports whether the SSE owns its connection. Only then does it
// need WatchPeer, and does the stream outlive its request.
func (s *SSE) Hijacked() bool { return s.conn.Conn != nil }

// WatchPeer reads a hijacked connection, in a goroutine of its own, until
// the client closes it (or shuts down its side) or Close closes it; then
// it calls gone, once. net/http's background read does the same for a
// stream through a ResponseWriter (the request's context ends). Close
// waits for the goroutine.
func (s *SSE) WatchPeer(gone func()) {
	s.gone = make(chan struct{})
	go func() {
		defer close(s.gone)
		buf := make([]byte, 64)
		for {
			if _, err := s.conn.Read(buf); err != nil {
				gone()
				return
			}
		}
	}()
}

// Write implements Writer.
func (s *SSE) Write(wb *Buf, frames []*bus.Frame, msg []byte, last bool) error {
	first := s.first
	s.first = false
	if s.conn.Conn == nil {
		b := wb.b[:0]
		if first {
			b = append(b, s.retry...)
		}
		b = append(b, msg...)
		for _, f := range frames {
			b = append(b, f.SSE()...)
		}
		wb.b = b
		if len(b) == 0 {
			return nil
		}
		s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
		n, err := s.w.Write(b)
		s.written += int64(n)
		if err == nil {
			err = s.rc.Flush()
		}
		s.rc.SetWriteDeadline(time.Time{})
		return err
	}

	size := len(msg)
	if first {
		size += len(s.retry)
	}
	for _, f := range frames {
		size += len(f.SSE())
	}
	bufs := wb.bufs[:0]
	if first {
		bufs = append(bufs, s.head)
		s.head = nil
	}
	if s.chunked && size > 0 {
		hdr := strconv.AppendInt(wb.hdr[:0], int64(size), 16)
		bufs = append(bufs, append(hdr, '\r', '\n'))
	}
	if first {
		bufs = append(bufs, s.retry)
	}
	if msg != nil {
		bufs = append(bufs, msg)
	}
	for _, f := range frames {
		bufs = append(bufs, f.SSE())
	}
	if s.chunked {
		if size > 0 {
			bufs = append(bufs, crlf)
		}
		if last {
			bufs = append(bufs, lastChunk)
		}
	}
	wb.bufs = bufs
	if len(bufs) == 0 {
		return nil
	}
	if err := s.conn.writeBuffers(bufs, wb, s.timeout); err != nil {
		return err
	}
	s.written += totalLen(bufs)
	return nil
}

// Written implements Writer.
func (s *SSE) Written() int64 { return s.written }

// Ping implements Writer: an SSE comment, within the write timeout.
func (s *SSE) Ping(context.Context) error {
	wb := GetBuf()
	defer PutBuf(wb)
	return s.Write(wb, nil, ssePing, false)
}

// Close implements Writer: it closes a hijacked connection, and waits for
// WatchPeer's goroutine. Through a ResponseWriter there is nothing to do:
// net/http ends the response when the handler returns.
func (s *SSE) Close(bus.EndReason) {
	if s.conn.Conn == nil {
		return
	}
	s.conn.Close()
	if s.gone != nil {
		<-s.gone
	}
}
