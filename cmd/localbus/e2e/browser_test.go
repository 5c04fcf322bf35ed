package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/localbus/localbus/bus/bustest"
)

// chromium is Debian's browser, run headless.
const chromium = "chromium"

// needChromium skips a test when Debian's chromium is not installed.
func needChromium(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath(chromium)
	if err != nil {
		t.Skipf("chromium is not installed (Debian package chromium): %v", err)
	}
	return p
}

// browserReport is one line a test page posts back to the test.
type browserReport struct {
	Seq    int    `json:"seq"`
	Kind   string `json:"kind"`
	Stream int    `json:"stream"`
	ID     uint64 `json:"id"`
	N      int    `json:"n"`
	Reason string `json:"reason"`
	Ticket string `json:"ticket"`
	// Replay: what a used ticket got.
	ESOpened    bool   `json:"esOpened"`
	ESState     int    `json:"esState"`
	FetchStatus int    `json:"fetchStatus"`
	FetchCode   string `json:"fetchCode"`
	Message     string `json:"message"`
}

// reports collects what the page posts.
type reports struct {
	mu   sync.Mutex
	list []browserReport
}

func (r *reports) add(b browserReport) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, b)
}

// all returns the reports in the order the page made them.
func (r *reports) all() []browserReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.list)
	slices.SortFunc(out, func(a, b browserReport) int { return a.Seq - b.Seq })
	return out
}

// find returns the reports of kind.
func (r *reports) find(kind string) []browserReport {
	var out []browserReport
	for _, b := range r.all() {
		if b.Kind == kind {
			out = append(out, b)
		}
	}
	return out
}

// browserPage follows one session with EventSource: a ticket fetched with
// the key, a fresh ticket and ?since= after each stream:closed, and, once
// the second stream is ready, a replay of each used ticket.
var browserPage = template.Must(template.New("page").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>localbus tickets</title></head><body><script>
const base = {{.Base}}, key = {{.Key}}, path = {{.Path}};
let seq = 0;
function report(o) {
  o.seq = ++seq; // reports may arrive out of order; the test sorts them
  return fetch('/report', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify(o)});
}
window.onerror = (m) => { report({kind: 'error', message: String(m)}); };
window.onunhandledrejection = (e) => { report({kind: 'error', message: String(e.reason)}); };

async function ticket() {
  const r = await fetch(base + '/api/v1/tickets', {
    method: 'POST',
    headers: {Authorization: 'Bearer ' + key, 'Content-Type': 'application/json'},
    body: JSON.stringify({path: path}),
  });
  const b = await r.json();
  if (r.status !== 200) throw new Error('ticket: ' + r.status + ' ' + JSON.stringify(b));
  return b.ticket;
}

const used = [];
let last = 0, stream = 0;

async function follow() {
  const t = await ticket();
  used.push(t);
  const n = ++stream;
  report({kind: 'ticket', stream: n, ticket: t});
  const es = new EventSource(base + path + '?ticket=' + t + (last ? '&since=' + last : ''));
  es.addEventListener('stream:ready', () => {
    report({kind: 'ready', stream: n});
    if (n === 2) replay();
  });
  es.addEventListener('app:tick', (e) => {
    last = Number(e.lastEventId);
    report({kind: 'event', stream: n, id: last, n: JSON.parse(e.data).data.n});
  });
  es.addEventListener('stream:closed', (e) => {
    es.close();
    report({kind: 'closed', stream: n, reason: JSON.parse(e.data).data.reason});
    follow();
  });
}

async function replay() {
  // EventSource with a used ticket: refused, so it never opens and gives up.
  const es = new EventSource(base + path + '?ticket=' + used[0]);
  let opened = false;
  es.onopen = () => { opened = true; };
  await new Promise((resolve) => { es.onerror = () => { if (es.readyState === EventSource.CLOSED) resolve(); }; });
  // fetch with another used ticket, to read the refusal.
  const r = await fetch(base + path + '?ticket=' + used[1]);
  const b = await r.json();
  // Reading the status and body at all needs the CORS headers (without
  // them fetch rejects with a TypeError).
  report({kind: 'replay', esOpened: opened, esState: es.readyState, fetchStatus: r.status, fetchCode: b.error.code});
}

