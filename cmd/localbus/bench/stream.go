package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Transports a stream can use.
const (
	TransportSSE = "sse"
	TransportWS  = "ws"
)

// frameKind says what a frame of a stream is.
type frameKind uint8

const (
	kindEvent frameKind = iota // an event: it has an id
	kindReady
	kindReplayed
	kindGap
	kindSlow
	kindLagged
	kindError
	kindClosed
	kindOther // a reserved frame the bench does not know
	kindReply // a WebSocket control reply: its op in data, an acked id in id
)

var reservedKinds = map[string]frameKind{
	"stream:ready": kindReady, "stream:replayed": kindReplayed, "stream:gap": kindGap,
	"stream:slow": kindSlow, "stream:lagged": kindLagged, "stream:error": kindError,
	"stream:closed": kindClosed,
}

// frame is one frame a stream received. It is only valid during the call
// of the handler it is given to.
type frame struct {
	kind frameKind
	id   uint64    // events only
	due  int64     // the "due" of the event's data, when the stream parses it
	at   time.Time // when the read that completed the frame returned
	data []byte    // the envelope's data of a reserved frame
}

// decode decodes the data of a reserved frame into v.
func (f *frame) decode(v any) error { return json.Unmarshal(f.data, v) }

// errStop ends a stream's read loop without an error.
var errStop = errors.New("bench: stop")

// stream is an open stream of either transport.
type stream interface {
	// run reads frames and gives each to handle until the stream ends
	// (io.EOF, or a *closeError on WebSocket), the connection fails, or
	// handle returns an error (errStop ends it cleanly).
	run(handle func(*frame) error) error
	// Close closes the connection; a run in progress returns.
	Close() error
}

// streamOptions say what stream to open.
type streamOptions struct {
	transport string
	path      string  // the route, without the transport suffix: /api/v1/sessions/ID
	query     string  // the query string, "" for none
	cursor    *uint64 // sent as Last-Event-ID; nil for live only
	wantDue   bool    // parse the "due" field of events' data
}

// openStream dials ep and opens a stream. ctx bounds the dial and the
// response head only.
func openStream(ctx context.Context, ep endpoint, o streamOptions) (stream, error) {
	conn, err := ep.dial(ctx)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	st, err := handshake(conn, ep, o)
	if !stop() || err != nil {
		conn.Close()
		if err == nil || ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	return st, nil
}

func handshake(conn net.Conn, ep endpoint, o streamOptions) (stream, error) {
	path := o.path
	var extra []string
	var wsKey string
	switch o.transport {
	case TransportSSE:
		path += "/events"
		extra = append(extra, "Accept: text/event-stream")
	case TransportWS:
		path += "/ws"
		var k [16]byte
		binary.LittleEndian.PutUint64(k[:], rand.Uint64())
		binary.LittleEndian.PutUint64(k[8:], rand.Uint64())
		wsKey = base64.StdEncoding.EncodeToString(k[:])
		extra = append(extra, "Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: "+wsKey)
	default:
		return nil, fmt.Errorf("bench: unknown transport %q", o.transport)
	}
	if o.query != "" {
		path += "?" + o.query
	}
	if o.cursor != nil {
		extra = append(extra, "Last-Event-ID: "+strconv.FormatUint(*o.cursor, 10))
	}
	if _, err := conn.Write(ep.appendHead(nil, http.MethodGet, path, nil, extra...)); err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(conn, 4096)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, fmt.Errorf("bench: GET %s: %w", path, err)
	}
	want := http.StatusOK
	if o.transport == TransportWS {
		want = http.StatusSwitchingProtocols
	}
	if resp.StatusCode != want {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, &StatusError{Method: http.MethodGet, Path: path, Status: resp.StatusCode, Body: strings.TrimSpace(string(body))}
	}
	rb := newReadBuf(conn, br)
	if o.transport == TransportWS {
		if got := resp.Header.Get("Sec-WebSocket-Accept"); got != wsAccept(wsKey) {
			return nil, fmt.Errorf("bench: GET %s: bad Sec-WebSocket-Accept %q", path, got)
		}
		return &wsStream{readBuf: rb, wantDue: o.wantDue}, nil
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return nil, fmt.Errorf("bench: GET %s: Content-Type %q, want text/event-stream", path, ct)
	}
	chunked := len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked"
	return &sseStream{readBuf: rb, chunked: chunked, wantDue: o.wantDue}, nil
}

