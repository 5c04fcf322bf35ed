package upstream_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/daemon/daemontest"
	"github.com/localbus/localbus/daemon/upstream"
	"github.com/localbus/localbus/daemon/upstream/natstest"
	"github.com/localbus/localbus/ipc/wire/grammar"
)

// BenchmarkExportImport measures the bridge between two in-process nodes
// with journals (fsync "always") and a real nats-server; node b mirrors
// node a's exported session to 64 readers. Live, a publishes batches of
// 100 events alternately to the exported session and to one that is not:
// the publish latency per batch of each is reported, so their difference
// is what exporting adds to a publish. Then NATS is killed, 6000 events
// pile up, NATS comes back, and the catch-up is reported in events/s
// exported (acknowledged by JetStream), imported (in the mirror) and
// delivered to every reader:
//
//	go test -run - -bench ExportImport -benchtime 200x ./daemon/upstream/
func BenchmarkExportImport(b *testing.B) {
	const batch, readers = 100, 64
	srv := natstest.Start(b)
	a := startNode(b, upstream.Config{URLs: []string{srv.URL()}, Node: "a", Export: []string{"bench"}})
	m := startNode(b, upstream.Config{URLs: []string{srv.URL()}, Node: "b", Import: []string{"a/*"}})

	evs := make([]bus.Event, batch)
	for i := range evs {
		evs[i] = bus.Event{Type: bustest.Type("bench:e"), Data: json.RawMessage(`{"pad":"0123456789abcdef0123456789abcdef"}`)}
	}
	publish := func(session string) time.Duration {
		t0 := time.Now()
		if _, _, err := a.h.Publish(bustest.SessionID(session), evs); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	publish("bench")
	waitFor(b, "the mirror", func() bool { _, ok := m.h.Session("a.bench"); return ok })
	s, _ := m.h.Session("a.bench")
	var got [readers]atomic.Uint64
	var wg sync.WaitGroup
	for i := range readers {
		sub, err := s.Bus.Subscribe(b.Context(), bus.SubscribeOptions{Cursor: new(uint64), MaxQueued: grammar.MaxMaxQueued})
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			var frames []*bus.Frame
			for range sub.Ready() {
				var ended bool
				frames, ended = sub.Take(frames[:0])
				for _, f := range frames {
					if !f.Reserved() {
						got[i].Store(f.ID)
					}
				}
				if ended {
					return
				}
			}
		})
		b.Cleanup(sub.Close)
	}

	// Live: publishes alternate between the exported session and the
	// other, so both see the same load.
	var exported, plain time.Duration
	b.ResetTimer()
	for range b.N {
		exported += publish("bench")
		plain += publish("plain")
	}
	b.StopTimer()
	live := uint64(b.N+1) * batch
	waitFor(b, "the live export", func() bool { return lastID(m.h, "a.bench") >= live })

	// Catch-up: what piled up while NATS was down goes at the bridge's
	// own pace, from the ring to JetStream to the mirror and its readers.
	srv.Kill()
	const backlog = 60
	for range backlog {
		publish("bench")
	}
	total := live + backlog*batch
	srv.Restart()
	// From the reconnection on: the server's own start is not the bridge's.
	waitFor(b, "the reconnection", func() bool { return a.br.Status().Connected && m.br.Status().Connected })
	start := time.Now()
	waitFor(b, "the export", func() bool { return a.br.Status().Sessions[0].ExportedID >= total })
	tExport := time.Since(start)
	waitFor(b, "the import", func() bool { return lastID(m.h, "a.bench") >= total })
	tImport := time.Since(start)
	waitFor(b, "every reader", func() bool {
		for i := range got {
			if got[i].Load() < total {
				return false
			}
		}
		return true
	})
	tReaders := time.Since(start)
	n := float64(backlog * batch)
	b.ReportMetric(n/tExport.Seconds(), "catchup-exported-events/s")
	b.ReportMetric(n/tImport.Seconds(), "catchup-imported-events/s")
	b.ReportMetric(n/tReaders.Seconds(), "catchup-delivered-events/s/reader")
	b.ReportMetric(float64(exported.Microseconds())/float64(b.N), "µs/exported-batch")
	b.ReportMetric(float64(plain.Microseconds())/float64(b.N), "µs/plain-batch")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkBurstMirror measures a burst end to end, as SPEC §12 promises a
