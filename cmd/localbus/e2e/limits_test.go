package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// sseFrame is one Server-Sent Event.
type sseFrame struct {
	event string
	id    uint64 // 0 when the frame has no id: line
	data  string
}

// sseStream reads a Server-Sent Events response in a goroutine of its own.
type sseStream struct {
	frames chan sseFrame
	body   io.ReadCloser
	done   chan struct{}
}

// openSSE opens an SSE stream and fails the test unless it answers 200. The
// stream is closed when the test ends.
func openSSE(t *testing.T, client *http.Client, url string, header ...string) *sseStream {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	// The timeout bounds the wait for the headers only: the stream itself
	// lives until the test closes it.
	type result struct {
		resp *http.Response
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := client.Do(req)
		got <- result{resp, err}
	}()
	var res result
	select {
	case res = <-got:
	case <-ctx.Done():
		t.Fatalf("GET %s: no answer within %v", url, wait)
	}
	if res.err != nil {
		t.Fatalf("GET %s: %v", url, res.err)
	}
	if res.resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.resp.Body)
		res.resp.Body.Close()
		t.Fatalf("GET %s = %d %s, want 200", url, res.resp.StatusCode, b)
	}
	s := &sseStream{frames: make(chan sseFrame, 4096), body: res.resp.Body, done: make(chan struct{})}
	go s.read()
	t.Cleanup(s.close)
	return s
}

func (s *sseStream) read() {
	defer close(s.done)
	defer close(s.frames)
	sc := bufio.NewScanner(s.body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var f sseFrame
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if f.event != "" || f.data != "" {
				s.frames <- f
			}
			f = sseFrame{}
		case strings.HasPrefix(line, "event: "):
			f.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			f.id, _ = strconv.ParseUint(strings.TrimPrefix(line, "id: "), 10, 64)
		case strings.HasPrefix(line, "data: "):
			f.data = strings.TrimPrefix(line, "data: ")
		}
	}
}

// close ends the stream and waits for its reader.
func (s *sseStream) close() {
	s.body.Close()
	<-s.done
}

// next returns the next frame, failing the test if none comes within wait
// or the stream ended.
func (s *sseStream) next(t *testing.T) sseFrame {
	t.Helper()
	select {
	case f, ok := <-s.frames:
		if !ok {
			t.Fatal("the SSE stream ended")
		}
		return f
	case <-time.After(wait):
		t.Fatalf("no SSE frame within %v", wait)
		return sseFrame{}
	}
}

