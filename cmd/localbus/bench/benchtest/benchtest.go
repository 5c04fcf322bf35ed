package benchtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/ipc"
	"github.com/localbus/localbus/ipc/ipctest"
)

// Faults say what the server does wrong. Ids are event ids of the session
// streams; 0 means no such fault.
type Faults struct {
	// Drop is an event no subscriber receives.
	Drop uint64
	// Duplicate is an event every subscriber receives twice in a row.
	Duplicate uint64
	// Swap is an event every subscriber receives after the next one.
	Swap uint64
	// SlowPublish holds every publish request this long before the router
	// publishes it, the way a daemon that waits for its journal's fsync
	// before it answers is slow; concurrent requests wait side by side.
	SlowPublish time.Duration
}

// A Server is the router with faults on a Unix socket. It stops when the
// test that made it ends.
type Server struct {
	// Socket is the path of the Unix socket.
	Socket string
	// Hub is the hub the router serves.
	Hub *hub.Hub

	mu         sync.Mutex // guards publishing and maxPub
	publishing int
	maxPub     int
}

// MaxConcurrentPublishes returns the most publish requests the server had
// in hand at the same time so far.
func (s *Server) MaxConcurrentPublishes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxPub
}

// publish counts a publish request while the router handles it, after
// holding it for f.SlowPublish.
func (s *Server) publish(f Faults, w http.ResponseWriter, r *http.Request, next http.Handler) {
	s.mu.Lock()
	s.publishing++
	s.maxPub = max(s.maxPub, s.publishing)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.publishing--
		s.mu.Unlock()
	}()
	if f.SlowPublish > 0 {
		t := time.NewTimer(f.SlowPublish)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		}
	}
	next.ServeHTTP(w, r)
}

// New starts a server. opts configures the router; its Hub field is
// ignored, a nil Logger discards the router's log lines, and a nil
// Authenticate is ipctest.AllowAll (every caller is admin). The hub
// creates sessions on first publish and allows 1000 subscribers per bus.
func New(tb testing.TB, f Faults, opts ipc.Options) *Server {
	tb.Helper()
	h, err := hub.New(hub.Options{AutoCreate: true, Limits: bus.Limits{MaxSubscribers: 1000}})
	if err != nil {
		tb.Fatalf("hub.New: %v", err)
	}
	opts.Hub = h
	opts.Caps.MaxSubscribers = 1000
	if opts.Caps.RingSize == 0 {
		opts.Caps.RingSize = bus.DefaultRingSize
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Authenticate == nil {
		opts.Authenticate = ipctest.AllowAll
	}
	router := ipc.New(opts)
	dir := tb.TempDir()
	if len(dir) > 90 {
		d, err := os.MkdirTemp("", "benchtest")
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { os.RemoveAll(d) })
		dir = d
	}
	s := &Server{Socket: filepath.Join(dir, "lb.sock"), Hub: h}
	ln, err := net.Listen("unix", s.Socket)
	if err != nil {
		h.Close()
		tb.Fatalf("listen: %v", err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/events") {
				s.publish(f, w, r, router)
				return
			}
			if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/ws") {
				w = &wsWriter{ResponseWriter: w, f: f}
			} else if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/events") {
				w = &sseWriter{ResponseWriter: w, e: editor{f: f, ws: false}}
			}
			router.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		router.Drain()
		h.EndStreams(bus.EndShutdown)
		srv.Shutdown(ctx)
		if err := router.Wait(ctx); err != nil {
			tb.Errorf("benchtest: streams still running: %v", err)
		}
		<-served
		h.Close()
	})
	return s
}

// editor applies the faults to a stream's frames, in order.
type editor struct {
	f    Faults
	ws   bool
	held []byte // the frame Swap holds back until the next event
}