// mirror keeps up: two daemons, the built binary (without -race) as two
// processes with their journals (fsync "always", default rings), node a
// exporting and node b importing, and a real nats-server. Each round:
//
//   - burst: a client publishes 20,000 events of 256-byte payloads in
//     batches of 1,000 (one POST each) to an exported session of a, and
//     the time runs until b's mirror holds them all;
//   - alone: what nats-server alone acknowledges for async publishes of
//     the same payloads with a window of 256;
//   - drain: with NATS stopped, 100,000 events are published to another
//     session (a backlog of twelve rings); from the moment a is connected
//     again, the time runs until b's mirror holds them all.
//
// It reports the rates (published-events/s: the client's publishes alone,
// which the burst's rate cannot exceed), the ratio of burst to alone, and
// the processor time per event of each process (a, b, nats-server, and this process:
// the publishing client, or the client alone):
//
//	go test -run - -bench BurstMirror -benchtime 3x ./daemon/upstream/
func BenchmarkBurstMirror(b *testing.B) {
	const total, drainTotal, batch = 20000, 100000, 1000
	srv := natstest.Start(b)
	payload := `{"pad":"` + strings.Repeat("x", 256-10) + `"}`
	var body strings.Builder
	body.WriteByte('[')
	for i := range batch {
		if i > 0 {
			body.WriteByte(',')
		}
		body.WriteString(`{"type":"bench:e","data":` + payload + `}`)
	}
	body.WriteByte(']')

	nc, err := nats.Connect(srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(256))
	if err != nil {
		b.Fatal(err)
	}
	type cpu struct{ a, m, nats, self time.Duration }
	sample := func(a, m *daemontest.Daemon) cpu {
		return cpu{natstest.ProcessCPU(a.Cmd.Process.Pid), natstest.ProcessCPU(m.Cmd.Process.Pid), srv.CPU(), processCPU()}
	}
	if _, err := js.CreateStream(b.Context(), jetstream.StreamConfig{Name: "BASE", Subjects: []string{"base.>"}, Storage: jetstream.FileStorage}); err != nil {
		b.Fatal(err)
	}
	var published, burst, alone, drain time.Duration
	var burstCPU, aloneCPU, drainCPU cpu
	add := func(sum *cpu, from, to cpu) {
		sum.a += to.a - from.a
		sum.m += to.m - from.m
		sum.nats += to.nats - from.nats
		sum.self += to.self - from.self
	}
	publish := func(d *daemontest.Daemon, session string, n int) {
		for k := 0; k < n; k += batch {
			if code, out := d.Do(b, http.MethodPost, "/api/v1/sessions/"+session+"/events", body.String()); code != http.StatusOK {
				b.Fatalf("publish: %d %s", code, out)
			}
		}
	}
	mirrorAt := func(m *daemontest.Daemon, session string, n int) func() bool {
		return func() bool {
			code, out := m.Do(b, http.MethodGet, "/api/v1/sessions/a."+session, "")
			var st struct{ LastID int }
			return code == http.StatusOK && json.Unmarshal(out, &st) == nil && st.LastID >= n
		}
	}
	connected := func(d *daemontest.Daemon) bool {
		_, out := d.Do(b, http.MethodGet, "/api/v1/upstream", "")
		var st upstream.Status
		return json.Unmarshal(out, &st) == nil && st.Connected
	}
	for i := range b.N {
		// A stream of its own for each round, deleted after it: an
		// importer of a new daemon reads the stream from its start.
		stream := fmt.Sprintf("LOCALBUS%d", i)
		table := fmt.Sprintf("[upstream]\nurl = %q\nstream = %q\n", srv.URL(), stream)
		a := daemontest.Start(b, daemontest.Options{Plain: true, Durable: true, Config: table + "node = \"a\"\nexport = [\"s*\"]\n"})
		m := daemontest.Start(b, daemontest.Options{Plain: true, Durable: true, Config: table + "node = \"b\"\nimport = [\"a/*\"]\n"})
		bustest.Eventually(b, time.Minute, "both connected", func() bool { return connected(a) && connected(m) })

		session := fmt.Sprintf("s%d", i)
		start, c0 := time.Now(), sample(a, m)
		publish(a, session, total)
		published += time.Since(start)
		bustest.Eventually(b, 5*time.Minute, "the mirror", mirrorAt(m, session, total))
		burst += time.Since(start)
		add(&burstCPU, c0, sample(a, m))

		start, c0 = time.Now(), sample(a, m)
		for k := range total {
			if _, err := js.PublishAsync(fmt.Sprintf("base.%d", i), []byte(payload), jetstream.WithMsgID(fmt.Sprint(i, "/", k))); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(time.Minute):
			b.Fatal("nats-server did not acknowledge the async publishes in a minute")
		}
		alone += time.Since(start)
		add(&aloneCPU, c0, sample(a, m))

		srv.Stop()
		session = fmt.Sprintf("d%d", i)
		publish(a, "s"+session, drainTotal)
		srv.Restart()
		bustest.Eventually(b, time.Minute, "a connected again", func() bool { return connected(a) })
		start, c0 = time.Now(), sample(a, m)
		bustest.Eventually(b, 10*time.Minute, "the drained mirror", mirrorAt(m, "s"+session, drainTotal))
		drain += time.Since(start)
		add(&drainCPU, c0, sample(a, m))

		_, out := a.Do(b, http.MethodGet, "/api/v1/upstream", "")
		var st upstream.Status
		if json.Unmarshal(out, &st) != nil || st.Lost != 0 {
			b.Fatalf("a lost events: %s", out)
		}
		m.Stop(b)
		a.Stop(b)
		if err := js.DeleteStream(b.Context(), stream); err != nil {
			b.Fatal(err)
		}
	}
	perEvent := func(d time.Duration, n int) float64 { return float64(d.Microseconds()) / float64(n*b.N) }
	b.ReportMetric(float64(total*b.N)/published.Seconds(), "published-events/s")
	b.ReportMetric(float64(total*b.N)/burst.Seconds(), "mirrored-events/s")
	b.ReportMetric(float64(total*b.N)/alone.Seconds(), "nats-alone-events/s")
	b.ReportMetric(alone.Seconds()/burst.Seconds(), "mirrored/alone")
	b.ReportMetric(float64(drainTotal*b.N)/drain.Seconds(), "drained-events/s")
	b.ReportMetric(perEvent(burstCPU.a, total), "a-cpu-µs/event")
	b.ReportMetric(perEvent(burstCPU.m, total), "b-cpu-µs/event")
	b.ReportMetric(perEvent(burstCPU.nats, total), "nats-cpu-µs/event")
	b.ReportMetric(perEvent(burstCPU.self, total), "client-cpu-µs/event")
	b.ReportMetric(perEvent(aloneCPU.nats, total), "alone-nats-cpu-µs/event")
	b.ReportMetric(perEvent(aloneCPU.self, total), "alone-client-cpu-µs/event")
	b.ReportMetric(perEvent(drainCPU.a, drainTotal), "drain-a-cpu-µs/event")
	b.ReportMetric(perEvent(drainCPU.m, drainTotal), "drain-b-cpu-µs/event")
	b.ReportMetric(perEvent(drainCPU.nats, drainTotal), "drain-nats-cpu-µs/event")
	b.ReportMetric(0, "ns/op")
}

// processCPU is the processor time this process has used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
