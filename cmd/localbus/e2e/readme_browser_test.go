package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/localbus/localbus/daemon/daemontest"
)

// readmeJSBlock returns the README's ```js block that contains want.
func readmeJSBlock(t *testing.T, want string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile("(?s)```js\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		if strings.Contains(m[1], want) {
			return m[1]
		}
	}
	t.Fatalf("README has no ```js block with %q", want)
	return ""
}

// TestReadmeBrowserSnippetsResumeAcrossAReloadAndARestart runs the
// README's browser WebSocket and EventSource snippets, as written but for
// the key and the address, side by side in one page in headless chromium,
// each in a scope of its own, as if pasted alone (each defines its key),
// with a console.log that reports to the test. The test publishes,
// reloads the daemon and publishes while the snippets reconnect; then it
// stops the daemon, waits until each snippet has failed to reach it at
// least once (a ticket request for the EventSource one, a WebSocket for the
// other), starts it again and publishes while they reconnect. Each must
// print every event once, in order, with its id.
//
// The snippets reach the daemon through a proxy that holds the address
// they name for the whole test: the daemon listens on a new free port each
// time it starts, and while it is stopped the proxy closes every
// connection unanswered, as a daemon that is not running would.
func TestReadmeBrowserSnippetsResumeAcrossAReloadAndARestart(t *testing.T) {
	browser := needChromium(t)
	const session = "build-17"
	snippets := map[string]string{
		"ws": readmeJSBlock(t, "new WebSocket('ws://127.0.0.1:8001"),
		"es": readmeJSBlock(t, "new EventSource("),
	}

	got := &reports{}
	var page string
	pages := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, page)
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
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the page reported %+v", got.all())
		}
	})

	d := start(t, setup{tcp: true, durable: true, config: fmt.Sprintf("allowed_origins = [%q]\n", pages.URL)})
	front := startFrontProxy(t, d.tcp)
	key, _ := json.Marshal(d.keys.read)
	var b strings.Builder
	b.WriteString(`<!doctype html><html><head><meta charset="utf-8"><title>README snippets</title></head><body><script>
let seq = 0;
function report(o) {
  o.seq = ++seq;
  return fetch('/report', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify(o)});
}
window.onerror = (m) => { report({kind: 'error', message: String(m)}); };
window.onunhandledrejection = (e) => { report({kind: 'error', message: String(e.reason)}); };
</script>
`)
	for _, name := range []string{"ws", "es"} {
		code := strings.ReplaceAll(snippets[name], "127.0.0.1:8001", front.addr)
		// Each block is pasted on its own, so each defines the key it uses.
		if !strings.Contains(code, "const key = 'lb_…';") {
			t.Fatalf("the README's %s block does not define its key (const key = 'lb_…';): pasted on its own it cannot run", name)
		}
		code = strings.ReplaceAll(code, "'lb_…'", string(key))
		fmt.Fprintf(&b, `<script>
(() => {
const console = {
  log: (id, type, data) => report({kind: %[1]q, id: id, n: data, reason: type}),
  error: (err) => report({kind: %[1]q + ':retry', message: String(err)}),
};
%[2]s
})();
</script>
`, name, code)
	}
	b.WriteString("</body></html>\n")
	page = b.String()

	if st, body := d.Do(t, "POST", "/api/v1/sessions", `{"id":"`+session+`"}`); st != http.StatusCreated {
		t.Fatalf("create session = %d %s", st, body)
	}
	publish := func(from, to int) {
		t.Helper()
		var events []string
		for n := from; n <= to; n++ {
			events = append(events, fmt.Sprintf(`{"type":"build:step","data":%d}`, n))
		}
		if st, body := d.Do(t, "POST", "/api/v1/sessions/"+session+"/events", "["+strings.Join(events, ",")+"]"); st != http.StatusOK {
			t.Fatalf("publish %d to %d = %d %s", from, to, st, body)
		}
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		eventually(t, 3*wait, what, func() bool {
			if errs := got.find("error"); len(errs) > 0 {
				t.Fatalf("the page reported an error: %s", errs[0].Message)
			}
			return cond()
		})
	}
	printed := func(n int) func() bool {
		return func() bool { return len(got.find("ws")) >= n && len(got.find("es")) >= n }
	}
	subscribers := func() int {
		_, body := d.Do(t, "GET", "/api/v1/sessions/"+session, "")
		var info struct{ Subscribers int }
		json.Unmarshal(body, &info)
		return info.Subscribers
	}

	runChromium(t, browser, pages.URL+"/")
	waitFor("both snippets to follow the session", func() bool { return subscribers() == 2 })
	publish(1, 3)
	waitFor("three events in each snippet", printed(3))

	// A reload: every stream ends with stream:closed (1001).
	if st, body := d.Do(t, "POST", "/api/v1/reload", ""); st != http.StatusOK {
		t.Fatalf("reload = %d %s", st, body)
	}
	publish(4, 6) // while the snippets reconnect
	waitFor("six events in each snippet", printed(6))
	waitFor("both snippets to follow again after the reload", func() bool { return subscribers() == 2 })
	publish(7, 7)
	waitFor("event 7 in each snippet", printed(7))

	// A restart: the daemon is gone until each snippet has failed to reach
	// it, then comes back with its journal on another port.
	front.setBackend("")
	d.Stop(t)
	log := d.Stderr()
	if strings.Contains(log, "DATA RACE") {
		t.Errorf("the daemon reported a data race:\n%s", log)
	}
	for _, k := range d.keys.all() {
		if strings.Contains(log, k) {
			t.Errorf("the daemon's log holds a key (%.8s…)", k)
		}
	}
	waitFor("a ticket request and a WebSocket to find the daemon gone", func() bool {
		return front.refused("POST /api/v1/tickets ") > 0 && front.refused("GET /api/v1/sessions/"+session+"/ws") > 0
	})
	d.Daemon = daemontest.Start(t, d.opts)
	d.tcp = tcpAddr(t, d.Daemon)
	publish(8, 10) // before the snippets are back
	front.setBackend(d.tcp)
	waitFor("ten events in each snippet", printed(10))
	waitFor("both snippets to follow again after the restart", func() bool { return subscribers() == 2 })
	publish(11, 11)
	waitFor("event 11 in each snippet", printed(11))

	if len(got.find("es:retry")) == 0 {
		t.Errorf("the EventSource snippet never said it would try again while the daemon was gone")
	}
	for _, name := range []string{"ws", "es"} {
		var ids []uint64
		var ns []int
		for _, e := range got.find(name) {
			if e.Reason != "build:step" {
				t.Errorf("the %s snippet printed type %q, want build:step", name, e.Reason)
			}
			ids, ns = append(ids, e.ID), append(ns, e.N)
		}
		var want []int
		var wantIDs []uint64
		for n := 1; n <= 11; n++ {
			want, wantIDs = append(want, n), append(wantIDs, uint64(n))
		}
		if !slices.Equal(ns, want) || !slices.Equal(ids, wantIDs) {
			t.Errorf("the %s snippet printed events n=%v ids=%v, want 1…11 once each, in order, across the reload and the restart", name, ns, ids)
		}
	}
}

