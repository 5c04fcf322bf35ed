package bench

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// baselineEnv is set, to the path of the Unix socket to listen on, in the
// environment of the process Run starts as its baseline server.
const baselineEnv = "LOCALBUS_BENCH_BASELINE"

// The control pipes between the bench and its baseline server. The bench
// writes a request of baseReqSize bytes to the server's standard input:
// the number of events (uint32), the size of their data (uint32) and their
// due time in Unix nanoseconds (int64, 0 for none), little-endian. The
// server publishes them and answers on its standard output with the last
// id (uint64). It starts by writing baseReady, and exits when its standard
// input ends.
const (
	baseReqSize = 16
	baseReady   = "lbbase01"
)

// ServeBaselineIfAsked makes this process the baseline server when Run
// started it as one, and then exits; otherwise it returns at once. Run
// starts its baseline by running its own executable again with a variable
// set in the environment, so that the baseline's processor time can be
// read apart from the bench's: a program that calls Run with
// Config.Baseline calls ServeBaselineIfAsked first thing in main, and a
// test binary first thing in TestMain.
func ServeBaselineIfAsked() {
	sock, ok := os.LookupEnv(baselineEnv)
	if !ok {
		return
	}
	os.Exit(serveBaseline(sock, os.Stdin, os.Stdout, os.Stderr))
}

// serveBaseline listens on sock and publishes what ctl asks for, answering
// on reply, until ctl ends. It returns the process's exit code.
func serveBaseline(sock string, ctl io.Reader, reply io.Writer, stderr io.Writer) int {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintf(stderr, "bench baseline: %v\n", err)
		return 1
	}
	s := &baseServer{ln: ln, session: "baseline"}
	s.wg.Add(1)
	go s.accept()
	defer s.close()
	if _, err := io.WriteString(reply, baseReady); err != nil {
		return 1
	}
	var req [baseReqSize]byte
	var out [8]byte
	for {
		if _, err := io.ReadFull(ctl, req[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return 0
			}
			fmt.Fprintf(stderr, "bench baseline: reading a request: %v\n", err)
			return 1
		}
		n := int(binary.LittleEndian.Uint32(req[0:]))
		size := int(binary.LittleEndian.Uint32(req[4:]))
		due := int64(binary.LittleEndian.Uint64(req[8:]))
		if n <= 0 || size < 16 {
			fmt.Fprintf(stderr, "bench baseline: bad request: %d events of %d bytes\n", n, size)
			return 1
		}
		binary.LittleEndian.PutUint64(out[:], s.publish(n, size, due))
		if _, err := reply.Write(out[:]); err != nil {
			return 1
		}
	}
}

// baseServer is the baseline: a bare server on a Unix socket that encodes
// each event once, into the same wire bytes the daemon would send, and
// writes every subscriber's share of a publish with one writev. It has no
// queues, limits, resume or filters: only what the wire needs.
type baseServer struct {
	ln      net.Listener
	session string

	// pub orders publishes: held from taking ids to handing the bytes to
	// every subscriber, so that concurrent publishers reach each
	// subscriber in id order, as the daemon's bus lock does. It also
	// guards the encoding buffers below.
	pub sync.Mutex
	p   payload
	env []byte
	sse []byte
	ws  []byte

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

func (b *baseServer) close() {
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
}

func (b *baseServer) accept() {
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
func (b *baseServer) serve(c net.Conn) {
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

// publish publishes n events of size bytes of data, carrying due when it
// is not 0, and returns the last id. It encodes the events the way the
// daemon does, once per event, and hands the same bytes to every
// subscriber.
func (b *baseServer) publish(n, size int, due int64) uint64 {
	b.pub.Lock()
	defer b.pub.Unlock()
	b.mu.Lock()
	first := b.lastID + 1
	b.lastID += uint64(n)
	last := b.lastID
	subs := b.subs
	b.mu.Unlock()
	b.p.size = size
	data := b.p.data(due)
	now := time.Now().UTC()
	// The SSE body of the batch, then its chunk framing; the WebSocket
	// frames. Each is built once and shared by every subscriber.
	sse, ws := b.sse[:0], b.ws[:0]
	needSSE, needWS := false, false
	for _, s := range subs {
		needSSE, needWS = needSSE || !s.ws, needWS || s.ws
	}
	for id := first; id <= last; id++ {
		env := append(b.env[:0], `{"id":`...)
		env = strconv.AppendUint(env, id, 10)
		env = append(env, `,"v":1,"type":"`+eventType+`","session":"`...)
		env = append(env, b.session...)
		env = append(env, `","data":`...)
		env = append(env, data...)
		env = append(env, `,"timestamp":"`...)
		env = now.AppendFormat(env, timestampLayout)
		env = append(env, `"}`...)
		b.env = env
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
	b.sse, b.ws = sse, ws
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
		s.ch <- out
	}
	return last
}
