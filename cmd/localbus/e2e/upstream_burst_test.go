package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/daemon/daemontest"
	"github.com/localbus/localbus/daemon/upstream/natstest"
	"github.com/localbus/localbus/ipc/wire"
)

// burstTotal is the burst the upstream tests publish: more than twelve
// rings of the default 8,000.
const burstTotal = 100000

// publishBurst publishes count build:step events to session on d, their
// data the numbers from start on, in batches of 1,000 (one POST each).
func publishBurst(t *testing.T, d *daemontest.Daemon, session string, start, count int) {
	t.Helper()
	publishBatches(t, d, session, start, count, 1000)
}

// upstreamOf reads GET /api/v1/upstream of d.
func upstreamOf(t *testing.T, d *daemontest.Daemon) wire.UpstreamStatus {
	t.Helper()
	code, body := d.Do(t, http.MethodGet, "/api/v1/upstream", "")
	var st wire.UpstreamStatus
	if code != http.StatusOK || json.Unmarshal(body, &st) != nil {
		t.Fatalf("GET /api/v1/upstream: %d %s", code, body)
	}
	return st
}

// lastIDOf returns the lastId of session on d, 0 when it does not exist.
func lastIDOf(t *testing.T, d *daemontest.Daemon, session string) uint64 {
	t.Helper()
	code, body := d.Do(t, http.MethodGet, "/api/v1/sessions/"+session, "")
	if code == http.StatusNotFound {
		return 0
	}
	var s struct{ LastID uint64 }
	if code != http.StatusOK || json.Unmarshal(body, &s) != nil {
		t.Fatalf("GET session %s: %d %s", session, code, body)
	}
	return s.LastID
}

// sourceEpoch returns the epoch of session build on a.
func sourceEpoch(t *testing.T, a *daemontest.Daemon) string {
	t.Helper()
	code, body := a.Do(t, http.MethodGet, "/api/v1/sessions/build", "")
	var src struct{ Epoch string }
	if json.Unmarshal(body, &src); code != http.StatusOK || src.Epoch == "" {
		t.Fatalf("GET the source session: %d %s", code, body)
	}
	return src.Epoch
}

// checkMirrorWhole checks that the mirror a.build on b holds the source's
// events 1..total once, in order, each with its origin, and that a's
// export lost nothing and owes nothing. The mirror's figures prove it
// (its ids are its own, contiguous; its importer applies an origin id
// only after the one before it, else records a loss): its last id is
// total, its last event's origin id is total, and no loss was recorded.
// The events themselves are read over SSE from readFrom on, the data
// being the numbers from 0 on.
func checkMirrorWhole(t *testing.T, a, b *daemontest.Daemon, total int, readFrom uint64) {
	t.Helper()
	pollUntil(t, "the mirror to be complete", func() bool { return lastIDOf(t, b, "a.build") >= uint64(total) })
	epoch := sourceEpoch(t, a)
	st := upstreamOf(t, b)
	if len(st.Mirrors) != 1 || st.Mirrors[0].LastID != uint64(total) || st.Mirrors[0].ID != uint64(total) ||
		st.Mirrors[0].Epoch != epoch || st.ImportLost != 0 || st.ImportGaps != 0 {
		t.Errorf("b: mirrors %+v, import lost %d in %d gaps; want a.build at %d, origin id %d of epoch %s, none lost",
			st.Mirrors, st.ImportLost, st.ImportGaps, total, total, epoch)
	}
	since := readFrom
	f := b.Follow(t, "reader", "/api/v1/sessions/a.build/events", daemontest.FollowOptions{Since: &since})
	want := total - int(readFrom)
	pollUntil(t, "the reader to get every event", func() bool { return len(f.IDs()) >= want })
	f.Stop()
	envs := f.Envelopes()
	if len(envs) != want {
		t.Errorf("the mirror holds %d events from id %d, want %d", len(envs), readFrom+1, want)
	}
	for k, env := range envs {
		i := int(readFrom) + k
		o := env.Origin
		if env.ID != uint64(i+1) || o == nil || o.Node != "a" || o.Session != "build" || o.ID != uint64(i+1) ||
			o.Epoch != epoch || o.LostFrom != 0 || string(env.Data) != strconv.Itoa(i) {
			t.Fatalf("event %d of the mirror is id %d, data %s, origin %+v; want id %d, data %d, origin a/build/%s/%d",
				i, env.ID, env.Data, o, i+1, i, epoch, i+1)
		}
	}
	for _, p := range f.Problems() {
		// The reader's queue may overflow while it replays (it resumes
		// by id, which the ids above check); nothing else.
		if !strings.HasPrefix(p, `unexpected {"v":1,"type":"stream:lagged"`) {
			t.Errorf("reader: %s", p)
		}
	}
	pollUntil(t, "a's export to owe nothing", func() bool {
		st := upstreamOf(t, a)
		return st.Lag == 0 && st.BacklogBytes == 0
	})
	if st := upstreamOf(t, a); st.Lost != 0 {
		t.Errorf("a lost %d events to export", st.Lost)
	}
}

