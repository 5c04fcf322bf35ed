package journal_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/daemon/journal"
)

// The benchmarks of durability.md. Each target compares a journaled
// hub with an in-memory one:
//
//	go test -run '^$' -bench . -benchtime 3x ./journal

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newHub returns a hub kept in memory (mode "memory" or "") or journaled
// in dir with the sync mode, and a function that closes both.
func newHub(tb testing.TB, dir, mode string, l bus.Limits) (*hub.Hub, func()) {
	tb.Helper()
	opts := hub.Options{Limits: l, AutoCreate: true, Logger: quiet}
	var j *journal.Journal
	if mode != "" && mode != "memory" {
		var err error
		j, err = journal.Open(journal.Options{Dir: dir, Sync: mode, Logger: quiet})
		if err != nil {
			tb.Fatal(err)
		}
		opts.Journal = j
	}
	h, err := hub.New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	return h, func() {
		h.Close()
		if j != nil {
			if err := j.Close(); err != nil {
				tb.Error(err)
			}
		}
	}
}

// payload makes n events of about 300 bytes of data.
func payload(n int) []bus.Event {
	evs := make([]bus.Event, n)
	pad := strings.Repeat("p", 260)
	for i := range evs {
		evs[i] = bus.Event{Type: bustest.Type("bench:event"), Data: json.RawMessage(fmt.Sprintf(`{"n":%d,"pad":%q}`, i, pad))}
	}
	return evs
}

// BenchmarkFanout publishes one event at a time to a session with 64
// subscribers that drain their queues, in rounds of 1024 events that fit
// every queue; an op is one event delivered to all 64. Target: disk with fsync "interval" at 0.8× memory or better.
func BenchmarkFanout(b *testing.B) {
	for _, mode := range []string{"memory", journal.SyncInterval, journal.SyncAlways} {
		b.Run(mode, func(b *testing.B) {
			h, closeHub := newHub(b, b.TempDir(), mode, bus.Limits{MaxQueued: 2048})
			defer closeHub()
			s, err := h.Create(bustest.SessionID("fan"), 0)
			if err != nil {
				b.Fatal(err)
			}
			const subs = 64
			const round = 1024 // events per round, within every queue's limits
			var delivered, target atomic.Int64
			reached := make(chan struct{}, 1)
			var wg sync.WaitGroup
			for range subs {
				sub, err := s.Bus.Subscribe(nil, bus.SubscribeOptions{MaxQueued: 2048})
				if err != nil {
					b.Fatal(err)
				}
				wg.Go(func() {
					var buf []*bus.Frame
					for range sub.Ready() {
						var ended bool
						buf, ended = sub.Take(buf[:0])
						var n int64
						for _, f := range buf {
							if !f.Reserved() {
								n++
							}
						}
						if n > 0 && delivered.Add(n) >= target.Load() {
							select {
							case reached <- struct{}{}:
							default:
							}
						}
						if ended {
							return
						}
					}
				})
			}
			ev := payload(1)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += round {
				n := min(round, b.N-i)
				target.Store(int64(i+n) * subs)
				for range n {
					if _, _, err := h.Publish(bustest.SessionID("fan"), ev); err != nil {
						b.Fatal(err)
					}
				}
				for delivered.Load() < target.Load() {
					<-reached
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)*subs/b.Elapsed().Seconds(), "deliveries/s")
			s.Bus.Close()
			wg.Wait()
		})
	}
}

// BenchmarkBatchPublish has 4 publishers each publish batches of 1000
// events of about 300 bytes to a session of its own; an op is one batch.
// Target: disk with fsync "always" at 0.5× memory or better.
func BenchmarkBatchPublish(b *testing.B) {
	for _, mode := range []string{"memory", journal.SyncAlways, journal.SyncInterval} {
		b.Run(mode, func(b *testing.B) {
			h, closeHub := newHub(b, b.TempDir(), mode, bus.Limits{})
			defer closeHub()
			const publishers = 4
			batch := payload(1000)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.SetBytes(int64(len(batch)) * 300)
			b.ResetTimer()
			for p := range publishers {
				wg.Go(func() {
					id := bustest.SessionID(fmt.Sprintf("pub-%d", p))
					for next.Add(1) <= int64(b.N) {
						if _, _, err := h.Publish(id, batch); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkStartup opens a journal holding 1,000,000 events in 100
// sessions and restores a hub from it; an op is one start. Target: 2 s.
func BenchmarkStartup(b *testing.B) {
	const sessions, perSession = 100, 10_000
	dir := b.TempDir()
	l := bus.Limits{RingSize: perSession}
	h, closeHub := newHub(b, dir, journal.SyncNever, l)
	batch := payload(1000)
	for s := range sessions {
		for range perSession / len(batch) {
			if _, _, err := h.Publish(bustest.SessionID(fmt.Sprintf("s-%03d", s)), batch); err != nil {
				b.Fatal(err)
			}
		}
	}
	closeHub()
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		h, closeHub := newHub(b, dir, journal.SyncAlways, l)
		b.ReportMetric(time.Since(start).Seconds(), "s/start")
		var events int
		for _, s := range h.Sessions() {
			events += s.Bus.Stats().RingLen
		}
		if events != sessions*perSession {
			b.Fatalf("restored %d events, want %d", events, sessions*perSession)
		}
		b.StopTimer()
		closeHub()
		b.StartTimer()
	}
}

// BenchmarkPublishOne publishes one event at a time with no subscriber: the
// journal's cost per publish (a session and the global bus) without
// fan-out to hide it.
func BenchmarkPublishOne(b *testing.B) {
	for _, mode := range []string{"", journal.SyncInterval, journal.SyncNever} {
		b.Run("mode="+mode, func(b *testing.B) {
			h, closeHub := newHub(b, b.TempDir(), mode, bus.Limits{})
			defer closeHub()
			ev := payload(1)
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := h.Publish(bustest.SessionID("x"), ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGroupCommit has 32 publishers post one event at a time to one
// session with fsync "always", as many clients of one app would; an op is
// one publish, returned once durable. Every sync is shared by the
// publishers waiting at that moment, so the rate is many times one
// publisher's.
func BenchmarkGroupCommit(b *testing.B) {
	for _, mode := range []string{"memory", journal.SyncAlways} {
		b.Run(mode, func(b *testing.B) {
			h, closeHub := newHub(b, b.TempDir(), mode, bus.Limits{})
			defer closeHub()
			ev := payload(1)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for range 32 {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						if _, _, err := h.Publish(bustest.SessionID("one"), ev); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "publishes/s")
		})
	}
}
