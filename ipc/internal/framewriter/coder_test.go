package framewriter

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/localbus/localbus/bus"
)

// These tests pin what WS assumes of github.com/coder/websocket (see the
// package doc). Each fails if the assumption stops holding after an
// upgrade of the module.

const wait = 10 * time.Second

// recConn records, once armed, every Write and deadline change that
// reaches the connection net/http hands over. It is not a syscall.Conn,
// so the stream writer copies each writeText into one Write too.
type recConn struct {
	net.Conn
	armed *atomic.Bool

	mu        sync.Mutex
	writes    [][]byte
	deadlines int
}

func (c *recConn) Write(p []byte) (int, error) {
	if c.armed.Load() {
		c.mu.Lock()
		c.writes = append(c.writes, append([]byte(nil), p...))
		c.mu.Unlock()
	}
	return c.Conn.Write(p)
}

func (c *recConn) SetDeadline(t time.Time) error { c.noteDeadline(); return c.Conn.SetDeadline(t) }
func (c *recConn) SetWriteDeadline(t time.Time) error {
	c.noteDeadline()
	return c.Conn.SetWriteDeadline(t)
}

func (c *recConn) noteDeadline() {
	if c.armed.Load() {
		c.mu.Lock()
		c.deadlines++
		c.mu.Unlock()
	}
}

func (c *recConn) recorded() ([][]byte, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]byte(nil), c.writes...), c.deadlines
}

// recListener hands out recConns.
type recListener struct {
	net.Listener
	armed atomic.Bool
	conns chan *recConn
	plain bool // hand out the connections themselves
}

func (l *recListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	rc := &recConn{Conn: c, armed: &l.armed}
	select {
	case l.conns <- rc:
	default:
	}
	if l.plain {
		return c, nil
	}
	return rc, nil
}

// wsPair serves one WebSocket upgrade with AcceptWS and dials it with
// coder/websocket's client. It returns the server side (recording from
// the moment AcceptWS returned), its recording connection and the client.
func wsPair(t *testing.T) (*WS, *recConn, *websocket.Conn) {
	return wsPairOn(t, true)
}

// wsPairOn is wsPair; without record the server's connection is the TCP
// connection itself, so the stream writer uses writev, and the recConn
// returned records nothing.
func wsPairOn(t *testing.T, record bool) (*WS, *recConn, *websocket.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rl := &recListener{Listener: ln, conns: make(chan *recConn, 1), plain: !record}
	accepted := make(chan *WS, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := AcceptWS(w, r, nil, wait)
		if err != nil {
			t.Errorf("AcceptWS: %v", err)
			close(accepted)
			return
		}
		rl.armed.Store(true)
		accepted <- s
	})}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(rl)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-served
	})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	client, _, err := websocket.Dial(ctx, "ws://"+ln.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.CloseNow() })
	var s *WS
	select {
	case s = <-accepted:
	case <-ctx.Done():
		t.Fatal("no upgrade")
	}
	if s == nil {
		t.FailNow()
	}
	t.Cleanup(func() { s.c.CloseNow() })
	return s, <-rl.conns, client
}

// frameInfo parses one unmasked server frame at the start of p: its
// opcode, FIN bit and total length (header and payload).
func frameInfo(p []byte) (opcode byte, fin bool, size int, ok bool) {
	if len(p) < 2 || p[1]&0x80 != 0 {
		return 0, false, 0, false
	}
	h, n := 2, int(p[1]&0x7f)
	switch n {
	case 126:
		if len(p) < 4 {
			return 0, false, 0, false
		}
		h, n = 4, int(binary.BigEndian.Uint16(p[2:]))
	case 127:
		if len(p) < 10 {
			return 0, false, 0, false
		}
		h, n = 10, int(binary.BigEndian.Uint64(p[2:]))
	}
	return p[0] & 0x0f, p[0]&0x80 != 0, h + n, h+n <= len(p)
}

// splitFrames splits p into whole frames, or fails the test.
func splitFrames(t *testing.T, p []byte) (opcodes []byte) {
	t.Helper()
	for len(p) > 0 {
		op, fin, size, ok := frameInfo(p)
		if !ok || !fin {
			t.Fatalf("a write of %d bytes does not hold whole final frames: % x", len(p), p[:min(len(p), 16)])
		}
		opcodes = append(opcodes, op)
		p = p[size:]
	}
	return opcodes
}

// readAll reads the client's messages in the background, answering pings
// as coder/websocket's Read does, until the connection closes; it returns
// the text messages and the close error.
func readAll(client *websocket.Conn) <-chan readResult {
	out := make(chan readResult, 1)
	go func() {
		var r readResult
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		for {
			_, p, err := client.Read(ctx)
			if err != nil {
				r.err = err
				out <- r
				return
			}
			r.msgs = append(r.msgs, string(p))
		}
	}()
	return out
}

type readResult struct {
	msgs []string
	err  error
}

