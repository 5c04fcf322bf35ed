package client_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/ipc"
	"github.com/localbus/localbus/ipc/access"
	"github.com/localbus/localbus/ipc/client"
	"github.com/localbus/localbus/ipc/ipctest"
)

// event returns the NDJSON line of an event of type typ with data {"n":n},
// without its newline.
func event(typ string, n int) string {
	return fmt.Sprintf(`{"type":%q,"data":{"n":%d}}`, typ, n)
}

// streamServer is the router on a socket with sessions created by the
// first publish, and a client of it.
func streamServer(t *testing.T, opts ipc.Options) (*ipctest.Server, *client.Client) {
	t.Helper()
	srv := ipctest.New(t, ipctest.Options{Hub: hub.Options{AutoCreate: true}, Handler: opts})
	return srv, newClient(t, srv.Socket)
}

// published is the outcome of a PublishStream running in the background.
type published struct {
	reply client.StreamReply
	err   error
}

// publishInBackground runs PublishStream of r on session and returns the
// channel of its outcome.
func publishInBackground(c *client.Client, session string, r io.Reader, keepalive time.Duration) <-chan published {
	out := make(chan published, 1)
	go func() {
		reply, err := c.PublishStreamKeepalive(context.Background(), session, r, keepalive)
		out <- published{reply, err}
	}()
	return out
}

// outcome waits for a background PublishStream, failing after wait.
func outcome(t *testing.T, ch <-chan published) published {
	t.Helper()
	select {
	case p := <-ch:
		return p
	case <-time.After(wait):
		t.Fatalf("PublishStream did not return within %v", wait)
		return published{}
	}
}

// lastID returns the session's last id on the server's hub, 0 when the
// session does not exist.
func lastID(srv *ipctest.Server, session string) uint64 {
	s, ok := srv.Hub.Session(session)
	if !ok {
		return 0
	}
	return s.Bus.LastID()
}

func seq(from, to uint64) []uint64 {
	var ids []uint64
	for n := from; n <= to; n++ {
		ids = append(ids, n)
	}
	return ids
}

// TestPublishStreamDeliversEachLineBeforeTheInputEnds: a producer that
// writes a line only once the subscriber has the one before proves that
// every line is published while the input is still open, including a
// line that arrives in two writes and lines that arrive together.
func TestPublishStreamDeliversEachLineBeforeTheInputEnds(t *testing.T) {
	t.Parallel()
	srv, c := streamServer(t, ipc.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := c.CreateSession(ctx, "s", 0); err != nil {
		t.Fatal(err)
	}
	st := srv.OpenSSE(t, "/api/v1/sessions/s/events", nil)
	st.MustNext(t) // stream:ready

	pr, pw := io.Pipe()
	defer pw.Close()
	done := publishInBackground(c, "s", pr, time.Hour)
	writes := []struct {
		name  string
		parts []string // written one after the other
		ids   []uint64 // then delivered
	}{
		{"one line", []string{event("a:b", 1) + "\n"}, []uint64{1}},
		{"a blank line, then a line", []string{"\n  \r\n" + event("a:b", 2) + "\n"}, []uint64{2}},
		{"a line in two writes", []string{`{"type":"a:b",`, `"data":{"n":3}}` + "\n"}, []uint64{3}},
		{"two lines at once", []string{event("a:b", 4) + "\n" + event("a:b", 5) + "\n"}, []uint64{4, 5}},
	}
	for _, w := range writes {
		for _, p := range w.parts {
			if _, err := io.WriteString(pw, p); err != nil {
				t.Fatalf("%s: writing the input: %v", w.name, err)
			}
		}
		for _, id := range w.ids {
			if env := st.MustNext(t); env.ID != id || string(env.Data) != fmt.Sprintf(`{"n":%d}`, id) {
				t.Fatalf("%s: subscriber got id %d data %s while the input is open, want id %d", w.name, env.ID, env.Data, id)
			}
		}
	}
	pw.Close()
	p := outcome(t, done)
	if p.err != nil {
		t.Fatalf("PublishStream = %v", p.err)
	}
	want := client.StreamReply{Count: 5, FirstID: 1, LastID: 5, IDs: seq(1, 5)}
	if diff := cmp.Diff(want, p.reply); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
}

// TestPublishStreamSendsBlankLinesWhileTheInputIsQuiet: the daemon cuts
// off a body idle for BodyTimeout; keepalive blank lines carry a producer
// through a longer pause, and without them the daemon's 408 says what was
// published and where it stopped.
func TestPublishStreamSendsBlankLinesWhileTheInputIsQuiet(t *testing.T) {
	t.Parallel()
	const idle = 300 * time.Millisecond
	tests := []struct {
		name      string
		keepalive time.Duration
		wantErr   bool
	}{
		{"keepalive within the idle limit", idle / 6, false},
		{"no keepalive", time.Hour, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, c := streamServer(t, ipc.Options{Settings: ipc.Settings{BodyTimeout: idle}})
			pr, pw := io.Pipe()
			defer pw.Close()
			done := publishInBackground(c, "s", pr, tt.keepalive)
			io.WriteString(pw, event("a:b", 1)+"\n")
			bustest.Eventually(t, wait, "the first line published", func() bool { return lastID(srv, "s") == 1 })
			time.Sleep(3 * idle) // the producer's own pause, longer than the idle limit
			io.WriteString(pw, event("a:b", 2)+"\n")
			pw.Close()
			p := outcome(t, done)
			if !tt.wantErr {
				if p.err != nil || p.reply.Count != 2 {
					t.Fatalf("PublishStream = %+v, %v; want both events", p.reply, p.err)
				}
				return
			}
			var pe *client.PublishStreamError
			var ae *client.APIError
			if !errors.As(p.err, &pe) || !errors.As(p.err, &ae) || ae.Status != http.StatusRequestTimeout || ae.Code != "body_timeout" {
				t.Fatalf("PublishStream error = %v, want a *PublishStreamError with a 408 body_timeout", p.err)
			}
			if pe.Line != 2 || pe.Published.Count != 1 || p.reply.Count != 1 {
				t.Errorf("stopped at line %d after %d events (reply %+v), want line 2 after 1", pe.Line, pe.Published.Count, p.reply)
			}
		})
	}
}