// slowLoris opens a connection and sends a request's headers one byte
// every interval, never finishing them. It reports how long the server
// took to cut the connection, and whether it answered anything first; a
// connection still open after the deadline is an error.
func slowLoris(network, addr string, interval, deadline time.Duration) (cut time.Duration, answered bool, err error) {
	conn, err := net.DialTimeout(network, addr, wait)
	if err != nil {
		return 0, false, err
	}
	defer conn.Close()
	began := time.Now()
	conn.SetDeadline(began.Add(deadline))
	headers := "GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + strings.Repeat("a", 4096)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := 0; i < len(headers); i++ {
			if _, err := conn.Write([]byte{headers[i]}); err != nil {
				return // cut
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	defer func() {
		close(stop)
		wg.Wait()
	}()

	buf := make([]byte, 512)
	n, rerr := conn.Read(buf)
	cut = time.Since(began)
	var ne net.Error
	if errors.As(rerr, &ne) && ne.Timeout() {
		return cut, n > 0, fmt.Errorf("still open after %v", deadline)
	}
	return cut, n > 0, nil
}

// TestSlowLorisIsCutWhileAStreamKeepsFlowing opens 50 connections (half on
// TCP, half on the socket) that send their headers a byte at a time, on a
// daemon started with --read-header-timeout 1s. Each must be cut at about
// that time, while an SSE client receives, with no gap, every event a
// publisher sends throughout.
func TestSlowLorisIsCutWhileAStreamKeepsFlowing(t *testing.T) {
	const (
		attackers  = 50
		headerTime = time.Second
	)
	d := start(t, setup{tcp: true, args: []string{"--read-header-timeout", headerTime.String()}})
	root := d.client(false)
	if r := do(t, root, d.url(false, "/api/v1/sessions"), request{method: "POST", body: `{"id":"s1"}`}); r.status != s201 {
		t.Fatalf("create s1 = %d %s", r.status, r.body)
	}
	stream := openSSE(t, root, d.url(false, "/api/v1/sessions/s1/events"))
	if f := stream.next(t); f.event != "stream:ready" {
		t.Fatalf("first frame %q, want stream:ready", f.event)
	}

	// The publisher runs until the attack is over.
	stopPub := make(chan struct{})
	pubDone := make(chan struct{})
	var (
		pubMu     sync.Mutex
		published uint64
		pubErr    error
	)
	publishedSoFar := func() uint64 { pubMu.Lock(); defer pubMu.Unlock(); return published }
	pubFailed := func() bool { pubMu.Lock(); defer pubMu.Unlock(); return pubErr != nil }
	go func() {
		defer close(pubDone)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		client := d.client(false)
		for n := 1; ; n++ {
			select {
			case <-stopPub:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			req, _ := http.NewRequestWithContext(ctx, "POST", d.url(false, "/api/v1/sessions/s1/events"),
				strings.NewReader(fmt.Sprintf(`{"type":"load:tick","data":{"n":%d}}`, n)))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err == nil {
				var pr struct {
					LastID uint64 `json:"lastId"`
				}
				err = json.NewDecoder(resp.Body).Decode(&pr)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("publish %d: status %d", n, resp.StatusCode)
				}
				pubMu.Lock()
				published = pr.LastID
				pubMu.Unlock()
			}
			cancel()
			if err != nil {
				pubMu.Lock()
				pubErr = err
				pubMu.Unlock()
				return
			}
		}
	}()

	type outcome struct {
		cut      time.Duration
		answered bool
		err      error
	}
	results := make(chan outcome, attackers)
	var wg sync.WaitGroup
	for i := range attackers {
		network, addr := "tcp", d.tcp
		if i%2 == 1 {
			network, addr = "unix", d.Socket
		}
		wg.Go(func() {
			cut, answered, err := slowLoris(network, addr, 50*time.Millisecond, 4*headerTime+5*time.Second)
			results <- outcome{cut, answered, err}
		})
	}
	wg.Wait()
	close(results)
	// The publisher goes on until the attack is over and at least 20 events
	// went out, so a loaded machine that publishes slowly still checks a
	// stream of some length; at least one of them was acknowledged while
	// the attack ran.
	duringAttack := publishedSoFar()
	eventually(t, wait, "20 events published", func() bool { return publishedSoFar() >= 20 || pubFailed() })
	close(stopPub)
	<-pubDone
	if pubErr == nil && duringAttack == 0 {
		t.Fatalf("no event was published while the attack ran")
	}
	if pubErr != nil {
		t.Fatalf("the publisher failed during the attack: %v", pubErr)
	}

	var slowest time.Duration
	for r := range results {
		if r.err != nil {
			t.Errorf("slow-loris connection: %v", r.err)
			continue
		}
		// The attacker's clock starts before the daemon's (dial, then the
		// daemon accepts and starts its read), so on a loaded machine a cut
		// can look a little early; half the timeout still proves it waited.
		if r.cut < headerTime/2 {
			t.Errorf("a slow-loris connection was cut after %v, before the %v header timeout", r.cut, headerTime)
		}
		slowest = max(slowest, r.cut)
	}
	if slowest > 4*headerTime {
		t.Errorf("the slowest slow-loris connection was cut after %v, want about %v", slowest, headerTime)
	}

	// Every event published during the attack reached the stream, in order.
	for want := uint64(1); want <= published; {
		f := stream.next(t)
		if f.id == 0 {
			if strings.HasPrefix(f.event, "stream:") && f.event != "stream:slow" {
				t.Fatalf("the stream got %s %s during the attack", f.event, f.data)
			}
			continue
		}
		if f.id != want {
			t.Fatalf("SSE id %d, want %d: the stream lost events", f.id, want)
		}
		want++
	}
	t.Logf("%d slow-loris connections cut by %v; %d events streamed meanwhile", attackers, slowest, published)
}

func TestIdleKeepAliveConnectionIsClosed(t *testing.T) {
	d := start(t, setup{args: []string{"--idle-timeout", "1s"}})
	conn, err := net.DialTimeout("unix", d.Socket, wait)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(wait))
	br := bufio.NewReader(conn)
	fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: localbus\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != s200 || resp.Close {
		t.Fatalf("healthz = %d (close %v), want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
	}
	idle := time.Now()
	n, err := br.Read(make([]byte, 1))
	if n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("idle connection read = %d, %v; want EOF when the daemon closes it", n, err)
	}
	if took := time.Since(idle); took < 900*time.Millisecond || took > 5*time.Second {
		t.Errorf("idle connection closed after %v, want about 1s", took)
	}
}