// burstNodes starts node a, exporting build with the default ring, and
// node b, importing a/* into rings that hold a whole burst.
func burstNodes(t *testing.T, srv *natstest.Server, aTable string) (a, b *daemontest.Daemon) {
	a = startNode(t, "", nodeConfig(srv.URL(), "a", `export = ["build"]`+"\n"+aTable))
	b = startNode(t, "", "ring_size = 100000\n"+nodeConfig(srv.URL(), "b", `import = ["a/*"]`+"\n"))
	return a, b
}

// TestUpstreamABurstOfTwelveRingsReachesTheMirrorWhole: 100,000 events
// published to an exported session as fast as a client can, more than
// twelve of its rings, all reach the mirror, once and in order.
func TestUpstreamABurstOfTwelveRingsReachesTheMirrorWhole(t *testing.T) {
	srv := natstest.Start(t)
	a, b := burstNodes(t, srv, "")
	publishBurst(t, a, "build", 0, burstTotal)
	checkMirrorWhole(t, a, b, burstTotal, 0)
}

// TestUpstreamABurstWhileNATSIsDownReachesTheMirrorWhole: NATS stopped in
// the middle of the burst and started again after it.
func TestUpstreamABurstWhileNATSIsDownReachesTheMirrorWhole(t *testing.T) {
	srv := natstest.Start(t)
	a, b := burstNodes(t, srv, "")
	publishBurst(t, a, "build", 0, burstTotal/2)
	srv.Stop()
	publishBurst(t, a, "build", burstTotal/2, burstTotal/2)
	if st := upstreamOf(t, a); st.Connected || st.BacklogBytes == 0 || st.Lag == 0 {
		t.Errorf("a with NATS down: connected %v, backlog %d bytes, lag %d; want false, > 0, > 0", st.Connected, st.BacklogBytes, st.Lag)
	}
	srv.Restart()
	checkMirrorWhole(t, a, b, burstTotal, burstTotal/2-1000)
}

// TestUpstreamTheExportingDaemonKilledMidExportLosesNothing: a backlog of
// twelve rings, built while NATS was down, survives a SIGKILL of the
// exporting daemon in the middle of its export.
func TestUpstreamTheExportingDaemonKilledMidExportLosesNothing(t *testing.T) {
	srv := natstest.Start(t)
	a, b := burstNodes(t, srv, "")
	publishBurst(t, a, "build", 0, 10)
	pollUntil(t, "the mirror", func() bool { return lastIDOf(t, b, "a.build") == 10 })
	srv.Stop()
	publishBurst(t, a, "build", 10, burstTotal-10)
	srv.Restart()
	pollUntil(t, "the export to be under way", func() bool { return upstreamOf(t, a).Exported >= 20000 })
	a.Kill(t)
	if got := lastIDOf(t, b, "a.build"); got >= burstTotal {
		t.Fatalf("the export was over (the mirror at %d) before the kill", got)
	}
	a = startNode(t, a.Dir, "")
	checkMirrorWhole(t, a, b, burstTotal, burstTotal-10000)
}

