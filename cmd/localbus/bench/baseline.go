package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// baseline is the machine's limit for a fan-out: a bare in-process server
// on a Unix socket that encodes each event once, into the same wire bytes
// the daemon would send, and writes every subscriber's share of a publish
// with one writev. It has no queues, limits, resume or filters: only what
// the wire needs.
type baseline struct {
	dir     string
	ln      net.Listener
	ep      endpoint
	session string

	// pub orders publishes: held from taking ids to handing the bytes to
	// every subscriber, so that concurrent publishers reach each
	// subscriber in id order, as the daemon's bus lock does.
	pub    sync.Mutex
	mu     sync.Mutex // guards subs and lastID
	subs   []*baseSub
	lastID uint64

	wg sync.WaitGroup // the accept loop and every connection's goroutine
}

// baseSub is one subscriber of the baseline: its writer takes the shared
// wire bytes of each publish from ch.
type baseSub struct {
	conn net.Conn
	ws   bool
	ch   chan []byte
}

func newBaseline() (*baseline, error) {
	dir, err := os.MkdirTemp("", "localbus-bench-")
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "baseline.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	b := &baseline{dir: dir, ln: ln, session: "baseline", ep: endpoint{network: "unix", addr: sock, host: "localbus"}}
	b.wg.Add(1)
	go b.accept()
	return b, nil
}

func (b *baseline) name() string { return "baseline" }
func (b *baseline) pid() int     { return os.Getpid() }
func (b *baseline) limits() limits {
	return limits{RingSize: 0, MaxQueuedBytes: 1 << 30, MaxSubscribers: 1 << 20, MaxBatch: 1000}
}

func (b *baseline) newSession(context.Context, int) (string, error) {
	return "/api/v1/sessions/" + b.session, nil
}

func (b *baseline) open(ctx context.Context, o streamOptions) (stream, error) {
	return openStream(ctx, b.ep, o)
}

func (b *baseline) close(context.Context) {
	b.ln.Close()
	b.mu.Lock()
	subs := b.subs
	b.subs = nil
	b.mu.Unlock()
	for _, s := range subs {
		close(s.ch)
		s.conn.Close()
	}
	b.wg.Wait()
	os.RemoveAll(b.dir)
}

func (b *baseline) accept() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.serve(c)
		}()
	}
}

// serve answers one stream request and then writes what is published.
func (b *baseline) serve(c net.Conn) {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		c.Close()
		return
	}
	c.SetReadDeadline(time.Time{})
	s := &baseSub{conn: c, ws: strings.HasSuffix(req.URL.Path, "/ws"), ch: make(chan []byte, 64)}
	b.mu.Lock()
	ready := `{"v":1,"type":"stream:ready","session":"` + b.session + `","data":{"cursor":` + strconv.FormatUint(b.lastID, 10) +
		`,"lastId":` + strconv.FormatUint(b.lastID, 10) + `,"earliestId":null,"epoch":"baseline","types":null,"maxQueued":2048},"timestamp":"` +
		time.Now().UTC().Format(timestampLayout) + `"}`
	var head []byte
	if s.ws {
		head = []byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
			wsAccept(req.Header.Get("Sec-WebSocket-Key")) + "\r\n\r\n")
		head = appendWSFrame(head, []byte(ready))
	} else {
		head = []byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n")
		body := "retry: 3000\n\nevent: stream:ready\ndata: " + ready + "\n\n"
		head = append(head, strconv.FormatInt(int64(len(body)), 16)+"\r\n"+body+"\r\n"...)
	}
	if _, err := c.Write(head); err != nil {
		b.mu.Unlock()
		c.Close()
		return
	}
	b.subs = append(b.subs, s)
	b.mu.Unlock()
	var bufs net.Buffers
	for p := range s.ch {
		bufs = append(bufs[:0], p)
	more:
		for len(bufs) < 64 {
			select {
			case p, ok := <-s.ch:
				if !ok {
					break more
				}
				bufs = append(bufs, p)
			default:
				break more
			}
		}
		c.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := bufs.WriteTo(c); err != nil {
			c.Close()
			for range s.ch {
			}
			return
		}
	}
}

const timestampLayout = "2006-01-02T15:04:05.000Z07:00"

// appendWSFrame appends an unmasked text frame.
func appendWSFrame(dst, p []byte) []byte {
	switch n := len(p); {
	case n < 126:
		dst = append(dst, 0x81, byte(n))
	case n < 1<<16:
		dst = append(dst, 0x81, 126)
		dst = binary.BigEndian.AppendUint16(dst, uint16(n))
	default:
		dst = append(dst, 0x81, 127)
		dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	}
	return append(dst, p...)
}

// basePublisher encodes events the way the daemon does, once per event,
// and hands the same bytes to every subscriber. Like the daemon's
// publishers, several may publish at once.
type basePublisher struct {
	b   *baseline
	p   payload
	env []byte
	sse []byte
	ws  []byte
}

func (b *baseline) publisher(_ context.Context, _ string, size int) (publisher, error) {
	return &basePublisher{b: b, p: payload{size: size}}, nil
}

func (p *basePublisher) Close() error { return nil }

func (p *basePublisher) batch(ctx context.Context, n int) (uint64, error) {
	return p.publish(ctx, n, 0)
}

func (p *basePublisher) one(ctx context.Context, due int64) (uint64, error) {
	return p.publish(ctx, 1, due)
}

func (p *basePublisher) publish(ctx context.Context, n int, due int64) (uint64, error) {
	b := p.b
	b.pub.Lock()
	defer b.pub.Unlock()
	b.mu.Lock()
	first := b.lastID + 1
	b.lastID += uint64(n)
	last := b.lastID
	subs := b.subs
	b.mu.Unlock()
	data := p.p.data(due)
	now := time.Now().UTC()
	// The SSE body of the batch, then its chunk framing; the WebSocket
	// frames. Each is built once and shared by every subscriber.
	sse, ws := p.sse[:0], p.ws[:0]
	needSSE, needWS := false, false
	for _, s := range subs {
		needSSE, needWS = needSSE || !s.ws, needWS || s.ws
	}
	for id := first; id <= last; id++ {
		env := append(p.env[:0], `{"id":`...)
		env = strconv.AppendUint(env, id, 10)
		env = append(env, `,"v":1,"type":"`+eventType+`","session":"`...)
		env = append(env, b.session...)
		env = append(env, `","data":`...)
		env = append(env, data...)
		env = append(env, `,"timestamp":"`...)
		env = now.AppendFormat(env, timestampLayout)
		env = append(env, `"}`...)
		p.env = env
		if needSSE {
			sse = append(sse, "id: "...)
			sse = strconv.AppendUint(sse, id, 10)
			sse = append(sse, "\nevent: "+eventType+"\ndata: "...)
			sse = append(sse, env...)
			sse = append(sse, "\n\n"...)
		}
		if needWS {
			ws = appendWSFrame(ws, env)
		}
	}
	p.sse, p.ws = sse, ws
	var sseChunk, wsBytes []byte
	if needSSE {
		sseChunk = strconv.AppendInt(make([]byte, 0, len(sse)+16), int64(len(sse)), 16)
		sseChunk = append(sseChunk, "\r\n"...)
		sseChunk = append(sseChunk, sse...)
		sseChunk = append(sseChunk, "\r\n"...)
	}
	if needWS {
		wsBytes = append([]byte(nil), ws...)
	}
	for _, s := range subs {
		out := sseChunk
		if s.ws {
			out = wsBytes
		}
		select {
		case s.ch <- out:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return last, nil
}