// TestPublishStreamKeepaliveIsABlankLineBetweenLines records the body a
// fake daemon receives: during a pause of the producer it gets blank
// lines, each after a whole line.
func TestPublishStreamKeepaliveIsABlankLineBetweenLines(t *testing.T) {
	t.Parallel()
	blanks := make(chan struct{}, 100)
	var body strings.Builder // written by the handler, read after its reply
	sock := fakeServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("ack") != "end" || r.Header.Get("Content-Type") != "application/x-ndjson" || r.ContentLength != -1 {
			http.Error(w, "want a chunked NDJSON body with ?ack=end", http.StatusBadRequest)
			return
		}
		sc := bufio.NewScanner(r.Body)
		n := 0
		for sc.Scan() {
			body.WriteString(sc.Text() + "\n")
			if sc.Text() == "" {
				select {
				case blanks <- struct{}{}:
				default:
				}
				continue
			}
			n++
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(client.StreamReply{Count: n, FirstID: 1, LastID: uint64(n), IDs: seq(1, uint64(n))})
	}))
	c := newClient(t, sock)
	pr, pw := io.Pipe()
	defer pw.Close()
	done := publishInBackground(c, "s", pr, 10*time.Millisecond)
	io.WriteString(pw, event("a:b", 1)+"\n")
	for range 3 { // the producer pauses until three blank lines came
		select {
		case <-blanks:
		case <-time.After(wait):
			t.Fatalf("no keepalive within %v", wait)
		}
	}
	io.WriteString(pw, event("a:b", 2)) // the last line needs no newline
	pw.Close()
	p := outcome(t, done)
	if p.err != nil || p.reply.Count != 2 {
		t.Fatalf("PublishStream = %+v, %v; want 2 events", p.reply, p.err)
	}
	got := body.String()
	first, second := event("a:b", 1)+"\n", event("a:b", 2)+"\n"
	middle := strings.TrimSuffix(strings.TrimPrefix(got, first), second)
	if !strings.HasPrefix(got, first) || !strings.HasSuffix(got, second) || len(middle) < 3 || strings.Trim(middle, "\n") != "" {
		t.Errorf("body = %q, want line 1, three or more blank lines, line 2", got)
	}
}