// TestUpstreamABacklogPastItsBoundIsOneGapForTheMirrorsReaders: with a
// small backlog_bytes, what NATS could not take while it was down is
// dropped, oldest first: counted, logged, and announced to the mirror's
// readers as one stream:gap (upstream_lost) naming the missing origin ids,
// over SSE and WebSocket, live and resuming, also after the importing
// daemon restarts.
func TestUpstreamABacklogPastItsBoundIsOneGapForTheMirrorsReaders(t *testing.T) {
	srv := natstest.Start(t)
	a := startNode(t, "", "ring_size = 1000\n"+nodeConfig(srv.URL(), "a", `export = ["build"]`+"\nbacklog_bytes = 300000\n"))
	b := startNode(t, "", nodeConfig(srv.URL(), "b", `import = ["a/*"]`+"\n"))
	publishBurst(t, a, "build", 0, 10)
	pollUntil(t, "the mirror", func() bool { return lastIDOf(t, b, "a.build") == 10 })
	zero := uint64(0)
	live := []*daemontest.Follower{
		b.Follow(t, "live sse", "/api/v1/sessions/a.build/events", daemontest.FollowOptions{Since: &zero}),
		b.Follow(t, "live ws", "/api/v1/sessions/a.build/ws", daemontest.FollowOptions{Transport: daemontest.WebSocket, Since: &zero}),
	}
	for _, f := range live {
		pollUntil(t, f.Name+" to start", func() bool { return len(f.IDs()) == 10 })
	}

	srv.Stop()
	const total = 10000 // about 3 MB of backlog, ten times its bound
	publishBurst(t, a, "build", 10, total-10)
	srv.Restart()
	pollUntil(t, "a's export lag to drain", func() bool { return upstreamOf(t, a).Lag == 0 })
	st := upstreamOf(t, a)
	lost := st.Lost
	if lost == 0 || st.Exported+lost != total || len(st.Sessions) != 1 || st.Sessions[0].Lost != lost {
		t.Fatalf("a: exported %d, lost %d (sessions %+v); want them to add up to %d, lost > 0", st.Exported, lost, st.Sessions, total)
	}
	if m := metric(t, a, "localbus_upstream_lost_total"); m != float64(lost) {
		t.Errorf("localbus_upstream_lost_total = %v, want %d", m, lost)
	}
	for _, want := range []string{"over backlog_bytes; dropping the oldest unexported events", "events dropped before export (backlog_bytes reached)"} {
		if !strings.Contains(a.Stderr(), want) {
			t.Errorf("a's log has no %q", want)
		}
	}
	mirrorLast := uint64(total) - lost // the mirror's ids are contiguous
	pollUntil(t, "the mirror's last event", func() bool { return lastIDOf(t, b, "a.build") == mirrorLast })
	if m := metric(t, b, "localbus_upstream_import_lost_total"); m != float64(lost) {
		t.Errorf("b: localbus_upstream_import_lost_total = %v, want %d", m, lost)
	}
	if m := metric(t, b, "localbus_upstream_import_gaps_total"); m != 1 {
		t.Errorf("b: localbus_upstream_import_gaps_total = %v, want 1", m)
	}
	checkUpstreamMetricsInREADME(t, a, b)

	// The gap names origin ids 11..10+lost, just before origin id 11+lost,
	// which is the mirror's id 11.
	check := func(f *daemontest.Follower, lastDelivered uint64) {
		t.Helper()
		pollUntil(t, f.Name+" to get the last event", func() bool { return f.Last() == mirrorLast })
		var gaps []bus.GapData
		for _, p := range f.Problems() {
			raw, ok := strings.CutPrefix(p, "unexpected ")
			var env struct {
				Type string
				Data bus.GapData
			}
			if !ok || json.Unmarshal([]byte(raw), &env) != nil || env.Type != bus.TypeGap {
				if !strings.HasPrefix(p, "stream ended without stream:closed") && !strings.Contains(p, `"type":"stream:lagged"`) {
					t.Errorf("%s: %s", f.Name, p)
				}
				continue
			}
			gaps = append(gaps, env.Data)
		}
		if len(gaps) != 1 {
			t.Fatalf("%s got %d gaps, want one: %+v", f.Name, len(gaps), gaps)
		}
		g := gaps[0]
		if g.Reason != bus.GapUpstreamLost || g.OriginFrom != 11 || g.OriginTo != 10+lost || g.LastDeliveredID != lastDelivered ||
			g.EarliestAvailableID == nil || *g.EarliestAvailableID != 11 {
			t.Errorf("%s: gap %+v; want upstream_lost, origin ids 11..%d, lastDeliveredId %d, earliestAvailableId 11", f.Name, g, 10+lost, lastDelivered)
		}
		envs := f.Envelopes()
		for i, env := range envs {
			if env.ID == 11 && (env.Origin == nil || env.Origin.ID != 11+lost) {
				t.Errorf("%s: the event after the gap has origin %+v, want id %d", f.Name, env.Origin, 11+lost)
			}
			if i > 0 && env.ID != envs[i-1].ID+1 {
				t.Errorf("%s: id %d after %d", f.Name, env.ID, envs[i-1].ID)
			}
		}
	}
	for _, f := range live {
		check(f, 10)
	}
	resume := func(name string, transport daemontest.Transport, path string) *daemontest.Follower {
		since := uint64(5)
		return b.Follow(t, name, path, daemontest.FollowOptions{Transport: transport, Since: &since})
	}
	check(resume("resuming sse", daemontest.SSE, "/api/v1/sessions/a.build/events"), 10)
	check(resume("resuming ws", daemontest.WebSocket, "/api/v1/sessions/a.build/ws"), 10)

	// After b restarts, from its journal; the live readers, past the gap,
	// come back without another.
	b.Stop(t)
	b = startNode(t, b.Dir, "")
	for _, f := range live {
		pollUntil(t, f.Name+" to come back", func() bool { return f.Streams() >= 2 })
		check(f, 10)
	}
	check(resume("sse after b restarted", daemontest.SSE, "/api/v1/sessions/a.build/events"), 10)
	check(resume("ws after b restarted", daemontest.WebSocket, "/api/v1/sessions/a.build/ws"), 10)
}

