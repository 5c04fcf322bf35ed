package ipc

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRateLimiterLetsOneLinePerKeyPerIntervalAndCountsTheRest(t *testing.T) {
	l := rateLimiter{interval: time.Second}
	t0 := time.Unix(1000, 0)
	steps := []struct {
		key            string
		at             time.Duration
		wantOK         bool
		wantSuppressed int
	}{
		{"a", 0, true, 0},
		{"a", 10 * time.Millisecond, false, 0},
		{"b", 20 * time.Millisecond, true, 0}, // another key has its own budget
		{"a", 500 * time.Millisecond, false, 0},
		{"a", 999 * time.Millisecond, false, 0},
		{"a", time.Second, true, 3},
		{"a", 2500 * time.Millisecond, true, 0},
		{"b", 3 * time.Second, true, 0},
	}
	for i, s := range steps {
		suppressed, ok := l.allow(s.key, t0.Add(s.at))
		if ok != s.wantOK || suppressed != s.wantSuppressed {
			t.Errorf("step %d: allow(%q, +%v) = %d, %v; want %d, %v", i, s.key, s.at, suppressed, ok, s.wantSuppressed, s.wantOK)
		}
	}
}

// TestInternalErrorsAnswerGenericallyAndLogTheDetail pins that a 500 never
// sends the client the internal error's text (it may name files or the
// daemon's internals); the log has it.
func TestInternalErrorsAnswerGenericallyAndLogTheDetail(t *testing.T) {
	f := newRouteFixture(t, nil)
	const detail = "open /var/lib/localbus/secret-dir/x: input/output error"
	rec := httptest.NewRecorder()
	rw := &reqWriter{ResponseWriter: rec}
	r := httptest.NewRequest(http.MethodGet, "/api/v1/sessions", nil)
	writeError(rw, errors.New(detail))
	f.h.observe(r, rw, "GET /api/v1/sessions")
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), `"code":"internal"`) {
		t.Errorf("answer = %d %s, want 500 internal", rec.Code, rec.Body)
	}
	if strings.Contains(rec.Body.String(), "secret-dir") {
		t.Errorf("the answer quotes the internal error: %s", rec.Body)
	}
	if log := f.log.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "secret-dir") {
		t.Errorf("log = %q, want an error line with the detail", log)
	}
}

// TestRequestsAndRefusalsAreCountedByRouteAndReason drives the router and
// reads its counters: a success by its route, a refusal by its reason and
// code, an unknown path as route "other".
func TestRequestsAndRefusalsAreCountedByRouteAndReason(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newRouteFixture(t, nil, func(o *Options) { o.Registry = reg })
	f.do(t, viaRoot, "GET", "/api/v1/sessions", "")
	f.do(t, viaRoot, "GET", "/api/v1/sessions", "")
	f.do(t, viaTCP, "GET", "/api/v1/sessions", "", "Authorization", "Bearer "+f.keys.wrong)
	f.do(t, viaRoot, "GET", "/no/such/route", "")
	f.do(t, viaRoot, "POST", "/api/v1/sessions", `{"ringSize":0}`)
	want := `
# HELP localbus_http_requests_total HTTP requests answered, by route ("other" for none) and status code; a stream is counted when its handler returns.
# TYPE localbus_http_requests_total counter
localbus_http_requests_total{code="200",route="GET /api/v1/sessions"} 2
localbus_http_requests_total{code="400",route="POST /api/v1/sessions"} 1
localbus_http_requests_total{code="401",route="GET /api/v1/sessions"} 1
localbus_http_requests_total{code="404",route="other"} 1
# HELP localbus_refusals_total Requests refused, by reason (auth, limit, bad_input, disk_full, unavailable, internal) and error code.
# TYPE localbus_refusals_total counter
localbus_refusals_total{code="invalid_credentials",reason="auth"} 1
localbus_refusals_total{code="invalid_ringSize",reason="bad_input"} 1
localbus_refusals_total{code="not_found",reason="bad_input"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "localbus_http_requests_total", "localbus_refusals_total"); err != nil {
		t.Error(err)
	}
}