// TestPublishStreamStopsAtABadLine: the lines before a refused one stay
// published; the error is the daemon's, with what was published and the
// line of the input, blank lines and keepalives notwithstanding.
func TestPublishStreamStopsAtABadLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		bad      string
		status   int
		code     string
		sentinel error
	}{
		{"malformed", `{"type":"a:b","data":`, http.StatusBadRequest, "invalid_event", nil},
		{"reserved type", `{"type":"stream:ready"}`, http.StatusBadRequest, "invalid_type", nil},
		{"too large", `{"type":"a:b","data":"` + strings.Repeat("x", 2000) + `"}`, http.StatusRequestEntityTooLarge, "event_too_large", nil},
		{"forbidden family", `{"type":"secret:x"}`, http.StatusForbidden, "forbidden", client.ErrForbidden},
	}
	for _, tt := range tests {
		for _, pause := range []bool{false, true} {
			name := tt.name
			if pause {
				name += " after keepalives"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				srv, c := streamServer(t, ipc.Options{
					Settings: ipc.Settings{
						MaxEventBytes: 1024,
						Authenticate: func(*http.Request) (ipc.Caller, error) {
							return ipc.Caller{Authenticated: true, Scopes: access.NewScopes("read", "publish:a")}, nil
						},
					},
				})
				pr, pw := io.Pipe()
				defer pw.Close()
				done := publishInBackground(c, "s", pr, 5*time.Millisecond)
				// Lines 1 and 3 are events, 2 and 4 blank, 5 the bad one.
				io.WriteString(pw, event("a:b", 1)+"\n\n"+event("a:b", 2)+"\n   \n")
				if pause {
					bustest.Eventually(t, wait, "two events published", func() bool { return lastID(srv, "s") == 2 })
					time.Sleep(100 * time.Millisecond) // the producer's pause: keepalives go out
				}
				go func() {
					// The daemon stops reading at the bad line: what
					// follows may never be read.
					io.WriteString(pw, tt.bad+"\n"+event("a:b", 6)+"\n")
					pw.Close()
				}()
				p := outcome(t, done)
				var pe *client.PublishStreamError
				var ae *client.APIError
				if !errors.As(p.err, &pe) || !errors.As(p.err, &ae) {
					t.Fatalf("PublishStream error = %v, want a *PublishStreamError wrapping an *APIError", p.err)
				}
				if ae.Status != tt.status || ae.Code != tt.code {
					t.Errorf("daemon error = %d %s, want %d %s", ae.Status, ae.Code, tt.status, tt.code)
				}
				if tt.sentinel != nil && !errors.Is(p.err, tt.sentinel) {
					t.Errorf("errors.Is(%v, %v) = false", p.err, tt.sentinel)
				}
				want := client.StreamReply{Count: 2, FirstID: 1, LastID: 2, IDs: []uint64{1, 2}}
				if diff := cmp.Diff(want, pe.Published); diff != "" {
					t.Errorf("published (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(want, p.reply); diff != "" {
					t.Errorf("reply (-want +got):\n%s", diff)
				}
				if pe.Line != 5 {
					t.Errorf("stopped at line %d, want 5", pe.Line)
				}
				if n := lastID(srv, "s"); n != 2 {
					t.Errorf("session lastId = %d, want 2: nothing from the bad line on", n)
				}
			})
		}
	}
}

// errReader yields its text, then fails.
type errReader struct {
	r   *strings.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	if e.r.Len() == 0 {
		return 0, e.err
	}
	return e.r.Read(p)
}

// TestPublishStreamEndsAtAReadError: a failed read of the input ends the
// request after its last whole line; the line being read is not sent.
func TestPublishStreamEndsAtAReadError(t *testing.T) {
	t.Parallel()
	srv, c := streamServer(t, ipc.Options{})
	broken := errors.New("producer crashed")
	in := &errReader{r: strings.NewReader(event("a:b", 1) + "\n" + event("a:b", 2) + "\n" + `{"type":"a:b","da`), err: broken}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	reply, err := c.PublishStream(ctx, "s", in)
	var pe *client.PublishStreamError
	if !errors.As(err, &pe) || !errors.Is(err, broken) {
		t.Fatalf("PublishStream error = %v, want a *PublishStreamError wrapping the read error", err)
	}
	if pe.Line != 3 || reply.Count != 2 || pe.Published.Count != 2 {
		t.Errorf("stopped at line %d after %d events (reply %+v), want line 3 after 2", pe.Line, pe.Published.Count, reply)
	}
	if n := lastID(srv, "s"); n != 2 {
		t.Errorf("session lastId = %d, want 2", n)
	}
}

