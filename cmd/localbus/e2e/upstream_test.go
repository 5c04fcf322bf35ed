package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/localbus/localbus/daemon/daemontest"
	"github.com/localbus/localbus/daemon/upstream/natstest"

	"github.com/localbus/localbus/bus/bustest"
)

// upstreamWait bounds the waits of the upstream tests: catching up after
// an outage takes a reconnect or two.
const upstreamWait = 60 * time.Second

// nodeConfig is the config of a daemon that is node name of the NATS
// server at url.
func nodeConfig(url, name, table string) string {
	return fmt.Sprintf("[upstream]\nurl = %q\nnode = %q\n%s", url, name, table)
}

// startNode starts a durable daemon in dir ("" for a new one).
func startNode(t *testing.T, dir, config string) *daemontest.Daemon {
	t.Helper()
	return daemontest.Start(t, daemontest.Options{Dir: dir, Config: config, Durable: true})
}

// publishNumbers publishes count build:step events to session on d, their
// data the numbers from start on, in batches of 10.
func publishNumbers(t *testing.T, d *daemontest.Daemon, session string, start, count int) {
	t.Helper()
	publishBatches(t, d, session, start, count, 10)
}

// publishBatches publishes count build:step events to session on d, their
// data the numbers from start on, in batches of batch (one POST each).
func publishBatches(t *testing.T, d *daemontest.Daemon, session string, start, count, batch int) {
	t.Helper()
	var b strings.Builder
	for i := 0; i < count; i += batch {
		b.Reset()
		b.WriteByte('[')
		for k := i; k < min(i+batch, count); k++ {
			if k > i {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"type":"build:step","data":%d}`, start+k)
		}
		b.WriteByte(']')
		if code, body := d.Do(t, http.MethodPost, "/api/v1/sessions/"+session+"/events", b.String()); code != http.StatusOK {
			t.Fatalf("publish: %d %s", code, body)
		}
	}
}

// pollUntil polls cond every 20 ms until it holds or upstreamWait passes.
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	bustest.Eventually(t, upstreamWait, what, cond)
}

var lagRE = regexp.MustCompile(`(?m)^localbus_upstream_export_lag_events\{session="build"\} (\d+)$`)

// exportLag reads the export lag of session build from d's /metrics.
func exportLag(t *testing.T, d *daemontest.Daemon) int {
	t.Helper()
	code, body := d.Do(t, http.MethodGet, "/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	m := lagRE.FindSubmatch(body)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// upstreamStatus runs localbus status --json against d and returns its
// upstream part.
func upstreamStatus(t *testing.T, d *daemontest.Daemon) map[string]any {
	t.Helper()
	out, err := exec.Command(daemontest.Binary(t), "status", "--socket", d.Socket, "--json").Output()
	if err != nil {
		t.Fatalf("localbus status: %v", err)
	}
	var st struct{ Upstream map[string]any }
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("localbus status --json: %v\n%s", err, out)
	}
	return st.Upstream
}

// TestUpstreamMirrorSurvivesKillingNATSAndEitherDaemon runs two daemons,
// a exporting session build and b mirroring it as a.build, with readers of
// the mirror over SSE and WebSocket, and kills (SIGKILL) nats-server, a and
// b in turn mid-stream. Every event reaches the readers once, in order,
// with its origin, and the readers, resuming by id, never see a gap.
func TestUpstreamMirrorSurvivesKillingNATSAndEitherDaemon(t *testing.T) {
	srv := natstest.Start(t)
	a := startNode(t, "", nodeConfig(srv.URL(), "a", `export = ["build"]`+"\n"))
	b := startNode(t, "", nodeConfig(srv.URL(), "b", `import = ["a/*"]`+"\n"))

	publishNumbers(t, a, "build", 0, 10)
	pollUntil(t, "the mirror", func() bool {
		code, _ := b.Do(t, http.MethodGet, "/api/v1/sessions/a.build", "")
		return code == http.StatusOK
	})
	zero := uint64(0)
	sse := b.Follow(t, "sse", "/api/v1/sessions/a.build/events", daemontest.FollowOptions{Since: &zero})
	ws := b.Follow(t, "ws", "/api/v1/sessions/a.build/ws", daemontest.FollowOptions{Transport: daemontest.WebSocket, Since: &zero})

	// nats-server killed mid-stream: publishing goes on, the lag shows.
	publishNumbers(t, a, "build", 10, 300)
	srv.Kill()
	publishNumbers(t, a, "build", 310, 300)
	if lag := exportLag(t, a); lag <= 0 {
		t.Errorf("export lag in /metrics with NATS down = %d, want > 0", lag)
	}
	if st := upstreamStatus(t, a); st["connected"] != false || st["lag"].(float64) <= 0 {
		t.Errorf("status with NATS down: connected %v, lag %v; want false and > 0", st["connected"], st["lag"])
	}
	t.Log("restarting nats-server")
	srv.Restart()
	pollUntil(t, "the export lag to drain", func() bool { return exportLag(t, a) == 0 })

	t.Log("lag drained")
	// The exporting daemon killed mid-stream.
	publishNumbers(t, a, "build", 610, 300)
	a.Kill(t)
	a = startNode(t, a.Dir, "")
	publishNumbers(t, a, "build", 910, 300)

	t.Log("a restarted")
	// The importing daemon killed mid-stream; the readers come back to it.
	publishNumbers(t, a, "build", 1210, 300)
	b.Kill(t)
	b = startNode(t, b.Dir, "")
	publishNumbers(t, a, "build", 1510, 300)

	t.Log("b restarted")
	const total = 1810
	code, body := a.Do(t, http.MethodGet, "/api/v1/sessions/build", "")
	var src struct{ Epoch string }
	if json.Unmarshal(body, &src); code != http.StatusOK || src.Epoch == "" {
		t.Fatalf("GET the source session: %d %s", code, body)
	}
	for _, f := range []*daemontest.Follower{sse, ws} {
		pollUntil(t, f.Name+" to get every event", func() bool { return len(f.IDs()) >= total })
		t.Log(f.Name, "has every event")
		envs := f.Envelopes()
		if len(envs) != total {
			t.Errorf("%s got %d events, want %d", f.Name, len(envs), total)
		}
		for i, env := range envs {
			o := env.Origin
			if env.ID != uint64(i+1) || o == nil || o.Node != "a" || o.Session != "build" || o.ID != uint64(i+1) || o.Epoch != src.Epoch || string(env.Data) != strconv.Itoa(i) {
				t.Fatalf("%s: event %d is id %d data %s origin %+v; want id %d, data %d, origin a/build/%s/%d",
					f.Name, i, env.ID, env.Data, o, i+1, i, src.Epoch, i+1)
			}
		}
		for _, p := range f.Problems() {
			// A killed daemon breaks the connection without stream:closed,
			// and so does an eviction: a mirror catching up appends up to
			// 1,000 events at once, more than a reader's default queue of
			// 256, and the evicted reader resumes by id with nothing lost
			// (SPEC §2.2), which the ids above prove. Anything else (a
			// gap, an id out of order) is a failure.
			if !strings.HasPrefix(p, "stream ended without stream:closed") && !strings.HasPrefix(p, `unexpected {"v":1,"type":"stream:lagged"`) {
				t.Errorf("%s: %s", f.Name, p)
			}
		}
	}
	if code, body := b.Do(t, http.MethodPost, "/api/v1/sessions/a.build/events", `{"type":"x:y"}`); code != http.StatusConflict ||
		daemontest.DecodeError(t, body).Error.Code != "read_only" {
		t.Errorf("publish to the mirror = %d %s, want 409 read_only", code, body)
	}
	st := upstreamStatus(t, b)
	mirrors, _ := st["mirrors"].([]any)
	if len(mirrors) != 1 || mirrors[0].(map[string]any)["lastId"].(float64) != total {
		t.Errorf("status of b: mirrors %v, want a.build at %d", st["mirrors"], total)
	}
}
