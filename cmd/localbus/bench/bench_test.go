package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/localbus/localbus/cmd/localbus/bench/benchtest"
	"github.com/localbus/localbus/ipc"
	"github.com/localbus/localbus/ipc/wire"
)

// TestMain checks for leaked goroutines. Run starts the baseline server by
// running this binary again, which then serves instead of testing.
func TestMain(m *testing.M) {
	ServeBaselineIfAsked()
	goleak.VerifyTestMain(m)
}

// wait bounds every run in these tests.
const wait = 60 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

func TestSequenceCounts(t *testing.T) {
	cases := []struct {
		name string
		ids  []uint64
		want Check
	}{
		{"in order", []uint64{11, 12, 13, 14}, Check{Subscribers: 1, Expected: 4, Received: 4}},
		{"one lost", []uint64{11, 12, 14}, Check{Subscribers: 1, Expected: 4, Received: 3, Lost: 1}},
		{"one twice", []uint64{11, 12, 12, 13, 14}, Check{Subscribers: 1, Expected: 4, Received: 4, Duplicates: 1}},
		{"two swapped", []uint64{11, 13, 12, 14}, Check{Subscribers: 1, Expected: 4, Received: 4, OutOfOrder: 1}},
		{"outside the range", []uint64{10, 11, 12, 13, 14, 15}, Check{Subscribers: 1, Expected: 4, Received: 4, Unexpected: 2}},
		{"nothing", nil, Check{Subscribers: 1, Expected: 4, Lost: 4}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := newSequence(10, 4)
			for _, id := range tc.ids {
				q.add(id)
			}
			if diff := cmp.Diff(tc.want, q.result()); diff != "" {
				t.Errorf("check of %v (-want +got):\n%s", tc.ids, diff)
			}
			if ok := q.result().OK(); ok != (tc.want.Lost+tc.want.Duplicates+tc.want.OutOfOrder == 0) {
				t.Errorf("OK() = %v for %+v", ok, q.result())
			}
		})
	}
}

func TestCheckProblem(t *testing.T) {
	for _, tc := range []struct {
		c    Check
		want string
	}{
		{Check{Expected: 3, Received: 3}, ""},
		{Check{Expected: 3, Received: 2, Lost: 1}, "1 event lost"},
		{Check{Expected: 6, Received: 3, Lost: 3, Duplicates: 2, OutOfOrder: 1}, "3 events lost, 2 duplicates, 1 event out of order"},
	} {
		if got := tc.c.Problem(); got != tc.want {
			t.Errorf("Problem(%+v) = %q, want %q", tc.c, got, tc.want)
		}
	}
}

// pipeStream runs parse over a connection fed with chunks of body, and
// returns the frames it saw, in a readable form.
func pipeStream(t *testing.T, mk func(net.Conn) stream, chunks [][]byte) ([]string, error, []byte) {
	t.Helper()
	client, server := net.Pipe()
	defer client.Close()
	st := mk(client)
	fed := make(chan []byte, 1)
	go func() {
		// What the client writes back (pongs), until it closes.
		back, _ := io.ReadAll(server)
		fed <- back
	}()
	go func() {
		for _, c := range chunks {
			if _, err := server.Write(c); err != nil {
				return
			}
		}
	}()
	var got []string
	err := st.run(func(f *frame) error {
		s := fmt.Sprintf("kind %d id %d", f.kind, f.id)
		if f.due != 0 {
			s += fmt.Sprintf(" due %d", f.due)
		}
		if f.kind != kindEvent {
			s += " data " + string(f.data)
		}
		got = append(got, s)
		return nil
	})
	client.Close()
	back := <-fed
	server.Close()
	return got, err, back
}

// splits cuts b into pieces of every size from 1 to n, in turn.
func splits(b []byte, n int) [][]byte {
	var out [][]byte
	for size := 1; len(b) > 0; size = size%n + 1 {
		k := min(size, len(b))
		out = append(out, b[:k])
		b = b[k:]
	}
	return out
}

func chunk(s string) string { return strconv.FormatInt(int64(len(s)), 16) + "\r\n" + s + "\r\n" }