follow().catch((e) => report({kind: 'error', message: String(e)}));
</script></body></html>
`))

// TestBrowserFollowsASessionWithEventSourceAndTickets runs the built daemon
// on loopback TCP and a page from another origin (a test server on another
// port) in headless chromium. The page gets a ticket with its read key and
// follows a session with EventSource; the test publishes, reloads the
// daemon (stream:closed, reason reload) and publishes while the page
// resumes with a fresh ticket and ?since=; the page must see every event
// once, in order, and a used ticket must be refused, to EventSource and to
// fetch (401 invalid_ticket, readable through CORS). No ticket may show in
// the daemon's log.
func TestBrowserFollowsASessionWithEventSourceAndTickets(t *testing.T) {
	browser := needChromium(t)
	const session = "web-1"
	path := "/api/v1/sessions/" + session + "/events"

	got := &reports{}
	var page struct{ Base, Key, Path string }
	pages := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			browserPage.Execute(w, page)
		case r.Method == http.MethodPost && r.URL.Path == "/report":
			var b browserReport
			if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			got.add(b)
			w.WriteHeader(http.StatusNoContent)
		default:
			http.NotFound(w, r)
		}
	}))
	defer pages.Close()

	d := start(t, setup{tcp: true, config: fmt.Sprintf("allowed_origins = [%q]\n", pages.URL)})
	page.Base, page.Key, page.Path = "http://"+d.tcp, d.keys.read, path
	if st, b := d.Do(t, "POST", "/api/v1/sessions", `{"id":"`+session+`"}`); st != http.StatusCreated {
		t.Fatalf("create session = %d %s", st, b)
	}
	publish := func(n int) {
		t.Helper()
		if st, b := d.Do(t, "POST", path, fmt.Sprintf(`{"type":"app:tick","data":{"n":%d}}`, n)); st != http.StatusOK {
			t.Fatalf("publish %d = %d %s", n, st, b)
		}
	}

	runChromium(t, browser, pages.URL+"/")
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		reports := func() string { return fmt.Sprintf("the page reported %+v", got.all()) }
		bustest.Eventually(bustest.Showing(t, reports), 3*wait, what, func() bool {
			if cond() {
				return true
			}
			if errs := got.find("error"); len(errs) > 0 {
				t.Fatalf("the page reported an error: %s\nreports: %+v", errs[0].Message, got.all())
			}
			return false
		})
	}
	count := func(kind string, stream int) int {
		n := 0
		for _, b := range got.find(kind) {
			if stream == 0 || b.Stream == stream {
				n++
			}
		}
		return n
	}

	waitFor("the first stream to be ready", func() bool { return count("ready", 1) == 1 })
	for n := 1; n <= 3; n++ {
		publish(n)
	}
	waitFor("three events", func() bool { return count("event", 0) == 3 })

	if st, b := d.Do(t, "POST", "/api/v1/reload", ""); st != http.StatusOK {
		t.Fatalf("reload = %d %s", st, b)
	}
	// Published while the page is closing, getting a ticket and reopening.
	publish(4)
	publish(5)
	waitFor("the stream to close for the reload", func() bool { return count("closed", 1) == 1 })
	if c := got.find("closed")[0]; c.Reason != "reload" {
		t.Errorf("stream:closed reason %q, want reload", c.Reason)
	}
	waitFor("the second stream to be ready", func() bool { return count("ready", 2) == 1 })
	publish(6)
	waitFor("six events", func() bool { return count("event", 0) >= 6 })
	waitFor("the replays of used tickets", func() bool { return count("replay", 0) == 1 })

	var ids []uint64
	var ns []int
	for _, e := range got.find("event") {
		ids, ns = append(ids, e.ID), append(ns, e.N)
	}
	if !slices.Equal(ns, []int{1, 2, 3, 4, 5, 6}) || !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != 6 {
		t.Errorf("the page saw events n=%v ids=%v, want 1…6 once each, in order, across the reload", ns, ids)
	}
	if got.find("event")[3].Stream != 2 {
		t.Errorf("event 4 came on stream %d, want the resumed stream 2", got.find("event")[3].Stream)
	}
	rp := got.find("replay")[0]
	if rp.ESOpened || rp.ESState != 2 {
		t.Errorf("EventSource with a used ticket: opened %v, readyState %d; want never opened and CLOSED (2)", rp.ESOpened, rp.ESState)
	}
	if rp.FetchStatus != http.StatusUnauthorized || rp.FetchCode != "invalid_ticket" {
		t.Errorf("fetch with a used ticket = %d %q, want 401 invalid_ticket, readable by the page", rp.FetchStatus, rp.FetchCode)
	}
	tickets := got.find("ticket")
	if len(tickets) != 2 || tickets[0].Ticket == tickets[1].Ticket {
		t.Errorf("the page got tickets %+v, want two different ones", tickets)
	}
	log := d.Stderr()
	for _, tk := range tickets {
		if tk.Ticket == "" || strings.Contains(log, tk.Ticket) {
			t.Errorf("the daemon's log holds a ticket (%.8s…) or the page got none", tk.Ticket)
		}
	}
	if !strings.Contains(log, "invalid_ticket") {
		t.Errorf("the daemon did not log the refused replays:\n%s", log)
	}
}

// runChromium opens url in headless chromium, in its own process group,
// which is killed when the test ends.
func runChromium(t *testing.T, browser, url string) {
	t.Helper()
	cmd := exec.Command(browser,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--user-data-dir="+t.TempDir(), url)
	out := &lockedBuffer{b: &bytes.Buffer{}}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-done:
		case <-time.After(wait):
			t.Errorf("chromium did not exit after SIGKILL")
		}
		if t.Failed() {
			t.Logf("chromium output:\n%s", out.b.String())
		}
	})
}

// lockedBuffer serializes chromium's writes to its output buffer.
type lockedBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