// TestUpstreamAPurgedStreamIsAGapForTheMirrorsReaders: messages removed
// from the JetStream stream by hand before the importer read them reach
// the mirror's readers as a stream:gap (upstream_lost), not as silence.
func TestUpstreamAPurgedStreamIsAGapForTheMirrorsReaders(t *testing.T) {
	srv := natstest.Start(t)
	a := startNode(t, "", nodeConfig(srv.URL(), "a", `export = ["build"]`+"\n"))
	b := startNode(t, "", nodeConfig(srv.URL(), "b", `import = ["a/*"]`+"\n"))
	publishBurst(t, a, "build", 0, 100)
	pollUntil(t, "the mirror", func() bool { return lastIDOf(t, b, "a.build") == 100 })
	zero := uint64(0)
	readers := []*daemontest.Follower{
		b.Follow(t, "sse", "/api/v1/sessions/a.build/events", daemontest.FollowOptions{Since: &zero}),
		b.Follow(t, "ws", "/api/v1/sessions/a.build/ws", daemontest.FollowOptions{Transport: daemontest.WebSocket, Since: &zero}),
	}
	for _, f := range readers {
		pollUntil(t, f.Name+" to start", func() bool { return len(f.IDs()) == 100 })
	}

	// The importer stops; a goes on; the stream is purged by hand.
	b.Stop(t)
	publishBurst(t, a, "build", 100, 1000)
	pollUntil(t, "a's export", func() bool { return upstreamOf(t, a).Exported == 1100 })
	purgeStream(t, srv.URL(), "LOCALBUS")
	publishBurst(t, a, "build", 1100, 10)
	pollUntil(t, "a's export after the purge", func() bool { return upstreamOf(t, a).Exported == 1110 })
	b = startNode(t, b.Dir, "")
	pollUntil(t, "the mirror after the purge", func() bool { return lastIDOf(t, b, "a.build") == 110 })
	for _, f := range readers {
		pollUntil(t, f.Name+" to get the last event", func() bool { return f.Last() == 110 })
		var gaps []string
		for _, p := range f.Problems() {
			if strings.Contains(p, `"type":"stream:gap"`) {
				gaps = append(gaps, p)
			}
		}
		if len(gaps) != 1 || !strings.Contains(gaps[0], `"reason":"upstream_lost"`) ||
			!strings.Contains(gaps[0], `"originFrom":101,"originTo":1100`) {
			t.Errorf("%s: gaps %q, want one upstream_lost naming origin ids 101..1100", f.Name, gaps)
		}
	}
}

// metric returns the value of family (no labels) in d's /metrics, -1
// when it is not there.
func metric(t *testing.T, d *daemontest.Daemon, family string) float64 {
	t.Helper()
	code, body := d.Do(t, http.MethodGet, "/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(family) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// checkUpstreamMetricsInREADME checks that the localbus_upstream_*
// families the README's metrics table lists are those that a (exporting)
// and b (importing) serve together.
func checkUpstreamMetricsInREADME(t *testing.T, a, b *daemontest.Daemon) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	readme, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var listed, served []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(localbus_upstream_[a-z_]+)` \\|").FindAllSubmatch(readme, -1) {
		listed = append(listed, string(m[1]))
	}
	for _, d := range []*daemontest.Daemon{a, b} {
		_, body := d.Do(t, http.MethodGet, "/metrics", "")
		for _, m := range regexp.MustCompile(`(?m)^# TYPE (localbus_upstream_[a-z_]+) `).FindAllSubmatch(body, -1) {
			if !slices.Contains(served, string(m[1])) {
				served = append(served, string(m[1]))
			}
		}
	}
	slices.Sort(listed)
	slices.Sort(served)
	if !slices.Equal(listed, served) {
		t.Errorf("the README lists the upstream metrics %v; the daemons serve %v", listed, served)
	}
}

// purgeStream removes every message of the JetStream stream name, as an
// operator would by hand (nats stream purge).
func purgeStream(t *testing.T, url, name string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), upstreamWait)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err == nil {
		err = s.Purge(ctx)
	}
	if err != nil {
		t.Fatalf("purging the stream %s: %v", name, err)
	}
}