func wsAccept(key string) string {
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}

// readBuf is a stream's raw read buffer: buf[r:w] is unread.
type readBuf struct {
	conn net.Conn
	buf  []byte
	r, w int
	now  time.Time // when the last read returned
	err  error     // the error a read returned with data, for the next fill
}

const readBufSize = 64 << 10

// newReadBuf takes over conn, and the bytes br read past the response head.
func newReadBuf(conn net.Conn, br *bufio.Reader) *readBuf {
	rb := &readBuf{conn: conn, buf: make([]byte, readBufSize), now: time.Now()}
	b, _ := br.Peek(br.Buffered())
	rb.w = copy(rb.buf, b)
	return rb
}

func (rb *readBuf) Close() error { return rb.conn.Close() }

// fill reads more bytes, keeping buf[r:w]. need is how many unread bytes
// the caller wants contiguous; the buffer grows to hold them.
func (rb *readBuf) fill(need int) error {
	if rb.err != nil {
		return rb.err
	}
	if rb.r == rb.w {
		rb.r, rb.w = 0, 0
	}
	if need > len(rb.buf) {
		nb := make([]byte, max(need, 2*len(rb.buf)))
		rb.w = copy(nb, rb.buf[rb.r:rb.w])
		rb.r, rb.buf = 0, nb
	} else if rb.r > 0 && (rb.w == len(rb.buf) || rb.r+need > len(rb.buf)) {
		rb.w = copy(rb.buf, rb.buf[rb.r:rb.w])
		rb.r = 0
	}
	n, err := rb.conn.Read(rb.buf[rb.w:])
	rb.now = time.Now()
	rb.w += n
	if err != nil {
		if n > 0 {
			rb.err = err
			return nil
		}
		rb.err = err
		return err
	}
	return nil
}

// sseStream reads a Server-Sent Events body, chunked or delimited by the
// end of the connection, without copying event lines: chunk data is
// handed to the line parser as spans of the read buffer, and only a line
// that crosses a span is assembled in carry.
type sseStream struct {
	*readBuf
	chunked bool
	wantDue bool

	state int // chunked decoding state
	left  int // bytes left in the current chunk
	carry []byte

	cur     frame
	hasData bool
	typ     []byte // the event: line of the frame being read
}

const (
	chunkHeader = iota
	chunkData
	chunkDataEnd
	chunkTrailer
)

// span returns the next bytes of the body, a slice of the read buffer
// valid until the next call; io.EOF at the end of the body.
func (s *sseStream) span() ([]byte, error) {
	for {
		if !s.chunked {
			if s.r < s.w {
				b := s.buf[s.r:s.w]
				s.r = s.w
				return b, nil
			}
		} else {
			switch s.state {
			case chunkData:
				if s.r < s.w {
					n := min(s.left, s.w-s.r)
					b := s.buf[s.r : s.r+n]
					s.r += n
					s.left -= n
					if s.left == 0 {
						s.state = chunkDataEnd
					}
					return b, nil
				}
			case chunkDataEnd:
				if s.w-s.r >= 2 {
					if s.buf[s.r] != '\r' || s.buf[s.r+1] != '\n' {
						return nil, errors.New("bench: malformed chunked body: no CRLF after chunk data")
					}
					s.r += 2
					s.state = chunkHeader
					continue
				}
			case chunkHeader, chunkTrailer:
				if i := bytes.IndexByte(s.buf[s.r:s.w], '\n'); i >= 0 {
					line := bytes.TrimRight(s.buf[s.r:s.r+i], "\r")
					s.r += i + 1
					if s.state == chunkTrailer {
						if len(line) == 0 {
							return nil, io.EOF
						}
						continue
					}
					if j := bytes.IndexByte(line, ';'); j >= 0 {
						line = line[:j]
					}
					n, err := strconv.ParseUint(string(bytes.TrimSpace(line)), 16, 31)
					if err != nil {
						return nil, fmt.Errorf("bench: malformed chunk size %q", line)
					}
					if n == 0 {
						s.state = chunkTrailer
					} else {
						s.left, s.state = int(n), chunkData
					}
					continue
				}
				if s.w-s.r > 4096 {
					return nil, errors.New("bench: malformed chunked body: chunk header too long")
				}
			}
		}
		if err := s.fill(4096); err != nil {
			return nil, err
		}
	}
}