// TestPublishStreamReplies: one request publishes more events than a
// batch may hold (the reply counts them and lists no ids past 1000), lines
// longer than the read buffer, and nothing from blank or empty input.
func TestPublishStreamReplies(t *testing.T) {
	t.Parallel()
	const n = 5000
	tests := []struct {
		name string
		in   func() string
		want client.StreamReply
	}{
		{"5000 events", func() string {
			var b strings.Builder
			for i := 1; i <= n; i++ {
				b.WriteString(event("a:b", i) + "\n")
			}
			return b.String()
		}, client.StreamReply{Count: n, FirstID: 1, LastID: n}},
		{"a line longer than the read buffer", func() string {
			return event("a:b", 1) + "\n" + `{"type":"a:b","data":"` + strings.Repeat("x", 300<<10) + `"}` + "\n" + event("a:b", 3)
		}, client.StreamReply{Count: 3, FirstID: 1, LastID: 3, IDs: []uint64{1, 2, 3}}},
		{"only blank lines", func() string { return "\n\n  \n" }, client.StreamReply{}},
		{"nothing", func() string { return "" }, client.StreamReply{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, c := streamServer(t, ipc.Options{})
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			reply, err := c.PublishStream(ctx, "s", strings.NewReader(tt.in()))
			if err != nil {
				t.Fatalf("PublishStream = %v", err)
			}
			if diff := cmp.Diff(tt.want, reply); diff != "" {
				t.Errorf("reply (-want +got):\n%s", diff)
			}
			if _, ok := srv.Hub.Session("s"); ok != (tt.want.Count > 0) {
				t.Errorf("session s exists = %v, want %v", ok, tt.want.Count > 0)
			}
		})
	}
}

// TestPublishStreamFailuresAreTyped: no daemon is an *UnreachableError;
// a refusal of the whole request an *APIError; a cancelled context its
// error.
func TestPublishStreamFailuresAreTyped(t *testing.T) {
	t.Parallel()
	in := event("a:b", 1) + "\n"

	c := newClient(t, shortDir(t)+"/nobody.sock")
	_, err := c.PublishStream(context.Background(), "s", strings.NewReader(in))
	var ue *client.UnreachableError
	if !errors.As(err, &ue) {
		t.Errorf("PublishStream with no daemon = %v, want *UnreachableError", err)
	}

	sock := fakeServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"error":{"code":"unauthorized","message":"credentials required"}}`)
	}))
	c = newClient(t, sock)
	reply, err := c.PublishStream(context.Background(), "s", strings.NewReader(in))
	var ae *client.APIError
	if !errors.As(err, &ae) || !ae.Refused() || !errors.Is(err, client.ErrUnauthorized) || reply.Count != 0 {
		t.Errorf("PublishStream refused = %+v, %v; want a refused *APIError and nothing published", reply, err)
	}

	_, c = streamServer(t, ipc.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	wrote := make(chan struct{})
	go func() {
		// A producer that never ends its input, until it cannot write.
		defer close(wrote)
		for {
			if _, err := io.WriteString(pw, in); err != nil {
				return
			}
		}
	}()
	done := make(chan error, 1)
	go func() {
		_, err := c.PublishStream(ctx, "s", pr)
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("PublishStream after cancel = %v, want context.Canceled", err)
		}
	case <-time.After(wait):
		t.Fatalf("PublishStream did not return within %v of cancel", wait)
	}
	pr.Close()
	<-wrote
}

// TestPublishStreamStopsReadingWhenTheDaemonAnswers: a daemon that
// answers before the body ends (here after the first line) ends the
// publish although the input goes on.
func TestPublishStreamStopsReadingWhenTheDaemonAnswers(t *testing.T) {
	t.Parallel()
	sock := fakeServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bufio.NewReader(r.Body).ReadString('\n')
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Connection", "close") // answer now, without reading the rest
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":{"code":"invalid_event","message":"line 2: no"},"published":{"count":1,"firstId":7,"lastId":7,"ids":[7]}}`)
	}))
	c := newClient(t, sock)
	pr, pw := io.Pipe()
	wrote := make(chan struct{})
	go func() {
		// A producer that never ends its input, until it cannot write.
		defer close(wrote)
		for i := 1; ; i++ {
			if _, err := io.WriteString(pw, event("a:b", i)+"\n"); err != nil {
				return
			}
		}
	}()
	p := outcome(t, publishInBackground(c, "s", pr, time.Hour))
	pr.Close()
	<-wrote
	var pe *client.PublishStreamError
	var ae *client.APIError
	if !errors.As(p.err, &pe) || !errors.As(p.err, &ae) || ae.Code != "invalid_event" {
		t.Fatalf("PublishStream = %v, want a *PublishStreamError with the daemon's invalid_event", p.err)
	}
	want := client.StreamReply{Count: 1, FirstID: 7, LastID: 7, IDs: []uint64{7}}
	if diff := cmp.Diff(want, pe.Published); diff != "" || pe.Line != 2 {
		t.Errorf("stopped at line %d, published (-want +got):\n%s; want line 2", pe.Line, diff)
	}
}

