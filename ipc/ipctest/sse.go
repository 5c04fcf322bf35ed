package ipctest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/localbus/localbus/bus"
)

// SSEFrame is one block of a Server-Sent Events stream: the lines up to a
// blank line.
type SSEFrame struct {
	// ID is the value of the id: line; HasID reports whether there was one.
	ID    string
	HasID bool
	// Event is the value of the event: line.
	Event string
	// Data is the value of the data: lines, joined by newlines.
	Data string
	// Retry is the value of a retry: line, "" for none.
	Retry string
	// Comments are the comment lines (": ping" gives "ping").
	Comments []string
	// Raw is the block as received, blank line excluded.
	Raw string
}

// Envelope decodes the frame's data as an envelope.
func (f SSEFrame) Envelope() (bus.Envelope, error) {
	var env bus.Envelope
	err := json.Unmarshal([]byte(f.Data), &env)
	return env, err
}

// An SSE is an open Server-Sent Events stream. A goroutine reads it into
// frames; Close stops the stream and waits for that goroutine.
type SSE struct {
	// Response is the stream's response; its Body belongs to the reader.
	Response *http.Response

	body   io.ReadCloser
	frames chan SSEFrame
	stop   chan struct{} // closed by Close
	once   sync.Once
	done   chan struct{} // closed when the reader has returned
	err    error         // why the reader returned: io.EOF at the end of the stream
	cancel context.CancelFunc
}

// ReadSSE reads a stream from a response that some other client read, such
// as http.ReadResponse on a raw connection. Close closes conn (which may be
// nil), then the body: the body of a raw response does not interrupt a
// blocked read when closed, and the connection does.
func ReadSSE(resp *http.Response, conn io.Closer) *SSE {
	cancel := func() {}
	if conn != nil {
		cancel = func() { conn.Close() }
	}
	st := &SSE{
		Response: resp, body: resp.Body, cancel: cancel,
		frames: make(chan SSEFrame), stop: make(chan struct{}), done: make(chan struct{}),
	}
	go st.read()
	return st
}

// DialSSE opens a stream at path. The stream lives until Close; ctx bounds
// only the wait for the response headers. A status other than 200 is a
// *StatusError.
func (s *Server) DialSSE(ctx context.Context, path string, header http.Header) (*SSE, error) {
	sctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, URL(path), nil)
	if err != nil {
		cancel()
		return nil, err
	}
	for k, vs := range header {
		req.Header[k] = append([]string(nil), vs...)
	}
	req.Header.Set("Accept", "text/event-stream")
	// Bound the wait for headers with ctx, without tying the stream to it.
	stop := context.AfterFunc(ctx, cancel)
	resp, err := s.Client.Do(req)
	if !stop() {
		if err == nil {
			resp.Body.Close()
		}
		cancel()
		return nil, ctx.Err()
	}
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return nil, &StatusError{Status: resp.StatusCode, Body: b}
	}
	st := ReadSSE(resp, nil)
	st.cancel = cancel
	return st, nil
}

// OpenSSE is DialSSE bounded by Wait; it fails the test on error and closes
// the stream when the test ends.
func (s *Server) OpenSSE(tb testing.TB, path string, header http.Header) *SSE {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	st, err := s.DialSSE(ctx, path, header)
	if err != nil {
		tb.Fatalf("GET %s: %v", path, err)
	}
	tb.Cleanup(st.Close)
	return st
}

func (st *SSE) read() {
	defer close(st.done)
	defer st.body.Close()
	br := bufio.NewReader(st.body)
	var f SSEFrame
	var raw []string
	var data []string
	started := false
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if err == io.EOF && line == "" && !started {
				st.err = io.EOF
			} else if err == io.EOF {
				st.err = io.ErrUnexpectedEOF // a block cut short
			} else {
				st.err = err
			}
			return
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if line == "" {
			if !started {
				continue
			}
			f.Data = strings.Join(data, "\n")
			f.Raw = strings.Join(raw, "\n")
			select {
			case st.frames <- f:
			case <-st.stop:
				st.err = errClosed
				return
			}
			f, raw, data, started = SSEFrame{}, nil, nil, false
			continue
		}
		started = true
		raw = append(raw, line)
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "":
			f.Comments = append(f.Comments, value)
		case "id":
			f.ID, f.HasID = value, true
		case "event":
			f.Event = value
		case "data":
			data = append(data, value)
		case "retry":
			f.Retry = value
		}
	}
}

var errClosed = errors.New("ipctest: stream closed by the test")

// Next returns the next block of the stream. At the end of the stream it
// returns io.EOF (io.ErrUnexpectedEOF if a block was cut short, or the read
// error); when ctx ends first, ctx's error.
func (st *SSE) Next(ctx context.Context) (SSEFrame, error) {
	select {
	case f := <-st.frames:
		return f, nil
	case <-st.done:
		return SSEFrame{}, st.err
	case <-ctx.Done():
		return SSEFrame{}, ctx.Err()
	}
}

// NextEnvelope returns the next block that carries data, decoded, skipping
// retry: and comment blocks.
func (st *SSE) NextEnvelope(ctx context.Context) (bus.Envelope, SSEFrame, error) {
	for {
		f, err := st.Next(ctx)
		if err != nil {
			return bus.Envelope{}, f, err
		}
		if f.Data == "" {
			continue
		}
		env, err := f.Envelope()
		return env, f, err
	}
}

// MustNext is NextEnvelope bounded by Wait; it fails the test on error.
func (st *SSE) MustNext(tb testing.TB) bus.Envelope {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	env, f, err := st.NextEnvelope(ctx)
	if err != nil {
		tb.Fatalf("SSE next frame: %v (last block %q)", err, f.Raw)
	}
	return env
}

// End reads to the end of the stream, bounded by ctx, and returns the
// envelopes that were still to come. The error is nil when the stream
// ended cleanly.
func (st *SSE) End(ctx context.Context) ([]bus.Envelope, error) {
	var out []bus.Envelope
	for {
		env, _, err := st.NextEnvelope(ctx)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, env)
	}
}

// Close ends the stream from the client's side and waits for the reader.
// It is idempotent.
func (st *SSE) Close() {
	st.once.Do(func() {
		close(st.stop)
		st.cancel()
		st.body.Close()
	})
	<-st.done
}
