package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/localbus/localbus/daemon/daemontest"
	"github.com/localbus/localbus/daemon/upstream/natstest"
)

// TestUpstreamThroughputMeasure measures the bridge: events/s exported
// and imported for batched publishing with 64 readers on the mirror, and
// the publish latency of an exported session against one that is not,
// on the same daemon. It asserts nothing about speed; it runs only with
// LOCALBUS_UPSTREAM_MEASURE=1 (events, default 20000, in
// LOCALBUS_UPSTREAM_EVENTS) and logs the figures:
//
//	LOCALBUS_UPSTREAM_MEASURE=1 go test -run TestUpstreamThroughputMeasure -v ./cmd/localbus/e2e/
func TestUpstreamThroughputMeasure(t *testing.T) {
	if os.Getenv("LOCALBUS_UPSTREAM_MEASURE") != "1" {
		t.Skip("a measurement: set LOCALBUS_UPSTREAM_MEASURE=1 to run it")
	}
	total := 20000
	if n := os.Getenv("LOCALBUS_UPSTREAM_EVENTS"); n != "" {
		fmt.Sscan(n, &total)
	}
	const batch, readers = 100, 64
	srv := natstest.Start(t)
	a := startNode(t, "", nodeConfig(srv.URL(), "a", `export = ["bench"]`+"\n"))
	b := startNode(t, "", nodeConfig(srv.URL(), "b", `import = ["a/*"]`+"\n"))

	// The mirror exists once its first event arrived; the readers start
	// from it, so they count every event.
	publishBatch(t, a, "bench", 0, 1)
	pollUntil(t, "the mirror", func() bool {
		code, _ := b.Do(t, http.MethodGet, "/api/v1/sessions/a.bench", "")
		return code == http.StatusOK
	})
	zero := uint64(0)
	var fs []*daemontest.Follower
	for i := range readers {
		fs = append(fs, b.Follow(t, fmt.Sprint("reader", i), "/api/v1/sessions/a.bench/events?maxQueued=2048", daemontest.FollowOptions{Since: &zero}))
	}
	pollUntil(t, "the readers", func() bool {
		for _, f := range fs {
			if len(f.IDs()) < 1 {
				return false
			}
		}
		return true
	})

	start := time.Now()
	exported := publishTimed(t, a, "bench", 1, total, batch)
	published := time.Since(start)
	var tExport, tImport, tReaders time.Duration
	pollUntil(t, "the export", func() bool { return upstreamCount(t, a, "exported") >= total+1 })
	tExport = time.Since(start)
	pollUntil(t, "the import", func() bool { return upstreamCount(t, b, "imported") >= total+1 })
	tImport = time.Since(start)
	pollUntil(t, "every reader", func() bool {
		for _, f := range fs {
			if len(f.IDs()) < total+1 {
				return false
			}
		}
		return true
	})
	tReaders = time.Since(start)
	plain := publishTimed(t, a, "plain", 0, total, batch)

	rate := func(d time.Duration) float64 { return float64(total) / d.Seconds() }
	t.Logf("%d events in batches of %d, %d SSE readers on the mirror", total, batch, readers)
	t.Logf("published on a: %.0f events/s", rate(published))
	t.Logf("exported (acknowledged by JetStream): %.0f events/s", rate(tExport))
	t.Logf("imported into the mirror on b: %.0f events/s", rate(tImport))
	t.Logf("delivered to all %d readers: %.0f events/s per reader (%.0f frames/s in all)", readers, rate(tReaders), rate(tReaders)*readers)
	t.Logf("publish latency per batch, exported session: %s", exported)
	t.Logf("publish latency per batch, session not exported: %s", plain)
	for _, f := range fs {
		if p := f.Problems(); len(p) > 0 {
			t.Logf("%s: %d problems, first %s", f.Name, len(p), p[0])
			break
		}
	}
}

// latencies summarises publish times.
type latencies []time.Duration

func (l latencies) String() string {
	s := slices.Clone(l)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	q := func(p float64) time.Duration { return s[int(p*float64(len(s)-1))] }
	return fmt.Sprintf("mean %s, p50 %s, p99 %s", sum/time.Duration(len(s)), q(.5), q(.99))
}

// publishTimed publishes count events in batches and returns each
// batch's round trip.
func publishTimed(t *testing.T, d *daemontest.Daemon, session string, start, count, batch int) latencies {
	var out latencies
	for i := 0; i < count; i += batch {
		t0 := time.Now()
		publishBatch(t, d, session, start+i, min(batch, count-i))
		out = append(out, time.Since(t0))
	}
	return out
}

func publishBatch(t *testing.T, d *daemontest.Daemon, session string, start, n int) {
	t.Helper()
	var b strings.Builder
	b.WriteByte('[')
	for k := range n {
		if k > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"type":"bench:e","data":{"n":%d,"pad":"0123456789abcdef0123456789abcdef"}}`, start+k)
	}
	b.WriteByte(']')
	if code, body := d.Do(t, http.MethodPost, "/api/v1/sessions/"+session+"/events", b.String()); code != http.StatusOK {
		t.Fatalf("publish: %d %s", code, body)
	}
}

// upstreamCount reads a counter of GET /api/v1/upstream.
func upstreamCount(t *testing.T, d *daemontest.Daemon, name string) int {
	t.Helper()
	code, body := d.Do(t, http.MethodGet, "/api/v1/upstream", "")
	if code != http.StatusOK {
		t.Fatalf("GET /api/v1/upstream: %d %s", code, body)
	}
	var m map[string]any
	json.Unmarshal(body, &m)
	n, _ := m[name].(float64)
	return int(n)
}
