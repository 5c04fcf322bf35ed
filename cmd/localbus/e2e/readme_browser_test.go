package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
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

// TestReadmeBrowserSnippetsResumeAcrossAReload runs the README's browser
// WebSocket and EventSource snippets, as written but for the key and the
// address, side by side in one page in headless chromium, each with a
// console.log that reports to the test. The test publishes, reloads the
// daemon and publishes while the snippets reconnect: each must print every
// event once, in order, with its id.
func TestReadmeBrowserSnippetsResumeAcrossAReload(t *testing.T) {
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

	d := start(t, setup{tcp: true, config: fmt.Sprintf("allowed_origins = [%q]\n", pages.URL)})
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
		code := strings.ReplaceAll(snippets[name], "127.0.0.1:8001", d.tcp)
		code = strings.ReplaceAll(code, "'lb_…'", string(key))
		if name == "es" {
			code = "const key = " + string(key) + ";\n" + code // the README's WebSocket block defines it
		}
		fmt.Fprintf(&b, `<script>
(() => {
const console = {log: (id, type, data) => report({kind: %q, id: id, n: data, reason: type})};
%s
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
		deadline := time.Now().Add(3 * wait)
		for !cond() {
			if errs := got.find("error"); len(errs) > 0 {
				t.Fatalf("the page reported an error: %s\nreports: %+v", errs[0].Message, got.all())
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; the page reported %+v", what, got.all())
			}
			time.Sleep(20 * time.Millisecond) // polling interval
		}
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
	waitFor("three events in each snippet", func() bool { return len(got.find("ws")) == 3 && len(got.find("es")) == 3 })
	if st, body := d.Do(t, "POST", "/api/v1/reload", ""); st != http.StatusOK {
		t.Fatalf("reload = %d %s", st, body)
	}
	publish(4, 6) // while the snippets reconnect
	waitFor("six events in each snippet", func() bool { return len(got.find("ws")) >= 6 && len(got.find("es")) >= 6 })
	waitFor("both snippets to follow again", func() bool { return subscribers() == 2 })
	publish(7, 7)
	waitFor("the last event in each snippet", func() bool { return len(got.find("ws")) >= 7 && len(got.find("es")) >= 7 })

	for _, name := range []string{"ws", "es"} {
		var ids []uint64
		var ns []int
		for _, e := range got.find(name) {
			if e.Reason != "build:step" {
				t.Errorf("the %s snippet printed type %q, want build:step", name, e.Reason)
			}
			ids, ns = append(ids, e.ID), append(ns, e.N)
		}
		want := []int{1, 2, 3, 4, 5, 6, 7}
		if !slices.Equal(ns, want) || !slices.Equal(ids, []uint64{1, 2, 3, 4, 5, 6, 7}) {
			t.Errorf("the %s snippet printed events n=%v ids=%v, want 1…7 once each, in order, across the reload", name, ns, ids)
		}
	}
}