func (s *sseStream) run(handle func(*frame) error) error {
	for {
		b, err := s.span()
		if err != nil {
			return err
		}
		for len(b) > 0 {
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				s.carry = append(s.carry, b...)
				break
			}
			line := b[:i]
			if len(s.carry) > 0 {
				s.carry = append(s.carry, line...)
				line = s.carry
			}
			b = b[i+1:]
			if err := s.line(line, handle); err != nil {
				return err
			}
			s.carry = s.carry[:0]
		}
	}
}

// line parses one line of the stream; a blank line ends a frame.
func (s *sseStream) line(l []byte, handle func(*frame) error) error {
	if n := len(l); n > 0 && l[n-1] == '\r' {
		l = l[:n-1]
	}
	switch {
	case len(l) == 0:
		if !s.hasData {
			s.cur, s.typ = frame{}, s.typ[:0]
			return nil // a retry: line or a comment
		}
		s.cur.at = s.now
		s.cur.kind = kindEvent
		if s.cur.id == 0 {
			k, ok := reservedKinds[string(s.typ)]
			if !ok {
				k = kindOther
			}
			s.cur.kind = k
		}
		err := handle(&s.cur)
		s.cur, s.hasData, s.typ = frame{data: s.cur.data[:0]}, false, s.typ[:0]
		return err
	case l[0] == ':':
		return nil
	}
	name, value, _ := bytes.Cut(l, []byte(":"))
	if len(value) > 0 && value[0] == ' ' {
		value = value[1:]
	}
	switch string(name) {
	case "id":
		id, err := strconv.ParseUint(string(value), 10, 64)
		if err != nil {
			return fmt.Errorf("bench: malformed id: line %q", l)
		}
		s.cur.id = id
	case "event":
		s.typ = append(s.typ, value...)
	case "data":
		s.hasData = true
		if s.cur.id == 0 {
			s.cur.data = append(s.cur.data, envelopeData(value)...)
		} else if s.wantDue {
			s.cur.due = parseDue(value)
		}
	}
	return nil
}

// envelopeData returns the "data" member of a one-line envelope, which
// this server writes after "type" and, on session streams, "session".
func envelopeData(env []byte) []byte {
	var e struct {
		Data json.RawMessage `json:"data"`
	}
	if json.Unmarshal(env, &e) != nil {
		return nil
	}
	return e.Data
}

var dueKey = []byte(`"due":`)

// parseDue returns the number after the first "due": in an envelope, 0
// if there is none.
func parseDue(env []byte) int64 {
	i := bytes.Index(env, dueKey)
	if i < 0 {
		return 0
	}
	var n int64
	for _, c := range env[i+len(dueKey):] {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int64(c-'0')
	}
	return n
}

// wsStream reads a WebSocket connection's server frames and answers pings.
type wsStream struct {
	*readBuf
	wantDue bool
	cur     frame
	wmu     sync.Mutex // orders writes: pongs from run, control frames from writeText
	out     []byte     // the frame being written, under wmu
}

// closeError is a WebSocket close frame.
type closeError struct {
	code   int
	reason string
}

func (e *closeError) Error() string {
	return fmt.Sprintf("bench: WebSocket closed with %d %q", e.code, e.reason)
}

var idPrefix = []byte(`{"id":`)

