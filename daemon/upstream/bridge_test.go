package upstream_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/daemon/journal"
	"github.com/localbus/localbus/daemon/upstream"
	"github.com/localbus/localbus/daemon/upstream/natstest"

	"github.com/localbus/localbus/bus/bustest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// node is an in-process daemon: a journal, a hub and a bridge, which can
// be stopped and started again on the same state.
type node struct {
	t    testing.TB
	dir  string
	cfg  upstream.Config
	ring int // the rings' size; 0 means the default
	// logger is the bridge's logger; nil means none.
	logger *slog.Logger
	j      *journal.Journal
	h      *hub.Hub
	br     *upstream.Bridge
}

func startNode(t testing.TB, cfg upstream.Config) *node {
	t.Helper()
	return startNodeRing(t, cfg, 0)
}

// startNodeRing starts a node whose rings hold ring events.
func startNodeRing(t testing.TB, cfg upstream.Config, ring int) *node {
	t.Helper()
	n := &node{t: t, dir: t.TempDir(), cfg: cfg, ring: ring}
	n.start()
	t.Cleanup(n.stop)
	return n
}

func (n *node) start() {
	n.t.Helper()
	var err error
	if n.j, err = journal.Open(journal.Options{Dir: filepath.Join(n.dir, "state"), Logger: quiet, SegmentBytes: 1 << 20}); err != nil {
		n.t.Fatal(err)
	}
	cfg := n.cfg
	cfg.Fill()
	upstream.HoldBacklog(cfg, n.j) // as the daemon does, before the hub restores the sessions
	if n.h, err = hub.New(hub.Options{Journal: n.j, AutoCreate: true, Limits: bus.Limits{RingSize: n.ring}}); err != nil {
		n.t.Fatal(err)
	}
	logger := n.logger
	if logger == nil {
		logger = quiet
	}
	if n.br, err = upstream.Start(upstream.Options{Config: cfg, Hub: n.h, Cursors: n.j, Backlog: n.j, Logger: logger,
		ScanInterval: 20 * time.Millisecond, AckTimeout: 2 * time.Second, ReconnectWait: 50 * time.Millisecond}); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) stop() {
	if n.br == nil {
		return
	}
	n.br.Close()
	n.h.EndStreams(bus.EndShutdown)
	n.h.Close()
	n.j.Close()
	n.br = nil
}

func (n *node) restart() {
	n.stop()
	n.start()
}

// publish publishes count events to session in batches of batch, their
// data the numbers from start on.
func (n *node) publish(session string, start, count, batch int) {
	n.t.Helper()
	for i := 0; i < count; i += batch {
		var evs []bus.Event
		for k := i; k < min(i+batch, count); k++ {
			evs = append(evs, bus.Event{Type: bustest.Type("build:step"), Data: json.RawMessage(fmt.Sprint(start + k))})
		}
		if _, _, err := n.h.Publish(bustest.SessionID(session), evs); err != nil {
			n.t.Fatalf("publish to %s: %v", session, err)
		}
	}
}

// waitFor polls cond until it holds or 30 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	bustest.Eventually(t, 30*time.Second, what, cond)
}

func lastID(h *hub.Hub, session string) uint64 {
	if s, ok := h.Session(session); ok {
		return s.Bus.LastID()
	}
	return 0
}

// mirrored reads every event the mirror's ring holds.
func mirrored(t *testing.T, h *hub.Hub, session string) []bus.Envelope {
	t.Helper()
	s, ok := h.Session(session)
	if !ok {
		t.Fatalf("no mirror %s", session)
	}
	sub, err := s.Bus.Subscribe(t.Context(), bus.SubscribeOptions{Cursor: new(uint64)})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	frames, _ := sub.Take(nil)
	var out []bus.Envelope
	for _, f := range frames {
		if f.Reserved() {
			continue
		}
		var env bus.Envelope
		if err := json.Unmarshal(f.JSON(), &env); err != nil {
			t.Fatal(err)
		}
		out = append(out, env)
	}
	return out
}