// frame returns what to send for one whole frame.
func (e *editor) frame(out, fr []byte) []byte {
	id, ok := e.id(fr)
	switch {
	case !ok:
		return append(out, fr...)
	case id == e.f.Drop:
		return out
	case id == e.f.Duplicate:
		return append(append(out, fr...), fr...)
	case id == e.f.Swap:
		e.held = append(e.held[:0], fr...)
		return out
	}
	out = append(out, fr...)
	if len(e.held) > 0 {
		out = append(out, e.held...)
		e.held = e.held[:0]
	}
	return out
}

// id returns the event id a frame carries.
func (e *editor) id(fr []byte) (uint64, bool) {
	var rest []byte
	if e.ws {
		rest, _ = bytes.CutPrefix(wsPayload(fr), []byte(`{"id":`))
	} else {
		rest, _ = bytes.CutPrefix(fr, []byte("id: "))
	}
	if len(rest) == 0 || rest[0] < '0' || rest[0] > '9' {
		return 0, false
	}
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	id, err := strconv.ParseUint(string(rest[:end]), 10, 64)
	return id, err == nil
}

// sseWriter edits an SSE stream written through the ResponseWriter. The
// router writes whole blocks in each Write.
type sseWriter struct {
	http.ResponseWriter
	e   editor
	out []byte
}

func (w *sseWriter) Write(p []byte) (int, error) {
	out := w.out[:0]
	for len(p) > 0 {
		i := bytes.Index(p, []byte("\n\n"))
		if i < 0 {
			out = append(out, p...)
			break
		}
		out = w.e.frame(out, p[:i+2])
		p = p[i+2:]
	}
	w.out = out
	if len(out) == 0 {
		return len(p), nil
	}
	_, err := w.ResponseWriter.Write(out)
	return len(p), err
}

// FlushError flushes the stream.
func (w *sseWriter) FlushError() error { return http.NewResponseController(w.ResponseWriter).Flush() }

// SetWriteDeadline sets the stream's write deadline.
func (w *sseWriter) SetWriteDeadline(t time.Time) error {
	return http.NewResponseController(w.ResponseWriter).SetWriteDeadline(t)
}

// wsWriter hands the router a connection that edits WebSocket frames.
type wsWriter struct {
	http.ResponseWriter
	f Faults
}

// Hijack implements http.Hijacker.
func (w *wsWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	fc := &wsConn{Conn: c, e: editor{f: w.f, ws: true}}
	return fc, bufio.NewReadWriter(brw.Reader, bufio.NewWriter(fc)), nil
}

// wsConn edits the server's WebSocket frames. The router writes whole
// frames in each Write (it is not a syscall.Conn, so no writev).
type wsConn struct {
	net.Conn
	mu  sync.Mutex
	e   editor
	out []byte
	buf []byte // a frame cut across writes
}

func (c *wsConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf = append(c.buf, p...)
	out := c.out[:0]
	for {
		n := wsFrameLen(c.buf)
		if n == 0 || n > len(c.buf) {
			break
		}
		out = c.e.frame(out, c.buf[:n])
		c.buf = c.buf[n:]
	}
	c.buf = append([]byte(nil), c.buf...)
	c.out = out
	if len(out) > 0 {
		if _, err := c.Conn.Write(out); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// wsFrameLen returns the length of the unmasked frame at the start of b,
// 0 if its header is not all there.
func wsFrameLen(b []byte) int {
	if len(b) < 2 {
		return 0
	}
	switch n := int(b[1] & 0x7f); n {
	case 126:
		if len(b) < 4 {
			return 0
		}
		return 4 + int(binary.BigEndian.Uint16(b[2:4]))
	case 127:
		if len(b) < 10 {
			return 0
		}
		return 10 + int(binary.BigEndian.Uint64(b[2:10]))
	default:
		return 2 + n
	}
}

// wsPayload returns a whole frame's payload.
func wsPayload(fr []byte) []byte {
	switch int(fr[1] & 0x7f) {
	case 126:
		return fr[4:]
	case 127:
		return fr[10:]
	}
	return fr[2:]
}
