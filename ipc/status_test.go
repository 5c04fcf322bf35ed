package ipc_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/ipc"
	"github.com/localbus/localbus/ipc/client"
	"github.com/localbus/localbus/ipc/ipctest"
	"github.com/localbus/localbus/ipc/wire"
)

func TestSessionsArePagedInIDOrder(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	var want []string
	for i := range 25 {
		id := fmt.Sprintf("s-%02d", 24-i) // created out of order
		if _, err := srv.Hub.Create(bustest.SessionID(id), 0); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 25 {
		want = append(want, fmt.Sprintf("s-%02d", i))
	}
	var got []string
	after, pages := "", 0
	for {
		path := wire.PathSessions + "?limit=10"
		if after != "" {
			path += "&after=" + after
		}
		var l wire.SessionList
		r := srv.Do(t, "GET", path, nil, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("GET %s = %d %s", path, r.Status, r.Body)
		}
		r.DecodeJSON(t, &l)
		pages++
		for _, s := range l.Sessions {
			got = append(got, s.ID)
		}
		if l.Next == "" {
			if len(l.Sessions) != 5 {
				t.Errorf("last page has %d sessions, want 5", len(l.Sessions))
			}
			break
		}
		if l.Next != l.Sessions[len(l.Sessions)-1].ID {
			t.Errorf("next %q, want the page's last id %q", l.Next, l.Sessions[len(l.Sessions)-1].ID)
		}
		after = l.Next
	}
	if pages != 3 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%d pages of %v, want 3 pages of %v", pages, got, want)
	}
	// after need not exist; a page that ends exactly has no next.
	var l wire.SessionList
	srv.Do(t, "GET", wire.PathSessions+"?after=s-04a&limit=20", nil, nil).DecodeJSON(t, &l)
	if len(l.Sessions) != 20 || l.Sessions[0].ID != "s-05" || l.Next != "" {
		t.Errorf("after=s-04a&limit=20: %d sessions from %v, next %q; want 20 from s-05 and no next", len(l.Sessions), l.Sessions[0].ID, l.Next)
	}
	srv.Do(t, "GET", wire.PathSessions, nil, nil).DecodeJSON(t, &l)
	if len(l.Sessions) != 25 || l.Next != "" {
		t.Errorf("default page: %d sessions, next %q", len(l.Sessions), l.Next)
	}
	// The Go client follows next.
	cl := &client.Client{Socket: srv.Socket}
	defer cl.CloseIdleConnections()
	page, next, err := cl.SessionsPage(testCtx(t), "s-20", 3)
	if err != nil || len(page) != 3 || page[0].ID != "s-21" || next != "s-23" {
		t.Errorf("SessionsPage(s-20, 3) = %d sessions, next %q, %v", len(page), next, err)
	}
}

func TestSessionsClientFollowsNextPastOnePage(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	const n = wire.DefaultPageLimit*2 + 7
	for i := range n {
		if _, err := srv.Hub.Create(bustest.SessionID(fmt.Sprintf("s-%05d", i)), 1); err != nil {
			t.Fatal(err)
		}
	}
	cl := &client.Client{Socket: srv.Socket}
	defer cl.CloseIdleConnections()
	list, err := cl.Sessions(testCtx(t))
	if err != nil || len(list) != n || list[n-1].ID != fmt.Sprintf("s-%05d", n-1) {
		t.Fatalf("Sessions = %d sessions, %v; want %d", len(list), err, n)
	}
}

func TestSessionsPagingRefusesBadLimitAndAfter(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	createSession(t, srv, "a")
	for _, q := range []struct{ query, code string }{
		{"limit=0", wire.CodeInvalidLimit},
		{"limit=10001", wire.CodeInvalidLimit},
		{"limit=-1", wire.CodeInvalidLimit},
		{"limit=ten", wire.CodeInvalidLimit},
		{"limit=010", wire.CodeInvalidLimit},
		{"limit=5&limit=6", wire.CodeInvalidLimit},
		{"after=bad%20id", wire.CodeInvalidAfter},
		{"after=", wire.CodeInvalidAfter},
		{"after=a&after=b", wire.CodeInvalidAfter},
	} {
		r := srv.Do(t, "GET", wire.PathSessions+"?"+q.query, nil, nil)
		if eb := r.ErrorBody(t); r.Status != http.StatusBadRequest || eb.Error.Code != q.code {
			t.Errorf("?%s = %d %s, want 400 %s", q.query, r.Status, r.Body, q.code)
		}
	}
	if srv.Hub.Len() != 1 {
		t.Errorf("the refusals changed the sessions: %d", srv.Hub.Len())
	}
	for _, ok := range []string{"limit=1", "limit=10000"} {
		if r := srv.Do(t, "GET", wire.PathSessions+"?"+ok, nil, nil); r.Status != http.StatusOK {
			t.Errorf("?%s = %d, want 200", ok, r.Status)
		}
	}
}