// checkMirror checks that the mirror holds the source's events 1..want
// once and in order, each with its origin, the data being the numbers
// from 0 on.
func checkMirror(t *testing.T, envs []bus.Envelope, node, session string, want int) {
	t.Helper()
	if len(envs) != want {
		t.Errorf("mirror holds %d events, want %d", len(envs), want)
	}
	for i, env := range envs {
		o := env.Origin
		if o == nil || o.Node != node || o.Session != session || o.ID != uint64(i+1) || o.Epoch == "" {
			t.Fatalf("event %d: origin %+v, want node %s session %s id %d", i, o, node, session, i+1)
		}
		if string(env.Data) != fmt.Sprint(i) || env.Type != "build:step" {
			t.Fatalf("event %d: %s %s, want build:step %d", i, env.Type, env.Data, i)
		}
		if env.ID != uint64(i+1) {
			t.Fatalf("event %d: mirror id %d, want %d", i, env.ID, i+1)
		}
	}
}

func twoNodes(t *testing.T, srv *natstest.Server) (a, b *node) {
	a = startNode(t, upstream.Config{URLs: []string{srv.URL()}, Node: "a", Export: []string{"build*"}})
	b = startNode(t, upstream.Config{URLs: []string{srv.URL()}, Node: "b", Import: []string{"a/*"}})
	return a, b
}

func TestExportedEventsReachTheMirrorOnceInOrderWithOrigin(t *testing.T) {
	srv := natstest.Start(t)
	a, b := twoNodes(t, srv)
	a.publish("build", 0, 300, 7)
	a.publish("other", 0, 5, 1) // not exported
	waitFor(t, "the mirror to catch up", func() bool { return lastID(b.h, "a.build") == 300 })
	envs := mirrored(t, b.h, "a.build")
	checkMirror(t, envs, "a", "build", 300)
	s, _ := a.h.Session("build")
	if envs[0].Origin.Epoch != s.Bus.Epoch() {
		t.Errorf("origin epoch %q, want the source's %q", envs[0].Origin.Epoch, s.Bus.Epoch())
	}
	if _, ok := b.h.Session("a.other"); ok {
		t.Error("a session that matches no export pattern was mirrored")
	}
	if _, _, err := b.h.Publish(bustest.SessionID("a.build"), []bus.Event{{Type: bustest.Type("x:y")}}); !errors.Is(err, hub.ErrReadOnly) {
		t.Errorf("publish to a mirror = %v, want ErrReadOnly", err)
	}
	if got := lastID(b.h, "a.build"); got != 300 {
		t.Errorf("mirror lastId after a refused publish = %d, want 300", got)
	}
	waitFor(t, "the export lag to drain", func() bool { return a.br.Status().Lag == 0 })
	st := a.br.Status()
	if !st.Connected || len(st.Sessions) != 1 || st.Sessions[0].Session != "build" || st.Sessions[0].ExportedID != 300 {
		t.Errorf("status of a = %+v", st)
	}
	bst := b.br.Status()
	if len(bst.Mirrors) != 1 || bst.Mirrors[0].Session != "a.build" || bst.Mirrors[0].ID != 300 || bst.Mirrors[0].LastID != 300 {
		t.Errorf("status of b = %+v", bst)
	}
}

func TestNATSKilledMidStreamLosesNothing(t *testing.T) {
	srv := natstest.Start(t)
	a, b := twoNodes(t, srv)
	const total = 3000
	var wg sync.WaitGroup
	half := make(chan struct{})
	wg.Go(func() {
		for i := 0; i < total; i += 10 {
			if i == total/2 {
				close(half)
			}
			a.publish("build", i, 10, 10)
		}
	})
	<-half
	srv.Kill()
	wg.Wait()
	// Publishing never waited for NATS, and the lag shows what is owed.
	if lag := a.br.Status().Lag; lag == 0 {
		t.Error("export lag is 0 while NATS is down")
	}
	if a.br.Status().Connected {
		t.Error("status says connected while NATS is down")
	}
	srv.Restart()
	waitFor(t, "the mirror to catch up", func() bool { return lastID(b.h, "a.build") >= total })
	checkMirror(t, mirrored(t, b.h, "a.build"), "a", "build", total)
	waitFor(t, "the export lag to drain", func() bool { return a.br.Status().Lag == 0 })
}

