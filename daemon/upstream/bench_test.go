package upstream_test

import (
	"encoding/json"
	"fmt"
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
// mirror keeps up: node a (journal with fsync "always", rings of 50,000)
// publishes 20,000 events of 256-byte payloads in batches of 1,000 to an
// exported session, and the time runs until node b's mirror holds them
// all. Beside it, in the same run, what nats-server alone acknowledges
// for async publishes of the same payloads with a window of 256:
//
//	go test -run - -bench BurstMirror -benchtime 3x ./daemon/upstream/
func BenchmarkBurstMirror(b *testing.B) {
	const total, batch = 20000, 1000
	srv := natstest.Start(b)
	payload := `{"pad":"` + strings.Repeat("x", 256-10) + `"}`
	evs := make([]bus.Event, batch)
	for i := range evs {
		evs[i] = bus.Event{Type: bustest.Type("bench:e"), Data: json.RawMessage(payload)}
	}

	nc, err := nats.Connect(srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(256))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := js.CreateStream(b.Context(), jetstream.StreamConfig{Name: "BASE", Subjects: []string{"base.>"}, Storage: jetstream.FileStorage}); err != nil {
		b.Fatal(err)
	}

	var burst, exported, alone time.Duration
	var selfCPU, natsCPU, aloneSelf, aloneNATS time.Duration
	for i := range b.N {
		a := startNodeRing(b, upstream.Config{URLs: []string{srv.URL()}, Node: "a", Stream: "LOCALBUS", Export: []string{"s*"}}, 50000)
		m := startNodeRing(b, upstream.Config{URLs: []string{srv.URL()}, Node: "b", Stream: "LOCALBUS", Import: []string{"a/*"}}, 50000)
		session := fmt.Sprintf("s%d", i)
		sid := bustest.SessionID(session)
		start, cpu0, ncpu0 := time.Now(), processCPU(), srv.CPU()
		for k := 0; k < total; k += batch {
			if _, _, err := a.h.Publish(sid, evs); err != nil {
				b.Fatal(err)
			}
		}
		waitFor(b, "the export", func() bool {
			st := a.br.Status()
			return len(st.Sessions) == 1 && st.Sessions[0].ExportedID >= total
		})
		exported += time.Since(start)
		waitFor(b, "the mirror", func() bool { return lastID(m.h, "a."+session) >= total })
		burst += time.Since(start)
		selfCPU += processCPU() - cpu0
		natsCPU += srv.CPU() - ncpu0
		m.stop()
		a.stop()

		start, cpu0, ncpu0 = time.Now(), processCPU(), srv.CPU()
		for k := range total {
			if _, err := js.PublishAsync(fmt.Sprintf("base.%d", i), []byte(payload), jetstream.WithMsgID(fmt.Sprint(i, "/", k))); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(30 * time.Second):
			b.Fatal("nats-server did not acknowledge the async publishes in 30 s")
		}
		alone += time.Since(start)
		aloneSelf += processCPU() - cpu0
		aloneNATS += srv.CPU() - ncpu0
	}
	n := float64(total * b.N)
	perEvent := func(d time.Duration) float64 { return float64(d.Microseconds()) / n }
	// Processor time per event: both daemons (one process here) and
	// nats-server during the burst, and the publisher and nats-server
	// alone.
	b.ReportMetric(perEvent(selfCPU), "daemons-cpu-µs/event")
	b.ReportMetric(perEvent(natsCPU), "nats-cpu-µs/event")
	b.ReportMetric(perEvent(aloneSelf), "alone-client-cpu-µs/event")
	b.ReportMetric(perEvent(aloneNATS), "alone-nats-cpu-µs/event")
	b.ReportMetric(n/burst.Seconds(), "mirrored-events/s")
	b.ReportMetric(n/exported.Seconds(), "exported-events/s")
	b.ReportMetric(n/alone.Seconds(), "nats-alone-events/s")
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