func TestSSEStreamParsesChunkedFramesCutAnywhere(t *testing.T) {
	body := chunk("retry: 3000\n\nevent: stream:ready\ndata: {\"v\":1,\"type\":\"stream:ready\",\"data\":{\"lastId\":4}}\n\n") +
		chunk("id: 5\nevent: a:b\ndata: {\"id\":5,\"v\":1,\"type\":\"a:b\",\"data\":{\"due\":0000000000000000042,\"pad\":\"x\"}}\n\n: ping\n\nid: 6\nevent: a:b\n") +
		chunk("data: {\"id\":6,\"v\":1,\"type\":\"a:b\",\"data\":{\"due\":0000000000000000043,\"pad\":\"x\"}}\n\n") +
		"0\r\n\r\n"
	want := []string{
		`kind 1 id 0 data {"lastId":4}`,
		"kind 0 id 5 due 42",
		"kind 0 id 6 due 43",
	}
	for _, n := range []int{1, 7, 64, 1 << 20} {
		t.Run(fmt.Sprint("pieces up to ", n), func(t *testing.T) {
			got, err, _ := pipeStream(t, func(c net.Conn) stream {
				return &sseStream{readBuf: &readBuf{conn: c, buf: make([]byte, 32)}, chunked: true, wantDue: true}
			}, splits([]byte(body), n))
			if !errors.Is(err, io.EOF) {
				t.Errorf("run = %v, want io.EOF at the end of the body", err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("frames (-want +got):\n%s", diff)
			}
		})
	}
}

func wsFrame(op byte, p string) []byte {
	b := []byte{0x80 | op}
	switch {
	case len(p) < 126:
		b = append(b, byte(len(p)))
	default:
		b = append(b, 126)
		b = binary.BigEndian.AppendUint16(b, uint16(len(p)))
	}
	return append(b, p...)
}

func TestWSStreamParsesFramesAndAnswersPings(t *testing.T) {
	var body []byte
	body = append(body, wsFrame(1, `{"v":1,"type":"stream:ready","data":{"lastId":0}}`)...)
	body = append(body, wsFrame(9, "p1")...)
	body = append(body, wsFrame(1, `{"id":1,"v":1,"type":"a:b","data":{"pad":"`+strings.Repeat("x", 300)+`"}}`)...)
	body = append(body, wsFrame(1, `{"op":"subscribed","types":null}`)...)
	body = append(body, wsFrame(1, `{"op":"acked","id":7}`)...)
	body = append(body, wsFrame(8, "\x03\xe9shutdown")...)
	got, err, back := pipeStream(t, func(c net.Conn) stream {
		return &wsStream{readBuf: &readBuf{conn: c, buf: make([]byte, 64)}}
	}, splits(body, 5))
	var ce *closeError
	if !errors.As(err, &ce) || ce.code != 1001 || ce.reason != "shutdown" {
		t.Errorf("run = %v, want a close 1001 shutdown", err)
	}
	want := []string{`kind 1 id 0 data {"lastId":0}`, "kind 0 id 1", "kind 9 id 0 data subscribed", "kind 9 id 7 data acked"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("frames (-want +got):\n%s", diff)
	}
	// The pong: final, opcode 10, masked, the ping's payload.
	if len(back) != 8 || back[0] != 0x8a || back[1] != 0x82 {
		t.Fatalf("pong = % x, want a masked pong of 2 bytes", back)
	}
	if p := []byte{back[6] ^ back[2], back[7] ^ back[3]}; string(p) != "p1" {
		t.Errorf("pong payload = %q, want %q", p, "p1")
	}
}

// small is a run on small numbers against socket.
func small(socket string, c Config) Config {
	c.Socket = socket
	c.Settle = 2 * time.Second
	c.Timeout = wait
	return c
}

func TestFanoutCountsEveryDelivery(t *testing.T) {
	srv := benchtest.New(t, benchtest.Faults{}, ipc.Options{})
	for _, tr := range []string{TransportSSE, TransportWS} {
		t.Run(tr, func(t *testing.T) {
			rep, err := Run(testCtx(t), small(srv.Socket, Config{Transport: tr, Subscribers: 3, Events: 500, Batch: 40, Baseline: true}))
			if err != nil {
				t.Fatal(err)
			}
			want := Check{Subscribers: 3, Expected: 1500, Received: 1500}
			for _, res := range []*Result{rep.Daemon, rep.Baseline} {
				if diff := cmp.Diff(want, res.Check); diff != "" {
					t.Errorf("%s check (-want +got):\n%s", res.Target, diff)
				}
				if res.DeliveriesPerSec <= 0 || res.Batch != 40 || res.Window != 80 {
					t.Errorf("%s: deliveries/s %v, batch %d, window %d; want a rate, batch 40, window 80", res.Target, res.DeliveriesPerSec, res.Batch, res.Window)
				}
			}
			if !rep.OK() || rep.Ratios["deliveriesPerSec"] <= 0 {
				t.Errorf("report OK %v (%s), ratios %v", rep.OK(), rep.Problem(), rep.Ratios)
			}
		})
	}
}

// TestFanoutNoticesAServerThatLoses: a server that drops, repeats or
// reorders one event is caught, once per subscriber, over both transports.
func TestFanoutNoticesAServerThatLoses(t *testing.T) {
	cases := []struct {
		name    string
		faults  benchtest.Faults
		want    Check
		problem string
	}{
		{"drop", benchtest.Faults{Drop: 57}, Check{Lost: 3, Received: 597}, "3 events lost"},
		{"duplicate", benchtest.Faults{Duplicate: 57}, Check{Duplicates: 3, Received: 600}, "3 duplicates"},
		{"swap", benchtest.Faults{Swap: 57}, Check{OutOfOrder: 3, Received: 600}, "3 events out of order"},
		{"drop the last", benchtest.Faults{Drop: 200}, Check{Lost: 3, Received: 597}, "3 events lost"},
	}
	for _, tc := range cases {
		for _, tr := range []string{TransportSSE, TransportWS} {
			t.Run(tc.name+"/"+tr, func(t *testing.T) {
				srv := benchtest.New(t, tc.faults, ipc.Options{})
				rep, err := Run(testCtx(t), small(srv.Socket, Config{Transport: tr, Subscribers: 3, Events: 200, Batch: 25}))
				if err != nil {
					t.Fatal(err)
				}
				want := tc.want
				want.Subscribers, want.Expected = 3, 600
				if diff := cmp.Diff(want, rep.Daemon.Check); diff != "" {
					t.Errorf("check (-want +got):\n%s", diff)
				}
				if rep.OK() || !strings.Contains(rep.Problem(), tc.problem) {
					t.Errorf("Problem() = %q (OK %v), want it to say %q", rep.Problem(), rep.OK(), tc.problem)
				}
			})
		}
	}
}

func TestScenariosOnSmallNumbers(t *testing.T) {
	srv := benchtest.New(t, benchtest.Faults{}, ipc.Options{Settings: ipc.Settings{Caps: wire.Limits{RingSize: 300}}})
	cases := []struct {
		name  string
		c     Config
		check func(*testing.T, *Report)
	}{
		{"latency", Config{Scenario: ScenarioLatency, Subscribers: 2, Rate: 200, Duration: 300 * time.Millisecond, Baseline: true}, func(t *testing.T, r *Report) {
			for _, res := range []*Result{r.Daemon, r.Baseline} {
				if res.Latency == nil || res.Latency.Count != 120 || res.PublisherLag.Count != 60 {
					t.Errorf("%s: latency %+v, lag %+v; want 120 and 60 samples", res.Target, res.Latency, res.PublisherLag)
				}
			}
			if r.Ratios["latencyP99"] <= 0 {
				t.Errorf("ratios = %v, want latencyP99", r.Ratios)
			}
		}},
		{"idle", Config{Scenario: ScenarioIdle, Subscribers: 5, Duration: 50 * time.Millisecond, PID: os.Getpid()}, func(t *testing.T, r *Report) {
			if m := r.Daemon.Memory; m == nil || m.AfterKiB <= 0 || m.PID != os.Getpid() {
				t.Errorf("memory = %+v, want figures for this process", m)
			}
		}},
		{"replay", Config{Scenario: ScenarioReplay, Repeat: 3, Batch: 100}, func(t *testing.T, r *Report) {
			if res := r.Daemon; res.ReplayedEvents != 300 || res.Replay.Count != 3 || res.Check.Received != 900 {
				t.Errorf("replay: %d events, %d times, %d received; want 300, 3, 900", res.ReplayedEvents, res.Replay.Count, res.Check.Received)
			}
		}},
		{"publish", Config{Scenario: ScenarioPublish, Events: 100, Publishers: 2, Transport: TransportWS}, func(t *testing.T, r *Report) {
			if res := r.Daemon; res.RequestsPerSec <= 0 || res.Requests.Count != 100 || res.Check.Received != 100 {
				t.Errorf("publish: %v requests/s, %d timed, %d received; want 100 and 100", res.RequestsPerSec, res.Requests.Count, res.Check.Received)
			}
		}},
		{"ack", Config{Scenario: ScenarioAck, Events: 50}, func(t *testing.T, r *Report) {
			res := r.Daemon
			if res.Acks == nil || res.Acks.Count != 50 || res.Requests.Count != 50 || res.Check.Received != 50 || r.Transport != TransportWS {
				t.Errorf("ack: %+v acks, %+v requests, %d received over %s; want 50 of each over ws", res.Acks, res.Requests, res.Check.Received, r.Transport)
			}
			if r.Ratios["ackP50PerPublishP50"] <= 0 {
				t.Errorf("ratios = %v, want ackP50PerPublishP50", r.Ratios)
			}
		}},
		{"fanout through consumers", Config{Scenario: ScenarioFanout, Subscribers: 3, Events: 300, Batch: 50, Consumers: true, Rounds: 2}, func(t *testing.T, r *Report) {
			if !r.Consumers || r.Daemon.Target != "consumers" || r.Baseline.Target != "plain" || r.Ratios["deliveriesPerSec"] <= 0 {
				t.Errorf("consumers %v, columns %s and %s, ratios %v", r.Consumers, r.Daemon.Target, r.Baseline.Target, r.Ratios)
			}
			for _, res := range append(r.DaemonRounds, r.BaselineRounds...) {
				if res.Check.Received != 900 {
					t.Errorf("%s: %d received, want 900", res.Target, res.Check.Received)
				}
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := Run(testCtx(t), small(srv.Socket, tc.c))
			if err != nil {
				t.Fatal(err)
			}
			if !rep.OK() {
				t.Errorf("check failed: %s", rep.Problem())
			}
			tc.check(t, rep)
			var b strings.Builder
			if err := rep.WriteTable(&b); err != nil || !strings.Contains(b.String(), "check "+rep.Daemon.Target+": ok") {
				t.Errorf("table (%v):\n%s", err, b.String())
			}
		})
	}
}

func TestReportHeaderSaysTheDaemonsDurabilityAndTheLoad(t *testing.T) {
	for _, tc := range []struct {
		durability, fsync, want string
	}{
		{"disk", "always", "durability disk, fsync always"},
		{"memory", "", "durability memory\n"},
		{"", "", "durability not reported"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			srv := benchtest.New(t, benchtest.Faults{}, ipc.Options{Durability: tc.durability, Fsync: tc.fsync})
			rep, err := Run(testCtx(t), small(srv.Socket, Config{Scenario: ScenarioPublish, Events: 20}))
			if err != nil {
				t.Fatal(err)
			}
			if rep.Durability != tc.durability || rep.Fsync != tc.fsync {
				t.Errorf("report durability %q fsync %q, want %q %q", rep.Durability, rep.Fsync, tc.durability, tc.fsync)
			}
			var b strings.Builder
			if err := rep.WriteTable(&b); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), tc.want) || !strings.Contains(b.String(), "load average ") {
				t.Errorf("table does not say %q and the load average:\n%s", tc.want, b.String())
			}
		})
	}
}