func TestLimitsRefuseWithAClearStatusAndJSON(t *testing.T) {
	d := start(t, setup{args: []string{
		"--max-event-bytes", "1024", "--max-body-bytes", "4096", "--max-header-bytes", "1024", "--max-sessions", "3",
	}})
	root := d.client(false)
	big := func(n int) string { return `{"type":"load:big","data":"` + strings.Repeat("x", n) + `"}` }
	var batch []string
	for range 10 {
		batch = append(batch, big(500))
	}
	tests := []struct {
		name string
		req  request
		want int
		code string
	}{
		{"event over max_event_bytes", request{method: "POST", path: "/api/v1/sessions/s1/events", body: big(2000)}, http.StatusRequestEntityTooLarge, "event_too_large"},
		// Like curl with a large body, the client waits for 100 Continue: the
		// daemon refuses by Content-Length without asking for the body.
		{"body over max_body_bytes", request{method: "POST", path: "/api/v1/sessions/s1/events", body: "[" + strings.Join(batch, ",") + "]", header: []string{"Expect", "100-continue"}}, http.StatusRequestEntityTooLarge, "body_too_large"},
		{"headers over max_header_bytes", request{path: "/api/v1/sessions", header: []string{"X-Pad", strings.Repeat("p", 2048)}}, http.StatusRequestHeaderFieldsTooLarge, "headers_too_large"},
		{"create within max_sessions", request{method: "POST", path: "/api/v1/sessions", body: `{"id":"a"}`}, s201, ""},
		{"publish creates within max_sessions", request{method: "POST", path: "/api/v1/sessions/b/events", body: big(10)}, s200, ""},
		{"create the last session", request{method: "POST", path: "/api/v1/sessions", body: `{"id":"c"}`}, s201, ""},
		{"create past max_sessions", request{method: "POST", path: "/api/v1/sessions", body: `{"id":"d"}`}, http.StatusTooManyRequests, "session_limit"},
		{"publish past max_sessions", request{method: "POST", path: "/api/v1/sessions/e/events", body: big(10)}, http.StatusTooManyRequests, "session_limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := do(t, root, d.url(false, tt.req.path), tt.req)
			if r.status != tt.want {
				t.Fatalf("%s %s = %d %s, want %d", methodOf(tt.req), tt.req.path, r.status, r.body, tt.want)
			}
			if tt.code == "" {
				return
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
			if !strings.Contains(r.body, `"code":"`+tt.code+`"`) {
				t.Errorf("body = %s, want error code %s", r.body, tt.code)
			}
		})
	}
	// Far past the limit the HTTP server refuses by itself, before the
	// router: still a 431, in plain text.
	r := do(t, root, d.url(false, "/healthz"), request{header: []string{"X-Pad", strings.Repeat("p", 64<<10)}})
	if r.status != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("64 KiB of headers = %d %s, want 431", r.status, r.body)
	}
}

func TestSubscriberLimitsPerBusAndInTotal(t *testing.T) {
	d := start(t, setup{args: []string{"--max-subscribers", "1", "--max-subscribers-total", "2"}})
	root := d.client(false)
	for _, id := range []string{"a", "b", "c"} {
		if r := do(t, root, d.url(false, "/api/v1/sessions"), request{method: "POST", body: `{"id":"` + id + `"}`}); r.status != s201 {
			t.Fatalf("create %s = %d %s", id, r.status, r.body)
		}
	}
	ready := func(s *sseStream) {
		t.Helper()
		if f := s.next(t); f.event != "stream:ready" {
			t.Fatalf("first frame %s %s, want stream:ready", f.event, f.data)
		}
	}
	refused := func(s *sseStream, what string) {
		t.Helper()
		f := s.next(t)
		var env struct {
			Data struct {
				Code string `json:"code"`
			} `json:"data"`
		}
		if f.event != "stream:error" || json.Unmarshal([]byte(f.data), &env) != nil || env.Data.Code != "subscriber_limit" {
			t.Fatalf("%s: frame %s %s, want stream:error with code subscriber_limit", what, f.event, f.data)
		}
		select {
		case _, open := <-s.frames:
			if open {
				t.Errorf("%s: the refused stream went on", what)
			}
		case <-time.After(wait):
			t.Errorf("%s: the refused stream did not end", what)
		}
	}

	a1 := openSSE(t, root, d.url(false, "/api/v1/sessions/a/events"))
	ready(a1)
	refused(openSSE(t, root, d.url(false, "/api/v1/sessions/a/events")), "second subscriber of a")
	ready(openSSE(t, root, d.url(false, "/api/v1/sessions/b/events")))
	refused(openSSE(t, root, d.url(false, "/api/v1/sessions/c/events")), "third subscriber in total")

	// Over WebSocket the refusal is the same frame, then close code 1013.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://localbus/api/v1/sessions/c/ws", &websocket.DialOptions{HTTPClient: root})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	_, msg, err := c.Read(ctx)
	if err != nil || !strings.Contains(string(msg), `"type":"stream:error"`) || !strings.Contains(string(msg), `"subscriber_limit"`) {
		t.Errorf("WebSocket first frame = %s, %v; want stream:error subscriber_limit", msg, err)
	}
	if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusTryAgainLater {
		t.Errorf("WebSocket ended with %v, want close 1013", err)
	}

	// A place freed is a place taken.
	a1.close()
	eventually(t, wait, "a's subscriber to go", func() bool {
		var info struct {
			Subscribers int `json:"subscribers"`
		}
		json.Unmarshal([]byte(do(t, root, d.url(false, "/api/v1/sessions/a"), request{}).body), &info)
		return info.Subscribers == 0
	})
	ready(openSSE(t, root, d.url(false, "/api/v1/sessions/c/events")))
}