// endlessLine yields prefix, then the byte 'x' forever: a line that never
// ends.
type endlessLine struct{ prefix string }

func (e *endlessLine) Read(p []byte) (int, error) {
	if e.prefix != "" {
		n := copy(p, e.prefix)
		e.prefix = e.prefix[n:]
		return n, nil
	}
	n := 0
	for n < len(p) {
		n += copy(p[n:], xs)
	}
	return n, nil
}

var xs = []byte(strings.Repeat("x", 64<<10))

// TestPublishStreamRefusesALineLongerThanAnyDaemonTakes: the publish ends
// before a line past the limit (64 MiB, which no daemon would take; 1 MiB
// here), without sending any of it.
func TestPublishStreamRefusesALineLongerThanAnyDaemonTakes(t *testing.T) {
	t.Parallel()
	srv, c := streamServer(t, ipc.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	reply, err := c.PublishStreamMaxLine(ctx, "s", &endlessLine{prefix: event("a:b", 1) + "\n"}, 1<<20)
	var pe *client.PublishStreamError
	if !errors.As(err, &pe) || !errors.Is(err, client.ErrLineTooLong) {
		t.Fatalf("PublishStream = %v, want a *PublishStreamError with ErrLineTooLong", err)
	}
	if pe.Line != 2 || reply.Count != 1 {
		t.Errorf("stopped at line %d after %d events, want line 2 after 1", pe.Line, reply.Count)
	}
	if n := lastID(srv, "s"); n != 1 {
		t.Errorf("session lastId = %d, want 1", n)
	}
}

// TestPublishStreamCountsAChunkTheDaemonAnswersAtOnce sends the whole
// input, bad line included, as one chunk, with a feeder that looks whether
// the chunk was taken only once the daemon has answered: the line must
// still be the bad one's. (Which of the two the feeder sees first is up to
// the scheduler: many rounds.)
func TestPublishStreamCountsAChunkTheDaemonAnswersAtOnce(t *testing.T) {
	t.Parallel()
	_, c := streamServer(t, ipc.Options{})
	input := event("a:b", 1) + "\n\n" + event("a:b", 2) + "\n" + `{"type":"a:b","data":` + "\n" + event("a:b", 4) + "\n"
	for round := range 50 {
		_, err := c.PublishStreamSlowFeeder(t.Context(), fmt.Sprintf("s%d", round), strings.NewReader(input))
		var pe *client.PublishStreamError
		if !errors.As(err, &pe) {
			t.Fatalf("round %d: PublishStream error = %v, want a *PublishStreamError", round, err)
		}
		if pe.Line != 4 || pe.Published.Count != 2 {
			t.Fatalf("round %d: stopped at line %d after %d events, want line 4 after 2", round, pe.Line, pe.Published.Count)
		}
	}
}