func TestIdleNeverReportsANegativeFigure(t *testing.T) {
	if v, note := perStream(10_000, 9_000, 100); v != 0 || !strings.Contains(note, "RSS fell by 1000 KiB") {
		t.Errorf("perStream(10000, 9000, 100) = %v, %q; want no figure and a note", v, note)
	}
	if v, note := perStream(10_000, 10_500, 100); v != 5 || note != "" {
		t.Errorf("perStream(10000, 10500, 100) = %v, %q; want 5 and no note", v, note)
	}
	r := &Report{Scenario: ScenarioIdle, Daemon: &Result{Target: "daemon", Memory: &Memory{BeforeKiB: 10_000, AfterKiB: 9_000}}}
	r.Daemon.Memory.PerStreamKiB, r.Daemon.Memory.Note = perStream(10_000, 9_000, 100)
	var b strings.Builder
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "RSS per stream") || !strings.Contains(b.String(), "note daemon: RSS fell") {
		t.Errorf("table with a fallen RSS:\n%s", b.String())
	}
}

func TestRunRefusesBadConfigs(t *testing.T) {
	for _, c := range []Config{
		{Scenario: "nope"},
		{Transport: "carrier-pigeon"},
		{Subscribers: -1},
		{Batch: 1001},
		{MaxQueued: 5},
		{Scenario: ScenarioIdle, Baseline: true},
		{Session: "no/slash"},
		{Size: 8},
	} {
		_, err := Run(context.Background(), c)
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("Run(%+v) = %v, want a *ConfigError", c, err)
		}
	}
}