func TestDaemonsRestartedMidStreamResumeWithoutDuplicates(t *testing.T) {
	srv := natstest.Start(t)
	a, b := twoNodes(t, srv)
	a.publish("build", 0, 500, 10)
	waitFor(t, "some import", func() bool { return lastID(b.h, "a.build") > 0 })
	b.restart()
	a.publish("build", 500, 500, 10)
	a.restart()
	a.publish("build", 1000, 500, 10)
	waitFor(t, "the mirror to catch up", func() bool { return lastID(b.h, "a.build") >= 1500 })
	checkMirror(t, mirrored(t, b.h, "a.build"), "a", "build", 1500)
	// A reader of the mirror that resumes by id sees no gap.
	s, _ := b.h.Session("a.build")
	cursor := uint64(700)
	sub, err := s.Bus.Subscribe(t.Context(), bus.SubscribeOptions{Cursor: &cursor, Epoch: s.Bus.Epoch()})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	frames, _ := sub.Take(nil)
	for _, f := range frames {
		if f.Type == bus.TypeGap {
			t.Fatalf("resuming the mirror at 700 got %s", f.JSON())
		}
	}
}

func TestSourceEpochChangeIsAGapForMirrorReaders(t *testing.T) {
	srv := natstest.Start(t)
	a, b := twoNodes(t, srv)
	a.publish("build", 0, 20, 5)
	waitFor(t, "the mirror", func() bool { return lastID(b.h, "a.build") == 20 })
	s, _ := b.h.Session("a.build")
	oldEpoch := s.Bus.Epoch()
	live, err := s.Bus.Subscribe(t.Context(), bus.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()

	// The source session starts over: a new epoch, ids from 1.
	if err := a.h.Delete("build"); err != nil {
		t.Fatal(err)
	}
	a.publish("build", 0, 3, 3)
	waitFor(t, "the mirror's new epoch", func() bool {
		s, ok := b.h.Session("a.build")
		return ok && s.Bus.Epoch() != oldEpoch && s.Bus.LastID() == 3
	})
	frames, ended := live.Take(nil)
	if !ended || frames[len(frames)-1].Type != bus.TypeClosed {
		t.Errorf("a live reader of the old mirror was not closed: ended %v", ended)
	}
	s, _ = b.h.Session("a.build")
	cursor := uint64(20)
	sub, err := s.Bus.Subscribe(t.Context(), bus.SubscribeOptions{Cursor: &cursor, Epoch: oldEpoch})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	frames, _ = sub.Take(nil)
	if len(frames) < 2 || frames[1].Type != bus.TypeGap {
		t.Fatalf("resume across the source's epoch change: frames %d, want stream:gap second", len(frames))
	}
	var g struct{ Data bus.GapData }
	json.Unmarshal(frames[1].JSON(), &g)
	if g.Data.Reason != bus.GapEpochReset {
		t.Errorf("gap reason %q, want %q", g.Data.Reason, bus.GapEpochReset)
	}
}

func TestReloadedPatternsStartExportAndImport(t *testing.T) {
	srv := natstest.Start(t)
	a := startNode(t, upstream.Config{URLs: []string{srv.URL()}, Node: "a"})
	b := startNode(t, upstream.Config{URLs: []string{srv.URL()}, Node: "b"})
	a.publish("late", 0, 5, 5)
	if _, _, err := b.h.Publish(bustest.SessionID("a.late"), []bus.Event{{Type: bustest.Type("x:y")}}); err != nil {
		t.Fatalf("publish to a.late before it is imported = %v, want it accepted", err)
	}
	b.h.Delete("a.late")
	a.br.SetPatterns([]string{"late"}, nil)
	b.br.SetPatterns(nil, []string{"a/late"})
	waitFor(t, "the mirror", func() bool { return lastID(b.h, "a.late") == 5 })
	checkMirror(t, mirrored(t, b.h, "a.late"), "a", "late", 5)
	if _, _, err := b.h.Publish(bustest.SessionID("a.late"), []bus.Event{{Type: bustest.Type("x:y")}}); !errors.Is(err, hub.ErrReadOnly) {
		t.Errorf("publish to an imported session = %v, want ErrReadOnly", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Errorf("SetPatterns with a bad import pattern did not panic")
			}
		}()
		b.br.SetPatterns(nil, []string{"no-slash"})
	}()
	if got := b.br.Status().Import; len(got) != 1 || got[0] != "a/late" {
		t.Errorf("import patterns after a refused change = %q, want the old ones", got)
	}
}