// A frontProxy is a loopback TCP address that outlives the daemon behind
// it: it forwards each connection it accepts to the daemon's current
// address and, while there is none, reads the request's first line, counts
// it and closes the connection unanswered.
type frontProxy struct {
	addr string
	ln   net.Listener
	wg   sync.WaitGroup

	mu      sync.Mutex
	backend string
	closing bool
	conns   map[net.Conn]struct{}
	refusal map[string]int // first lines of the requests that found no daemon
}

// startFrontProxy listens on a free loopback port and forwards to backend
// until the test ends.
func startFrontProxy(t *testing.T, backend string) *frontProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &frontProxy{addr: ln.Addr().String(), ln: ln, backend: backend, conns: map[net.Conn]struct{}{}, refusal: map[string]int{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		p.closing = true
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *frontProxy) setBackend(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.backend = addr
}

// refused returns how many requests whose first line starts with prefix
// found no daemon.
func (p *frontProxy) refused(prefix string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for line, k := range p.refusal {
		if strings.HasPrefix(line, prefix) {
			n += k
		}
	}
	return n
}

// track adds cs to the open connections, or closes them and reports false
// when the proxy is closing.
func (p *frontProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		if p.closing {
			c.Close()
			continue
		}
		p.conns[c] = struct{}{}
	}
	return !p.closing
}

// untrack closes cs and forgets them.
func (p *frontProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		c.Close()
	}
}

func (p *frontProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(c)
		}()
	}
}

func (p *frontProxy) serve(c net.Conn) {
	p.mu.Lock()
	backend := p.backend
	p.mu.Unlock()
	var up net.Conn
	if backend != "" {
		var err error
		if up, err = net.DialTimeout("tcp", backend, wait); err != nil {
			up = nil
		}
	}
	if up == nil {
		// No daemon: note what was asked, then close unanswered.
		c.SetReadDeadline(time.Now().Add(wait))
		line, _ := bufio.NewReader(c).ReadString('\n')
		p.mu.Lock()
		p.refusal[strings.TrimSpace(line)]++
		p.mu.Unlock()
		p.untrack(c)
		return
	}
	defer p.untrack(c, up)
	if !p.track(up) {
		return
	}
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); done <- struct{}{} }()
	go func() { io.Copy(c, up); done <- struct{}{} }()
	<-done
	// One side ended: end both, which ends the other copy.
	c.Close()
	up.Close()
	<-done
}