func TestRatesComeFromTheOneSecondSamples(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	createSession(t, srv, "a")
	createSession(t, srv, "b")
	st := srv.OpenSSE(t, wire.SessionEventsPath("a"), nil)
	st.MustNext(t) // stream:ready
	t0 := time.Now()
	srv.Hub.SampleRates(t0)
	for i := range 10 {
		srv.Hub.SampleRates(t0.Add(time.Duration(i) * time.Second))
		for range 5 {
			srv.Publish(t, "a", ev("x:y", ""))
		}
	}
	srv.Hub.SampleRates(t0.Add(10 * time.Second))
	var a, b wire.SessionInfo
	srv.Do(t, "GET", wire.SessionPath("a"), nil, nil).DecodeJSON(t, &a)
	srv.Do(t, "GET", wire.SessionPath("b"), nil, nil).DecodeJSON(t, &b)
	if a.PublishRate != 5 || a.DeliverRate != 5 || b.PublishRate != 0 || b.DeliverRate != 0 {
		t.Errorf("rates a %v/%v, b %v/%v; want 5/5 and 0/0", a.PublishRate, a.DeliverRate, b.PublishRate, b.DeliverRate)
	}
	var s wire.Status
	srv.Do(t, "GET", wire.PathStatus, nil, nil).DecodeJSON(t, &s)
	if s.PublishRate != 5 || s.DeliverRate != 5 {
		t.Errorf("status rates %v/%v, want 5/5", s.PublishRate, s.DeliverRate)
	}
	// Ten quiet seconds later the window no longer reaches the burst.
	for i := 11; i <= 21; i++ {
		srv.Hub.SampleRates(t0.Add(time.Duration(i) * time.Second))
	}
	srv.Do(t, "GET", wire.SessionPath("a"), nil, nil).DecodeJSON(t, &a)
	if a.PublishRate != 0 {
		t.Errorf("after 10 quiet seconds publishRate %v, want 0", a.PublishRate)
	}
}

func TestStatusIsTheDaemonAtAGlance(t *testing.T) {
	t.Parallel()
	rss := int64(1 << 20)
	srv := ipctest.New(t, ipctest.Options{Hub: hubOpts(), Handler: ipcOptions(func() wire.AdminStatus {
		return wire.AdminStatus{RSSBytes: &rss, Upstream: &wire.StatusUpstream{Connected: true, Lag: 3}}
	})})
	createSession(t, srv, "a")
	createSession(t, srv, "b")
	st := srv.OpenSSE(t, wire.SessionEventsPath("a"), nil)
	st.MustNext(t)
	g := srv.OpenSSE(t, wire.PathEvents, nil)
	g.MustNext(t)
	var s wire.Status
	r := srv.Do(t, "GET", wire.PathStatus, nil, nil)
	r.DecodeJSON(t, &s)
	if s.Version != "9.9.9" || s.Sessions != 2 || s.Streams != 2 || s.Consumers != 0 || time.Since(s.StartedAt) > time.Minute || s.StartedAt.After(time.Now()) {
		t.Errorf("status %s", r.Body)
	}
	if s.RSSBytes == nil || *s.RSSBytes != rss || s.JournalBytes != nil || s.Upstream == nil || s.Upstream.Lag != 3 {
		t.Errorf("admin status %s, want rssBytes, upstream and no journalBytes", r.Body)
	}
	st.Close()
	g.Close()
	bustest.Eventually(t, wait, "streams 0", func() bool {
		srv.Do(t, "GET", wire.PathStatus, nil, nil).DecodeJSON(t, &s)
		return s.Streams == 0
	})
}

func TestStatusHidesAdminFiguresFromReaders(t *testing.T) {
	t.Parallel()
	ps := newPresenceServer(t)
	var s map[string]json.RawMessage
	if st, body := ps.get(t, true, "alice", wire.PathStatus, &s); st != http.StatusOK {
		t.Fatalf("GET status as a reader = %d %s", st, body)
	}
	for _, k := range []string{"version", "startedAt", "sessions", "streams", "consumers", "publishRate", "deliverRate"} {
		if _, ok := s[k]; !ok {
			t.Errorf("status lacks %s: %v", k, s)
		}
	}
	for _, k := range []string{"rssBytes", "journalBytes", "upstream"} {
		if _, ok := s[k]; ok {
			t.Errorf("a reader's status has %s", k)
		}
	}
	if st, _ := ps.get(t, true, "", wire.PathStatus, nil); st != http.StatusUnauthorized {
		t.Errorf("GET status without a key = %d, want 401", st)
	}
}

// ipcOptions are router options with a version and an AdminStatus.
func ipcOptions(admin func() wire.AdminStatus) (o ipc.Options) {
	o.Version = "9.9.9"
	o.AdminStatus = admin
	return o
}
