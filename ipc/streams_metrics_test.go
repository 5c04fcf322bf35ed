package ipc_test

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/ipc"
	"github.com/localbus/localbus/ipc/ipctest"
)

// lockedBuffer is a log destination the router's goroutines may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// scrape returns the samples of GET /metrics whose line starts with
// prefix, by their whole name with labels.
func scrape(t *testing.T, srv *ipctest.Server, prefix string) map[string]float64 {
	t.Helper()
	resp := srv.Do(t, http.MethodGet, "/metrics", nil, nil)
	if resp.Status != http.StatusOK {
		t.Fatalf("GET /metrics: %d", resp.Status)
	}
	got := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(resp.Body))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		name, value, _ := strings.Cut(line, " ")
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		got[name] = v
	}
	return got
}

// Streams are counted by transport when they open and close, with how
// they ended, and so are the bytes their writers send; each opening and
// closing is a debug line naming the transport and the peer.
func TestStreamsAreCountedAndLoggedByTransport(t *testing.T) {
	for _, tr := range []string{"sse", "ws"} {
		t.Run(tr, func(t *testing.T) {
			logs := &lockedBuffer{}
			srv := ipctest.New(t, ipctest.Options{
				Hub: hubOpts(),
				Handler: ipc.Options{
					Registry: prometheus.NewRegistry(),
					Logger:   slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
				},
			})
			createSession(t, srv, "s")
			before := scrape(t, srv, "localbus_stream")
			for _, name := range []string{`localbus_streams_opened_total{transport="sse"}`, `localbus_streams_opened_total{transport="ws"}`,
				`localbus_stream_bytes_written_total{transport="sse"}`, `localbus_stream_bytes_written_total{transport="ws"}`} {
				if v, ok := before[name]; !ok || v != 0 {
					t.Errorf("before any stream: %s = %v (present %v), want 0", name, v, ok)
				}
			}

			payload := strings.Repeat("x", 1000)
			path := "/api/v1/sessions/s/events"
			if tr == "sse" {
				st := srv.OpenSSE(t, path, nil)
				srv.Publish(t, "s", ipctest.Event{Type: "app:big", Data: `"` + payload + `"`})
				if env := sseNextEvent(t, st); env.Type != "app:big" {
					t.Fatalf("SSE got %s, want app:big", env.Type)
				}
				st.Close()
			} else {
				path = "/api/v1/sessions/s/ws"
				ws := srv.OpenWS(t, path, nil)
				ipctest.MustReadEnvelope(t, ws) // stream:ready
				srv.Publish(t, "s", ipctest.Event{Type: "app:big", Data: `"` + payload + `"`})
				if env := ipctest.MustReadEnvelope(t, ws); env.Type != "app:big" {
					t.Fatalf("WS got %s, want app:big", env.Type)
				}
				ws.Close(websocket.StatusNormalClosure, "")
			}

			closed := `localbus_streams_closed_total{end="cancelled",transport="` + tr + `"}`
			var after map[string]float64
			bustest.Eventually(t, ipctest.Wait, "the stream counted as closed", func() bool {
				after = scrape(t, srv, "localbus_stream")
				return after[closed] == 1
			})
			if v := after[`localbus_streams_opened_total{transport="`+tr+`"}`]; v != 1 {
				t.Errorf("streams opened = %v, want 1", v)
			}
			if v := after[`localbus_stream_bytes_written_total{transport="`+tr+`"}`]; v < float64(len(payload)) {
				t.Errorf("bytes written = %v, want at least the event's %d bytes", v, len(payload))
			}
			log := logs.String()
			for _, want := range []string{`msg="stream opened" path=` + path + ` transport=` + tr + ` session=s remote=`,
				`msg="stream closed" path=` + path + ` transport=` + tr + ` session=s end=cancelled remote=`} {
				if !strings.Contains(log, want) {
					t.Errorf("log lacks %q:\n%s", want, log)
				}
			}
		})
	}
}

// sseNextEvent returns the next envelope of st that is not a reserved
// frame.
func sseNextEvent(t *testing.T, st *ipctest.SSE) bus.Envelope {
	t.Helper()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), ipctest.Wait)
		env, _, err := st.NextEnvelope(ctx)
		cancel()
		if err != nil {
			t.Fatalf("SSE: %v", err)
		}
		if !strings.HasPrefix(env.Type, "stream:") {
			return env
		}
	}
}