func (s *wsStream) run(handle func(*frame) error) error {
	for {
		if s.w-s.r < 2 {
			if err := s.fill(2); err != nil {
				return err
			}
			continue
		}
		b := s.buf[s.r:s.w]
		fin, op := b[0]&0x80 != 0, b[0]&0x0f
		if b[1]&0x80 != 0 {
			return errors.New("bench: masked frame from the server")
		}
		hlen, plen := 2, uint64(b[1]&0x7f)
		switch plen {
		case 126:
			hlen = 4
		case 127:
			hlen = 10
		}
		if len(b) < hlen {
			if err := s.fill(hlen); err != nil {
				return err
			}
			continue
		}
		switch hlen {
		case 4:
			plen = uint64(binary.BigEndian.Uint16(b[2:4]))
		case 10:
			plen = binary.BigEndian.Uint64(b[2:10])
		}
		if plen > 64<<20 {
			return fmt.Errorf("bench: WebSocket frame of %d bytes", plen)
		}
		total := hlen + int(plen)
		if len(b) < total {
			if err := s.fill(total); err != nil {
				return err
			}
			continue
		}
		payload := b[hlen:total]
		s.r += total
		if !fin {
			return errors.New("bench: fragmented WebSocket message")
		}
		switch op {
		case 1: // text
			if err := s.text(payload, handle); err != nil {
				return err
			}
		case 8: // close
			ce := &closeError{code: 1005}
			if len(payload) >= 2 {
				ce.code = int(binary.BigEndian.Uint16(payload))
				ce.reason = string(payload[2:])
			}
			return ce
		case 9: // ping: answer, masked as a client must
			if err := s.writePong(payload); err != nil {
				return err
			}
		}
	}
}

func (s *wsStream) text(p []byte, handle func(*frame) error) error {
	s.cur = frame{at: s.now, data: s.cur.data[:0]}
	if bytes.HasPrefix(p, idPrefix) {
		var id uint64
		for _, c := range p[len(idPrefix):] {
			if c < '0' || c > '9' {
				break
			}
			id = id*10 + uint64(c-'0')
		}
		s.cur.id, s.cur.kind = id, kindEvent
		if s.wantDue {
			s.cur.due = parseDue(p)
		}
		return handle(&s.cur)
	}
	var head struct {
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
		Op   string          `json:"op"`
		ID   uint64          `json:"id"`
	}
	if err := json.Unmarshal(p, &head); err != nil {
		return fmt.Errorf("bench: WebSocket text frame is not an envelope: %q", p)
	}
	if head.Op != "" {
		s.cur.kind, s.cur.id = kindReply, head.ID
		s.cur.data = append(s.cur.data, head.Op...)
		return handle(&s.cur)
	}
	k, ok := reservedKinds[head.Type]
	if !ok {
		k = kindOther
	}
	s.cur.kind = k
	s.cur.data = append(s.cur.data, head.Data...)
	return handle(&s.cur)
}

func (s *wsStream) writePong(p []byte) error {
	return s.writeSmall(0x8a, p, "ping payload")
}

// writeText sends p, of at most 125 bytes, as a text message: a control
// frame such as {"op":"ack","id":N}. It is safe to call while run reads.
func (s *wsStream) writeText(p []byte) error {
	return s.writeSmall(0x81, p, "control frame")
}

// writeSmall sends p, of at most 125 bytes (what names it in the error),
// as one final frame whose first byte is b0.
func (s *wsStream) writeSmall(b0 byte, p []byte, what string) error {
	if len(p) > 125 {
		return fmt.Errorf("bench: %s over 125 bytes", what)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.out = appendMasked(s.out[:0], b0, p)
	s.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := s.conn.Write(s.out)
	return err
}

// appendMasked appends a final WebSocket frame of opcode byte b0 with
// payload p (at most 125 bytes), masked as a client must.
func appendMasked(dst []byte, b0 byte, p []byte) []byte {
	key := rand.Uint32()
	dst = append(dst, b0, 0x80|byte(len(p)))
	dst = binary.BigEndian.AppendUint32(dst, key)
	var k [4]byte
	binary.BigEndian.PutUint32(k[:], key)
	for i, c := range p {
		dst = append(dst, c^k[i%4])
	}
	return dst
}
