package ipc_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/ipc"
	"github.com/localbus/localbus/ipc/ipctest"
)

// The benchmarks of the stream writers publish on the hub directly and
// read the streams with minimal raw clients, so that what they measure is
// the bus and the writer: allocations per delivered frame, and time per
// delivered frame on this machine (readers included). Run them with
// scripts/bench.

// counter is a raw stream client that counts the events it receives.
type counter struct {
	conn     net.Conn
	n        atomic.Int64
	progress chan struct{} // shared by the counters of a benchmark, capacity 1
	done     chan struct{}
}

// add counts n events and wakes the publisher.
func (c *counter) add(n int64) {
	if n == 0 {
		return
	}
	c.n.Add(n)
	select {
	case c.progress <- struct{}{}:
	default:
	}
}

// dialCounter opens a stream at path with a raw request and counts its
// events: SSE blocks with an id: line, or WebSocket text frames that
// start with {"id":.
func dialCounter(b *testing.B, srv *ipctest.Server, path string, ws bool, progress chan struct{}) *counter {
	b.Helper()
	conn, err := srv.Dial(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	req := "GET " + path + " HTTP/1.1\r\nHost: localbus\r\n"
	if ws {
		req += "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		b.Fatal(err)
	}
	c := &counter{conn: conn, progress: progress, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		if ws {
			c.countWS()
		} else {
			c.countSSE()
		}
	}()
	return c
}

// countSSE counts "\nid: " across reads; the response head and chunk
// framing never contain it.
func (c *counter) countSSE() {
	pat := []byte("\nid: ")
	buf := make([]byte, 64<<10)
	keep := 0
	for {
		n, err := c.conn.Read(buf[keep:])
		if n > 0 {
			data := buf[:keep+n]
			c.add(int64(bytes.Count(data, pat)))
			keep = copy(buf, data[max(0, len(data)-(len(pat)-1)):])
		}
		if err != nil {
			return
		}
	}
}

// countWS skips the response head, then walks the frames.
func (c *counter) countWS() {
	buf := make([]byte, 256<<10)
	r, w := 0, 0
	fill := func() bool {
		if r > 0 {
			w = copy(buf, buf[r:w])
			r = 0
		}
		n, err := c.conn.Read(buf[w:])
		w += n
		return err == nil || n > 0
	}
	for {
		if i := bytes.Index(buf[r:w], []byte("\r\n\r\n")); i >= 0 {
			r += i + 4
			break
		}
		if !fill() {
			return
		}
	}
	for {
		var seen int64
		for w-r >= 2 {
			h, n := 2, int(buf[r+1]&0x7f)
			if n == 126 {
				h = 4
			}
			if w-r >= h {
				if h == 4 {
					n = int(binary.BigEndian.Uint16(buf[r+2:]))
				}
				if w-r >= h+n {
					if bytes.HasPrefix(buf[r+h:r+h+n], []byte(`{"id":`)) {
						seen++
					}
					r += h + n
					continue
				}
			}
			break
		}
		c.add(seen)
		if !fill() {
			return
		}
	}
}

// wait waits for any counter's progress; a stream that ended fails the
// benchmark.
func (c *counter) wait(b *testing.B) {
	select {
	case <-c.progress:
	case <-c.done:
		b.Fatalf("a stream ended after %d events", c.n.Load())
	}
}

func (c *counter) close() {
	c.conn.Close()
	<-c.done
}

// benchmarkFanout publishes b.N events of 256 bytes of data in batches of
// 100 to subs subscribers and waits until each has them all.
func benchmarkFanout(b *testing.B, subs int, ws bool) {
	srv := ipctest.New(b, ipctest.Options{Hub: hub.Options{AutoCreate: true, Limits: bus.Limits{MaxSubscribers: subs}}})
	s, err := srv.Hub.Create(bustest.SessionID("b"), 0)
	if err != nil {
		b.Fatal(err)
	}
	path := "/api/v1/sessions/b/events?maxQueued=2048"
	if ws {
		path = "/api/v1/sessions/b/ws?maxQueued=2048"
	}
	cs := make([]*counter, subs)
	progress := make(chan struct{}, 1)
	for i := range cs {
		cs[i] = dialCounter(b, srv, path, ws, progress)
		defer cs[i].close()
	}
	bustest.Eventually(b, ipctest.Wait, "the subscribers", func() bool { return s.Bus.Stats().Subscribers == subs })
	batch := make([]bus.Event, 100)
	for i := range batch {
		batch[i] = bus.Event{Type: bustest.Type("bench:event"), Data: []byte(`{"pad":"` + strings.Repeat("x", 246) + `"}`)}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		n := min(len(batch), b.N-sent)
		// Stay within the subscribers' queues: at most 1500 events ahead.
		for _, c := range cs {
			for int64(sent+n)-c.n.Load() > 1500 {
				c.wait(b)
			}
		}
		if _, _, err := srv.Hub.Publish(bustest.SessionID("b"), batch[:n]); err != nil {
			b.Fatal(err)
		}
		sent += n
	}
	for _, c := range cs {
		for c.n.Load() < int64(b.N) {
			c.wait(b)
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	frames := float64(b.N) * float64(subs)
	b.ReportMetric(b.Elapsed().Seconds()*1e9/frames, "ns/frame")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/frames, "allocs/frame")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/frames, "B/frame")
	if st := s.Bus.Stats(); st.EvictedQueue+st.EvictedBytes != 0 {
		b.Fatalf("subscribers were evicted: %+v", st)
	}
}

// BenchmarkSSEWriter measures the SSE stream writer: allocations and time
// per delivered frame (allocs/frame includes the publish's own, spread
// over the subscribers).
func BenchmarkSSEWriter(b *testing.B) {
	for _, subs := range []int{1, 64} {
		b.Run(fmt.Sprintf("subscribers=%d", subs), func(b *testing.B) { benchmarkFanout(b, subs, false) })
	}
}

// BenchmarkWSWriter is BenchmarkSSEWriter over WebSocket.
func BenchmarkWSWriter(b *testing.B) {
	for _, subs := range []int{1, 64} {
		b.Run(fmt.Sprintf("subscribers=%d", subs), func(b *testing.B) { benchmarkFanout(b, subs, true) })
	}
}

// BenchmarkPublishHandler measures the publish route in the handler, with
// no network and no subscriber: one event, a batch of 100, and NDJSON.
func BenchmarkPublishHandler(b *testing.B) {
	one := `{"type":"bench:event","data":{"pad":"` + strings.Repeat("x", 246) + `"}}`
	cases := []struct {
		name, body, ct string
		events         int
	}{
		{"one", one, "application/json", 1},
		{"batch=100", "[" + strings.Repeat(one+",", 99) + one + "]", "application/json", 100},
		{"ndjson=100", strings.Repeat(one+"\n", 100), "application/x-ndjson", 100},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			h, err := hub.New(hub.Options{AutoCreate: true})
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			handler := ipc.New(ipc.Options{Hub: h, Settings: ipc.Settings{Authenticate: ipctest.AllowAll}})
			body := []byte(tc.body)
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			b.ResetTimer()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/api/v1/sessions/s/events", bytes.NewReader(body))
				req.Header.Set("Content-Type", tc.ct)
				w := httptest.NewRecorder()
				handler.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("publish = %d %s", w.Code, w.Body)
				}
			}
			b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(b.N*tc.events), "ns/event")
		})
	}
}

// BenchmarkStreamingPublish measures a streaming NDJSON publish: one
// request whose body is b.N lines, written in pieces of 100.
func BenchmarkStreamingPublish(b *testing.B) {
	srv := ipctest.New(b, ipctest.Options{Hub: hub.Options{AutoCreate: true}})
	line := []byte(`{"type":"bench:event","data":{"pad":"` + strings.Repeat("x", 246) + `"}}` + "\n")
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, ipctest.URL("/api/v1/sessions/s/events"), pr)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	var wg sync.WaitGroup
	var resp *http.Response
	wg.Add(1)
	go func() {
		defer wg.Done()
		resp, err = srv.Client.Do(req)
	}()
	chunk := bytes.Repeat(line, 100)
	b.ReportAllocs()
	b.ResetTimer()
	for sent := 0; sent < b.N; sent += 100 {
		n := min(100, b.N-sent)
		pw.Write(chunk[:n*len(line)])
	}
	pw.Close()
	wg.Wait()
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		b.Fatalf("streaming publish = %d %s", resp.StatusCode, body)
	}
	b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(b.N), "ns/event")
}
