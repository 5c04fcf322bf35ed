package ipc_test

import (
	"bytes"
	"context"
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
	srv := ipctest.New(t, ipctest.Options{Hub: hubOpts(), Handler: ipc.Options{SlowBodyWindow: window, BodyTimeout: time.Minute}})
	br, send := rawPost(t, srv, "/api/v1/sessions/slow/events", 1<<20, []byte(`[`))
	start := time.Now()
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
		Authenticate: asPeer, MaxBodyBytes: 1 << 20, MaxInflightBodyBytes: 1 << 20, PeerShare: 0.25,
	}})
	body := func(n int) []byte {
		return []byte(`[{"type":"t:a","data":"` + strings.Repeat("x", n-26) + `"}]`)
	}
	post := func(peer string, b []byte, chunked bool) *ipctest.Response {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), ipctest.Wait)
		defer cancel()
		var rd = bytes.NewReader(b)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ipctest.Host+"/api/v1/sessions/s/events", rd)
		if chunked {
			req.ContentLength = -1
			req.Body = struct {
				*bytes.Reader
				closer
			}{rd, closer{}}
		}
		if peer != "" {
			req.Header.Set("X-Test-Peer", peer)
		}
		resp, err := srv.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out bytes.Buffer
		out.ReadFrom(resp.Body)
		return &ipctest.Response{Status: resp.StatusCode, Header: resp.Header, Body: out.Bytes()}
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

type closer struct{}

func (closer) Close() error { return nil }
