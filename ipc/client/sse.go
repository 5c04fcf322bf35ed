package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/localbus/localbus/ipc/wire"
)

// maxSSEEvent bounds one SSE event's size in the decoder. The daemon's
// events are at most max_event_bytes (1 MiB by default) plus the envelope.
const maxSSEEvent = 64 << 20

var errSSETooLarge = errors.New("client: server-sent event too large")

// An sseDecoder reads Server-Sent Events (the WHATWG event stream format):
// "field: value" lines, "data" lines joined with "\n", comments starting
// with ":" ignored, an event dispatched at a blank line. Lines end in "\n",
// "\r\n" or "\r". An event cut short by the end of the stream is discarded, as
// the format requires.
type sseDecoder struct {
	r *bufio.Reader
	// retry is the last valid "retry:" value, 0 before any.
	retry   time.Duration
	line    []byte
	pending [][]byte // lines split at a lone "\r", not yet returned
}

func newSSEDecoder(r io.Reader) *sseDecoder {
	return &sseDecoder{r: bufio.NewReaderSize(r, 32<<10)}
}

// next returns the data of the next event with a non-empty data buffer
// and its "event:" name. It returns io.EOF or the read error at the end.
func (d *sseDecoder) next() (event string, data []byte, err error) {
	var buf []byte
	hasData := false
	size := 0
	for {
		line, err := d.readLine()
		if err != nil {
			return "", nil, err
		}
		if len(line) == 0 {
			if hasData {
				return event, buf, nil
			}
			event, size = "", 0
			continue
		}
		if size += len(line); size > maxSSEEvent {
			return "", nil, errSSETooLarge
		}
		if line[0] == ':' {
			continue // a comment: the daemon's keepalive
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			event = string(value)
		case "data":
			if hasData {
				buf = append(buf, '\n')
			}
			buf = append(buf, value...)
			hasData = true
		case "retry":
			if n, err := strconv.ParseUint(string(value), 10, 32); err == nil {
				d.retry = time.Duration(n) * time.Millisecond
			}
		}
		// "id" is not needed: the envelope carries the id.
	}
}

// readLine returns the next line without its terminator: "\n", "\r\n",
// or a lone "\r" followed by more of the line's chunk. (A lone "\r" at
// the very end of what the server has sent waits for the next "\n"; no
// server of localbus ends lines that way.) The slice is valid until the
// next call.
func (d *sseDecoder) readLine() ([]byte, error) {
	if len(d.pending) > 0 {
		l := d.pending[0]
		d.pending = d.pending[1:]
		return l, nil
	}
	d.line = d.line[:0]
	for {
		chunk, err := d.r.ReadSlice('\n')
		d.line = append(d.line, chunk...)
		switch {
		case err == nil:
			l := d.line[:len(d.line)-1]
			l = bytes.TrimSuffix(l, []byte("\r"))
			if bytes.IndexByte(l, '\r') < 0 {
				return l, nil
			}
			d.pending = bytes.Split(l, []byte("\r"))
			return d.readLine()
		case errors.Is(err, bufio.ErrBufferFull):
			if len(d.line) > maxSSEEvent {
				return nil, errSSETooLarge
			}
		default:
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the daemon never ends a stream without a terminal frame
				if len(d.line) == 0 {
					err = io.EOF
				}
			}
			return nil, err
		}
	}
}

// dialSSE opens an SSE connection and returns the function that reads it
// until ctx ends or the connection fails, handing frames to items. The
// function owns the response body and closes it.
func (s *Stream) dialSSE(ctx context.Context) (func(context.Context, chan<- item), error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.c.endpoint(s.path, s.query), nil)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	req.Header = s.resumeHeader()
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-cache")
	resp, err := s.c.hc.Do(req)
	if err != nil {
		return nil, asUnreachable(err, s.c.addr)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, apiError(resp.StatusCode, resp.Body)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != wire.ContentTypeSSE {
		resp.Body.Close()
		return nil, fmt.Errorf("client: %s answered %q, not an event stream", s.path, mt)
	}
	return func(ctx context.Context, items chan<- item) {
		defer resp.Body.Close()
		dec := newSSEDecoder(resp.Body)
		for {
			var it item
			_, data, err := dec.next()
			if err == nil {
				it.frame, err = decodeFrame(data)
			}
			it.err, it.retry = err, dec.retry
			if !send(ctx, items, it) || err != nil {
				return
			}
		}
	}, nil
}
