package ipc_test

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/localbus/localbus/bus/share"
	"github.com/localbus/localbus/ipc"
	"github.com/localbus/localbus/ipc/access"
	"github.com/localbus/localbus/ipc/ipctest"
	"github.com/localbus/localbus/ipc/wire"
)

// asPeer is an Authenticate that makes every caller admin, as the peer
// its X-Test-Peer header names (share.Peer's text; absent: privileged).
func asPeer(r *http.Request) (ipc.Caller, error) {
	p := share.Privileged
	if v := r.Header.Get("X-Test-Peer"); v != "" {
		var err error
		if p, err = share.Parse(v); err != nil {
			return ipc.Caller{}, err
		}
	}
	return ipc.Caller{Authenticated: true, Scopes: access.NewScopes(access.Admin), Share: p}, nil
}

// TestSlowBodyIsCutWith408: a body that keeps coming slower than 64 KiB/s
// over a window, after its first window, is answered 408 body_too_slow at
// the end of that window and publishes nothing; a body that comes at once
// is published.
func TestSlowBodyIsCutWith408(t *testing.T) {
	const window = 200 * time.Millisecond
	srv := ipctest.New(t, ipctest.Options{Hub: hubOpts(), Handler: ipc.Options{SlowBodyWindow: window, Settings: ipc.Settings{BodyTimeout: time.Minute}}})
	// Before the request is sent: the server's windows start once it has
	// read the headers, never earlier.
	start := time.Now()
	br, send := rawPost(t, srv, "/api/v1/sessions/slow/events", 1<<20, []byte(`[`))
	done := make(chan *ipctest.Response, 1)
	go func() { done <- readHTTPReply(t, br) }()
	var r *ipctest.Response
	tick := time.NewTicker(window / 10)
	defer tick.Stop()
	for r == nil {
		select {
		case r = <-done:
		case <-tick.C:
			send([]byte(" ")) // a byte every 20 ms: 50 B/s
		case <-time.After(ipctest.Wait):
			t.Fatal("the slow body was never cut")
		}
	}
	took := time.Since(start)
	if r.Status != http.StatusRequestTimeout || r.ErrorBody(t).Error.Code != wire.CodeBodyTooSlow {
		t.Fatalf("slow body = %d %s, want 408 %s", r.Status, r.Body, wire.CodeBodyTooSlow)
	}
	if took < 2*window {
		t.Errorf("cut after %v, before the end of its first window after the first (%v)", took, 2*window)
	}
	if _, ok := srv.Hub.Session("slow"); ok {
		t.Error("the slow body created its session")
	}
	if srv.Handler.InflightBodyBytes() != 0 {
		t.Errorf("%d body bytes still counted after the cut", srv.Handler.InflightBodyBytes())
	}
	srv.Publish(t, "fast", ipctest.Event{Type: "t:a", Data: "1"})
}

// TestBodyPastItsPeersShareIs413: with max_inflight_body_bytes of 1 MiB
// and a share of a quarter, a peer's body over 256 KiB could never be
// read: it is a 413 naming the share (before reading when its
// Content-Length says so), while a privileged caller's same body is
// published, and so is a body within the share.
func TestBodyPastItsPeersShareIs413(t *testing.T) {
	srv := ipctest.New(t, ipctest.Options{Hub: hubOpts(), Handler: ipc.Options{
		Settings: ipc.Settings{
			Authenticate:         asPeer,
			MaxBodyBytes:         1 << 20,
			MaxInflightBodyBytes: 1 << 20,
			PeerShare:            0.25,
		},
	}})
	body := func(n int) []byte {
		return []byte(`[{"type":"t:a","data":"` + strings.Repeat("x", n-26) + `"}]`)
	}
	post := func(peer string, b []byte, chunked bool) *ipctest.Response {
		t.Helper()
		// A raw request, written while the reply is read: the refusal may
		// come before the whole body is sent, and closes the connection.
		conn, err := srv.Dial(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(ipctest.Wait))
		head := "POST /api/v1/sessions/s/events HTTP/1.1\r\nHost: " + ipctest.Host + "\r\nContent-Type: application/json\r\n"
		if peer != "" {
			head += "X-Test-Peer: " + peer + "\r\n"
		}
		payload := b
		if chunked {
			head += "Transfer-Encoding: chunked\r\n\r\n"
			payload = append([]byte(fmt.Sprintf("%x\r\n", len(b))), b...)
			payload = append(payload, "\r\n0\r\n\r\n"...)
		} else {
			head += fmt.Sprintf("Content-Length: %d\r\n\r\n", len(b))
		}
		go conn.Write(append([]byte(head), payload...))
		return readHTTPReply(t, bufio.NewReader(conn))
	}
	big := body(300 << 10)
	for _, chunked := range []bool{false, true} {
		r := post("uid:65534", big, chunked)
		if r.Status != http.StatusRequestEntityTooLarge || r.ErrorBody(t).Error.Code != wire.CodeBodyTooLarge || !strings.Contains(r.ErrorBody(t).Error.Message, "share") {
			t.Errorf("300 KiB body of a peer (chunked %v) = %d %s, want 413 naming its share", chunked, r.Status, r.Body)
		}
	}
	if r := post("uid:65534", body(200<<10), false); r.Status != http.StatusOK {
		t.Errorf("200 KiB body of a peer = %d %s, want 200", r.Status, r.Body)
	}
	if r := post("", big, false); r.Status != http.StatusOK {
		t.Errorf("300 KiB body of a privileged caller = %d %s, want 200", r.Status, r.Body)
	}
	if srv.Handler.InflightBodyBytes() != 0 {
		t.Errorf("%d body bytes still counted", srv.Handler.InflightBodyBytes())
	}
}