// TestCoderWritesEachControlFrameWholeInOneWrite pins the write pattern
// wsConn's lock relies on: coder/websocket writes every frame it sends on
// its own (ping, pong, close, even a close with the longest reason) in
// exactly one Write of the connection, header and payload together, never
// a part of a frame and never two frames, and never a data frame.
func TestCoderWritesEachControlFrameWholeInOneWrite(t *testing.T) {
	s, rc, client := wsPair(t)
	got := readAll(client)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	// The pong needs a reader on the server: the client's Read answers
	// the ping, the server's Read takes the pong.
	serverRead := make(chan error, 1)
	go func() {
		_, _, err := s.c.Read(ctx)
		serverRead <- err
	}()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	// A ping from the client makes the server write a pong.
	clientPing := make(chan error, 1)
	go func() { clientPing <- client.Ping(ctx) }()
	if err := <-clientPing; err != nil {
		t.Fatalf("client Ping: %v", err)
	}
	reason := strings.Repeat("r", 123) // the most a close frame holds
	if err := s.c.Close(websocket.StatusGoingAway, reason); err != nil {
		t.Fatalf("Close: %v", err)
	}
	<-serverRead
	r := <-got
	if websocket.CloseStatus(r.err) != websocket.StatusGoingAway {
		t.Fatalf("the client read %v, want close 1001", r.err)
	}
	writes, _ := rc.recorded()
	var ops []byte
	for _, w := range writes {
		o := splitFrames(t, w)
		if len(o) != 1 {
			t.Fatalf("one write held %d frames (opcodes %v), want one", len(o), o)
		}
		if o[0] < 0x8 {
			t.Fatalf("coder/websocket wrote a data frame (opcode %#x) on its own", o[0])
		}
		ops = append(ops, o[0])
	}
	want := []byte{0x9, 0xa, 0x8} // ping, pong, close
	if string(ops) != string(want) {
		t.Fatalf("coder/websocket wrote frames with opcodes % x, want % x", ops, want)
	}
}

// TestOwnFramesInterleaveWithCoderPingsAndClose: text messages written by
// WS.Write from one goroutine while coder/websocket pings from another
// reach a coder/websocket client whole and in order, and the close
// handshake ends the stream cleanly after them. Every Write on the
// connection holds whole frames only.
func TestOwnFramesInterleaveWithCoderPingsAndClose(t *testing.T) {
	t.Run("writev", func(t *testing.T) { testInterleave(t, false) })
	t.Run("write", func(t *testing.T) { testInterleave(t, true) })
}

func testInterleave(t *testing.T, record bool) {
	s, rc, client := wsPairOn(t, record)
	if !record && canWritev && s.conn.vc.raw == nil {
		t.Fatal("a TCP connection should use writev")
	}
	got := readAll(client)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	serverRead := make(chan error, 1)
	go func() {
		_, _, err := s.c.Read(ctx)
		serverRead <- err
	}()

	const n = 2000
	stopPings := make(chan struct{})
	pinged := make(chan int, 1)
	go func() {
		k := 0
		defer func() { pinged <- k }()
		for {
			select {
			case <-stopPings:
				return
			default:
			}
			if s.Ping(ctx) != nil {
				return
			}
			k++
		}
	}()
	var want []string
	wb := GetBuf()
	for i := 0; i < n; i++ {
		msg := fmt.Sprintf(`{"n":%d,"pad":"%s"}`, i, strings.Repeat("x", i%300))
		want = append(want, msg)
		if err := s.Write(wb, nil, []byte(msg), false); err != nil {
			t.Fatalf("Write %d: %v", i, err)
		}
	}
	PutBuf(wb)
	close(stopPings)
	if k := <-pinged; k == 0 {
		t.Fatal("no ping completed while writing")
	}
	s.Close(bus.EndShutdown)
	<-serverRead
	r := <-got
	if websocket.CloseStatus(r.err) != websocket.StatusGoingAway {
		t.Fatalf("the client read %v, want close 1001", r.err)
	}
	if len(r.msgs) != n {
		t.Fatalf("the client read %d messages, want %d", len(r.msgs), n)
	}
	for i := range want {
		if r.msgs[i] != want[i] {
			t.Fatalf("message %d = %.40q, want %.40q", i, r.msgs[i], want[i])
		}
	}
	writes, _ := rc.recorded()
	for _, w := range writes {
		splitFrames(t, w)
	}
}

// TestWriteAfterCoderSentCloseFails: once coder/websocket's close frame
// went out (seen as a Write starting with a close header), no message may
// follow it.
func TestWriteAfterCoderSentCloseFails(t *testing.T) {
	s, _, client := wsPair(t)
	got := readAll(client)
	s.Close(bus.EndReload)
	r := <-got
	if code := websocket.CloseStatus(r.err); code != websocket.StatusGoingAway {
		t.Fatalf("the client read %v, want close 1001", r.err)
	}
	wb := GetBuf()
	defer PutBuf(wb)
	if err := s.Write(wb, nil, []byte(`{}`), false); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after the close frame = %v, want net.ErrClosed", err)
	}
}

// TestCoderSetsNoDeadlineOnTheConnection: coder/websocket bounds its
// writes with contexts, never with the connection's deadlines, so the
// deadlines the stream writer sets and clears cannot cut its frames off
// (nor it ours).
func TestCoderSetsNoDeadlineOnTheConnection(t *testing.T) {
	s, rc, client := wsPair(t)
	got := readAll(client)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	serverRead := make(chan error, 1)
	go func() {
		_, _, err := s.c.Read(ctx)
		serverRead <- err
	}()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	s.Close(bus.EndLagged)
	<-serverRead
	<-got
	if _, n := rc.recorded(); n != 0 {
		t.Fatalf("coder/websocket set the connection's deadlines %d times", n)
	}
}

// TestAcceptHijacksThroughOurResponseWriter: Accept takes the connection
// through the ResponseWriter it is given, so the wsConn (and its lock)
// sits under every byte coder/websocket writes.
func TestAcceptHijacksThroughOurResponseWriter(t *testing.T) {
	s, _, _ := wsPair(t)
	if s.conn == nil {
		t.Fatal("Accept did not call the hijacker's Hijack")
	}
}