func TestRunSaysWhenTheDaemonIsUnreachable(t *testing.T) {
	_, err := Run(context.Background(), Config{Socket: filepath.Join(t.TempDir(), "none.sock")})
	var ue *UnreachableError
	if !errors.As(err, &ue) {
		t.Fatalf("Run = %v, want an *UnreachableError", err)
	}
}

func TestLatencyPublishesOverAPoolByDefault(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want int
	}{
		{Config{Scenario: ScenarioLatency}, DefaultLatencyPublishers},
		{Config{Scenario: ScenarioLatency, Publishers: 3}, 3},
		{Config{Scenario: ScenarioPublish}, 1},
		{Config{Scenario: ScenarioPublish, Publishers: 32}, 32},
	} {
		c, err := tc.c.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		if c.Publishers != tc.want {
			t.Errorf("%s with --publishers %d: %d connections, want %d", tc.c.Scenario, tc.c.Publishers, c.Publishers, tc.want)
		}
	}
	doc, err := os.ReadFile("performance.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("`--publishers` (%d)", DefaultLatencyPublishers); !strings.Contains(string(doc), want) {
		t.Errorf("performance.md does not give the latency pool's default as %s", want)
	}
}

// gatedPublisher is a connection whose every publish waits until the test
// lets one reply through, or fails with err.
type gatedPublisher struct {
	started  chan<- int64    // the due time of each publish, as it begins
	release  <-chan struct{} // one reply per receive
	inFlight *atomicMax
	err      error
}

