package ipc_test

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/ipc"
	"github.com/localbus/localbus/ipc/ipctest"
)

// rawStream sends a raw request on a new connection and returns the
// connection's reader after the response head, with the head.
func rawStream(t *testing.T, srv *ipctest.Server, request string) (*http.Response, *bufio.Reader, func()) {
	t.Helper()
	conn, err := srv.Dial(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(wait))
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp, br, func() { conn.Close() }
}

// TestSSEStreamOnATakenOverConnection pins the response of a stream the
// router writes itself: status, headers, a chunked body that ends with the
// stream, and Connection: close, since the connection cannot serve another
// request after it.
func TestSSEStreamOnATakenOverConnection(t *testing.T) {
	srv := newServer(t)
	createSession(t, srv, "s")
	// A second request pipelined behind the stream is never answered.
	resp, br, closeConn := rawStream(t, srv, "GET /api/v1/sessions/s/events HTTP/1.1\r\nHost: localbus\r\n\r\nGET /healthz HTTP/1.1\r\nHost: localbus\r\n\r\n")
	defer closeConn()
	if resp.StatusCode != http.StatusOK || !resp.Close || len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
		t.Errorf("response = %d, close %v, transfer encoding %v; want 200, close, chunked", resp.StatusCode, resp.Close, resp.TransferEncoding)
	}
	for name, want := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"} {
		if got := resp.Header.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if _, err := http.ParseTime(resp.Header.Get("Date")); err != nil {
		t.Errorf("Date = %q: %v", resp.Header.Get("Date"), err)
	}
	srv.Publish(t, "s", ev("a:b", `1`))
	s, _ := srv.Hub.Session("s")
	s.Bus.EndStreams(bus.EndReload)
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the stream to its end: %v", err)
	}
	for _, want := range []string{"retry: 3000\n\n", "event: stream:ready\n", "id: 1\nevent: a:b\n", "event: stream:closed\n"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("stream %q lacks %q", body, want)
		}
	}
	if rest, _ := io.ReadAll(br); len(rest) != 0 {
		t.Errorf("after the stream the connection carried %q, want nothing", rest)
	}
}

// TestSSEStreamForHTTP10EndsWithTheConnection: an HTTP/1.0 client gets a
// body that ends when the connection does, not chunks.
func TestSSEStreamForHTTP10EndsWithTheConnection(t *testing.T) {
	srv := newServer(t)
	createSession(t, srv, "s")
	resp, br, closeConn := rawStream(t, srv, "GET /api/v1/sessions/s/events HTTP/1.0\r\nHost: localbus\r\n\r\n")
	defer closeConn()
	if resp.ProtoMajor != 1 || resp.ProtoMinor != 0 || len(resp.TransferEncoding) != 0 {
		t.Errorf("response %s, transfer encoding %v; want HTTP/1.0 without chunks", resp.Proto, resp.TransferEncoding)
	}
	s, _ := srv.Hub.Session("s")
	s.Bus.EndStreams(bus.EndShutdown)
	body, err := io.ReadAll(br)
	if err != nil || !strings.HasPrefix(string(body), "retry: 3000\n\nevent: stream:ready\n") || !strings.HasSuffix(string(body), "\n\n") {
		t.Errorf("body = %q, %v; want the stream up to the end of the connection", body, err)
	}
}

// TestClosedClientLeavesAtOnce: a client that closes its connection is
// removed from the bus at once, not at the next keepalive, over SSE and
// WebSocket, so it never holds a subscriber place.
func TestClosedClientLeavesAtOnce(t *testing.T) {
	for _, kind := range []string{"events", "ws"} {
		t.Run(kind, func(t *testing.T) {
			srv := ipctest.New(t, ipctest.Options{Hub: hubOpts(), Handler: ipc.Options{Settings: ipc.Settings{Keepalive: time.Hour}}})
			createSession(t, srv, "s")
			s, _ := srv.Hub.Session("s")
			if kind == "events" {
				st := srv.OpenSSE(t, "/api/v1/sessions/s/events", nil)
				st.MustNext(t)
				st.Close()
			} else {
				c := srv.OpenWS(t, "/api/v1/sessions/s/ws", nil)
				ipctest.MustReadEnvelope(t, c)
				c.CloseNow()
			}
			bustest.Eventually(t, wait, "the closed client to leave", func() bool { return s.Bus.Stats().Subscribers == 0 })
		})
	}
}

// TestWebSocketControlFrameRightAfterTheUpgrade: a control frame that
// arrives in the same packet as the upgrade request is read and answered.
func TestWebSocketControlFrameRightAfterTheUpgrade(t *testing.T) {
	srv := newServer(t)
	createSession(t, srv, "s")
	frame := []byte(`{"op":"set","types":["a:b"]}`)
	mask := []byte{1, 2, 3, 4}
	raw := []byte{0x81, 0x80 | byte(len(frame))}
	raw = append(raw, mask...)
	for i, c := range frame {
		raw = append(raw, c^mask[i%4])
	}
	req := "GET /api/v1/sessions/s/ws HTTP/1.1\r\nHost: localbus\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n" + string(raw)
	resp, br, closeConn := rawStream(t, srv, req)
	defer closeConn()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade = %d", resp.StatusCode)
	}
	// stream:ready, then the reply to the control frame, in some order
	// after it: read text frames until the reply.
	for range 3 {
		hdr := make([]byte, 2)
		if _, err := io.ReadFull(br, hdr); err != nil {
			t.Fatal(err)
		}
		n := int(hdr[1] & 0x7f)
		if n == 126 {
			ext := make([]byte, 2)
			io.ReadFull(br, ext)
			n = int(ext[0])<<8 | int(ext[1])
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(br, p); err != nil {
			t.Fatal(err)
		}
		if string(p) == `{"op":"subscribed","types":["a:b"]}` {
			return
		}
	}
	t.Fatal("no reply to the control frame sent with the upgrade request")
}

// TestWebSocketCloseHandshakeWithEventsQueued: the client's close frame
// ends the stream cleanly while the writer still has events to send (the
// writer sends none after the close frame went out).
func TestWebSocketCloseHandshakeWithEventsQueued(t *testing.T) {
	srv := newServer(t)
	createSession(t, srv, "s")
	ctx := testCtx(t)
	c := srv.OpenWS(t, "/api/v1/sessions/s/ws", nil)
	ipctest.MustReadEnvelope(t, c)
	for i := range 50 {
		srv.Publish(t, "s", ev("a:b", strings.Repeat("1", i+1)))
	}
	if err := c.Close(websocket.StatusNormalClosure, "done"); err != nil {
		t.Fatalf("close handshake: %v", err)
	}
	if _, _, err := c.Read(ctx); err == nil {
		t.Errorf("read after the close handshake succeeded")
	}
	s, _ := srv.Hub.Session("s")
	bustest.Eventually(t, wait, "the stream to end", func() bool { return s.Bus.Stats().Subscribers == 0 })
}
