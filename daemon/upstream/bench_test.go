package upstream_test

import (
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/localbus/localbus/bus"
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
		evs[i] = bus.Event{Type: "bench:e", Data: json.RawMessage(`{"pad":"0123456789abcdef0123456789abcdef"}`)}
	}
	publish := func(session string) time.Duration {
		t0 := time.Now()
		if _, _, err := a.h.Publish(session, evs); err != nil {
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