// atomicMax counts publishes in flight and keeps the most at once.
type atomicMax struct {
	mu       sync.Mutex
	cur, top int
}

func (m *atomicMax) add(d int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cur += d
	m.top = max(m.top, m.cur)
}

func (m *atomicMax) max() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.top
}

func (p *gatedPublisher) batch(context.Context, int) (uint64, error) {
	return 0, errors.New("not used")
}

func (p *gatedPublisher) one(ctx context.Context, due int64) (uint64, error) {
	p.inFlight.add(1)
	defer p.inFlight.add(-1)
	p.started <- due
	if p.err != nil {
		return 0, p.err
	}
	select {
	case <-p.release:
		return 0, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (p *gatedPublisher) Close() error { return nil }

func recvBounded[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("no %s within %v", what, wait)
	}
	var zero T
	return zero
}

// TestOpenLoopSendsDueEventsWithoutWaitingForReplies: with replies held,
// the pool has every connection busy at once and never more; an event that
// finds them all busy waits for a reply, and that wait is its publisher
// lag; every event is sent once, carrying its own due time.
func TestOpenLoopSendsDueEventsWithoutWaitingForReplies(t *testing.T) {
	const pool, n = 3, 10
	started := make(chan int64, n)
	release := make(chan struct{})
	inFlight := &atomicMax{}
	pubs := make([]publisher, pool)
	for i := range pubs {
		pubs[i] = &gatedPublisher{started: started, release: release, inFlight: inFlight}
	}
	interval := 100 * time.Microsecond
	start := time.Now()
	type result struct {
		lags []int64
		err  error
	}
	done := make(chan result, 1)
	go func() {
		lags, err := openLoop(testCtx(t), pubs, n, start, interval)
		done <- result{lags, err}
	}()
	seen := map[int64]bool{}
	for range pool {
		seen[recvBounded(t, started, "publish")] = true
	}
	// Every connection is waiting for its reply: the fourth event waits
	// for one of them, at least from now on.
	releasedAt := time.Now()
	for range n - pool {
		release <- struct{}{}
		seen[recvBounded(t, started, "publish after a reply")] = true
	}
	for range pool {
		release <- struct{}{}
	}
	res := recvBounded(t, done, "end of openLoop")
	if res.err != nil {
		t.Fatal(res.err)
	}
	for i := range n {
		if due := start.Add(time.Duration(i) * interval).UnixNano(); !seen[due] {
			t.Errorf("event %d (due %d) was not sent; sent %v", i, due, seen)
		}
	}
	if len(seen) != n {
		t.Errorf("%d distinct due times sent, want %d", len(seen), n)
	}
	if m := inFlight.max(); m != pool {
		t.Errorf("at most %d publishes in flight at once, want the pool's %d", m, pool)
	}
	if len(res.lags) != n {
		t.Fatalf("%d lags, want %d", len(res.lags), n)
	}
	for i, lag := range res.lags {
		if lag < 0 {
			t.Errorf("event %d sent %v before it was due", i, time.Duration(-lag))
		}
	}
	for i := pool; i < n; i++ {
		if least := releasedAt.Sub(start.Add(time.Duration(i) * interval)); res.lags[i] < int64(least) {
			t.Errorf("event %d: lag %v, but it waited for a free connection at least %v", i, time.Duration(res.lags[i]), least)
		}
	}
}

func TestOpenLoopStopsEveryConnectionAtTheFirstError(t *testing.T) {
	const pool = 4
	started := make(chan int64, 100)
	inFlight := &atomicMax{}
	refused := errors.New("refused")
	pubs := make([]publisher, pool)
	for i := range pubs {
		p := &gatedPublisher{started: started, release: make(chan struct{}), inFlight: inFlight}
		if i == 2 {
			p.err = refused
		}
		pubs[i] = p
	}
	_, err := openLoop(testCtx(t), pubs, 100, time.Now(), time.Microsecond)
	if !errors.Is(err, refused) {
		t.Errorf("openLoop = %v, want the connection's error", err)
	}
}

// TestLatencyKeepsSendingWhileTheDaemonIsSlowToAnswer: a server that holds
// every publish request (as a daemon waiting for fsync does) has several
// of the pool's requests in hand at once, never more than the pool, and
// every subscriber still gets every event once, in id order; with one
// connection it never has more than one.
func TestLatencyKeepsSendingWhileTheDaemonIsSlowToAnswer(t *testing.T) {
	for _, tc := range []struct {
		publishers, atLeast, atMost int
		header                      string
	}{
		{0, 2, DefaultLatencyPublishers, fmt.Sprintf("over %d publisher connections", DefaultLatencyPublishers)},
		{1, 1, 1, "over 1 publisher connection\n"},
	} {
		t.Run(fmt.Sprint("publishers=", tc.publishers), func(t *testing.T) {
			// Each reply takes four intervals: one connection cannot keep
			// the rate; a pool can.
			srv := benchtest.New(t, benchtest.Faults{SlowPublish: 20 * time.Millisecond}, ipc.Options{})
			rep, err := Run(testCtx(t), small(srv.Socket, Config{
				Scenario: ScenarioLatency, Subscribers: 2, Rate: 200, Duration: 200 * time.Millisecond, Publishers: tc.publishers,
			}))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(Check{Subscribers: 2, Expected: 80, Received: 80}, rep.Daemon.Check); diff != "" {
				t.Errorf("check (-want +got):\n%s", diff)
			}
			if m := srv.MaxConcurrentPublishes(); m < tc.atLeast || m > tc.atMost {
				t.Errorf("the server had at most %d publishes in hand at once, want %d to %d", m, tc.atLeast, tc.atMost)
			}
			want := max(tc.publishers, 1)
			if tc.publishers == 0 {
				want = DefaultLatencyPublishers
			}
			if rep.Params.Publishers != want || rep.Daemon.Publishers != want || rep.Daemon.PublisherLag.Count != 40 {
				t.Errorf("params %d publishers, result %d, %d lags; want %d, %d, 40", rep.Params.Publishers, rep.Daemon.Publishers, rep.Daemon.PublisherLag.Count, want, want)
			}
			var b strings.Builder
			if err := rep.WriteTable(&b); err != nil || !strings.Contains(b.String(), tc.header) {
				t.Errorf("table does not say %q (%v):\n%s", tc.header, err, b.String())
			}
		})
	}
}