func TestABurstOfManyRingsReachesTheMirrorComplete(t *testing.T) {
	srv := natstest.Start(t)
	a := startNodeRing(t, upstream.Config{URLs: []string{srv.URL()}, Node: "a", Export: []string{"build*"}}, 1000)
	b := startNodeRing(t, upstream.Config{URLs: []string{srv.URL()}, Node: "b", Import: []string{"a/*"}}, 50000)
	const total = 20000 // twenty rings, published faster than export drains them
	a.publish("build", 0, 1, 1)
	waitFor(t, "the first export", func() bool { return lastID(b.h, "a.build") == 1 })
	a.publish("build", 1, total-1, 1000)
	waitFor(t, "the mirror to catch up", func() bool { return lastID(b.h, "a.build") >= total })
	checkMirror(t, mirrored(t, b.h, "a.build"), "a", "build", total)
	waitFor(t, "the export lag to drain", func() bool { return a.br.Status().Lag == 0 })
	if st := a.br.Status(); st.Lost != 0 || st.Exported != total {
		t.Errorf("status of a: exported %d, lost %d; want %d, 0", st.Exported, st.Lost, total)
	}
	if got := a.j.BacklogBytes(); got != 0 {
		t.Errorf("backlog after export = %d bytes, want 0", got)
	}
}

func TestABacklogPastItsBoundIsCountedLost(t *testing.T) {
	srv := natstest.Start(t)
	a := startNodeRing(t, upstream.Config{URLs: []string{srv.URL()}, Node: "a", Export: []string{"build*"}, BacklogBytes: 20000}, 100)
	b := startNode(t, upstream.Config{URLs: []string{srv.URL()}, Node: "b", Import: []string{"a/*"}})
	a.publish("build", 0, 10, 10)
	waitFor(t, "the first export", func() bool { return lastID(b.h, "a.build") == 10 })
	srv.Kill()
	const total = 5010 // far more than 20,000 bytes of backlog
	a.publish("build", 10, total-10, 100)
	if got := a.j.BacklogBytes(); got > 20000+1000 {
		t.Errorf("backlog while NATS is down = %d bytes, want at most its bound, 20000", got)
	}
	srv.Restart()
	waitFor(t, "the export lag to drain", func() bool { return a.br.Status().Lag == 0 })
	st := a.br.Status()
	if st.Lost == 0 || st.Exported+st.Lost != total {
		t.Errorf("status of a: exported %d, lost %d; want them to add up to %d, lost > 0", st.Exported, st.Lost, total)
	}
	waitFor(t, "the mirror's last event", func() bool { return lastID(b.h, "a.build") == st.Exported })
}

// TestStatusAndLogsHideTheURLsUserInformation connects with a user name
// and password in the URL: the status (its URLs and the server it is
// connected to) and the log show neither.
func TestStatusAndLogsHideTheURLsUserInformation(t *testing.T) {
	srv := natstest.Start(t)
	u := strings.Replace(srv.URL(), "nats://", "nats://alice:s3cret@", 1)
	var log strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return log.Write(p)
	}), nil))
	n := &node{t: t, dir: t.TempDir(), cfg: upstream.Config{URLs: []string{u}, Node: "a"}}
	n.logger = logger
	n.start()
	t.Cleanup(n.stop)
	waitFor(t, "the bridge to connect", func() bool { return n.br.Status().Connected })
	st := n.br.Status()
	mu.Lock()
	text := fmt.Sprintf("%+v\n%s", st, log.String())
	mu.Unlock()
	if strings.Contains(text, "alice") || strings.Contains(text, "s3cret") {
		t.Errorf("the user information shows:\n%s", text)
	}
	if len(st.URLs) != 1 || !strings.Contains(st.URLs[0], "redacted@") || !strings.Contains(st.Server, "redacted@") {
		t.Errorf("status URLs %q, server %q: want the user information redacted", st.URLs, st.Server)
	}
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
