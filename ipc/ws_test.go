package ipc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/ipc"
	"github.com/localbus/localbus/ipc/ipctest"
	"github.com/localbus/localbus/ipc/wire"
)

// TestWebSocketFramesEqualSSEData pins the one encoding: a WebSocket text
// frame is byte for byte the data: line of the same event on SSE, on a
// session stream and on the global stream.
func TestWebSocketFramesEqualSSEData(t *testing.T) {
	srv := newServer(t)
	createSession(t, srv, "s")
	for _, route := range []string{"/api/v1/sessions/s/", "/api/v1/events"} {
		sseRoute, wsRoute := route+"events", route+"ws"
		if route == "/api/v1/events" {
			sseRoute, wsRoute = route, route+"/ws"
		}
		t.Run(sseRoute, func(t *testing.T) {
			st := srv.OpenSSE(t, sseRoute, nil)
			c := srv.OpenWS(t, wsRoute, nil)
			expectSSE(t, st, bus.TypeReady)
			if env := ipctest.MustReadEnvelope(t, c); env.Type != bus.TypeReady {
				t.Fatalf("first WebSocket frame %s, want stream:ready", env.Type)
			}
			ctx := testCtx(t)
			if _, err := srv.TryPublish(ctx, "s", header(wire.HeaderClientID, `cli "9"`),
				ev("build:step", `{"n":1,"s":"é\u2028\"<>&"}`), ev("build:done", ""), ev("x:y", `[1, 2,  3]`)); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				_, f, err := st.NextEnvelope(ctx)
				if err != nil {
					t.Fatal(err)
				}
				msg, err := ipctest.ReadText(ctx, c)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(msg, []byte(f.Data)) {
					t.Errorf("WebSocket frame\n%s\nSSE data\n%s\nwant them equal", msg, f.Data)
				}
				if !json.Valid(msg) || bytes.ContainsAny(msg, "\r\n") {
					t.Errorf("frame %q: want one line of JSON", msg)
				}
			}
		})
	}
}

// controlReply is a decoded reply to a WebSocket control frame.
type controlReply struct {
	Op      string
	Types   []string
	Null    bool // "types" was present and null
	Message string
}

// control sends a control frame and reads its reply.
func control(tb testing.TB, c *websocket.Conn, frame string) controlReply {
	tb.Helper()
	if err := ipctest.WriteText(c, []byte(frame)); err != nil {
		tb.Fatalf("send %s: %v", frame, err)
	}
	return readReply(tb, c)
}

func readReply(tb testing.TB, c *websocket.Conn) controlReply {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	msg, err := ipctest.ReadText(ctx, c)
	if err != nil {
		tb.Fatalf("read reply: %v", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(msg, &raw); err != nil {
		tb.Fatalf("reply %s: %v", msg, err)
	}
	var r controlReply
	json.Unmarshal(raw["op"], &r.Op)
	switch r.Op {
	case "subscribed":
		t, ok := raw["types"]
		if !ok || len(raw) != 2 {
			tb.Fatalf("reply %s: want exactly op and types", msg)
		}
		r.Null = string(t) == "null"
		json.Unmarshal(t, &r.Types)
	case "error":
		json.Unmarshal(raw["message"], &r.Message)
		if r.Message == "" || len(raw) != 2 {
			tb.Fatalf("reply %s: want exactly op and a message", msg)
		}
	default:
		tb.Fatalf("reply %s: want op subscribed or error", msg)
	}
	return r
}

// probe publishes one event of each of typs to session and then marker, and
// returns the types the stream delivered before the marker, in order. The
// marker must pass the stream's filter.
func probe(tb testing.TB, srv *ipctest.Server, c *websocket.Conn, session, marker string, typs ...string) []string {
	tb.Helper()
	var evs []ipctest.Event
	for _, t := range typs {
		evs = append(evs, ev(t, ""))
	}
	srv.Publish(tb, session, append(evs, ev(marker, ""))...)
	got := []string{}
	for {
		env := ipctest.MustReadEnvelope(tb, c)
		if env.Type == marker {
			return got
		}
		if env.ID == 0 {
			tb.Fatalf("got %s while probing", env.Type)
		}
		got = append(got, env.Type)
	}
}

func TestWebSocketControl(t *testing.T) {
	srv := newServer(t)
	createSession(t, srv, "s")
	c := srv.OpenWS(t, "/api/v1/sessions/s/ws?types=a:x,z:mark", nil)
	if env := ipctest.MustReadEnvelope(t, c); env.Type != bus.TypeReady {
		t.Fatalf("first frame %s, want stream:ready", env.Type)
	}
	all := []string{"a:x", "b:y", "c:z"}
	check := func(step string, want ...string) {
		t.Helper()
		if want == nil {
			want = []string{}
		}
		if got := probe(t, srv, c, "s", "z:mark", all...); !slices.Equal(got, want) {
			t.Errorf("after %s the stream carried %v, want %v", step, got, want)
		}
	}
	subscribed := func(frame string, want ...string) {
		t.Helper()
		r := control(t, c, frame)
		if r.Op != "subscribed" || r.Null != (want == nil) || !slices.Equal(r.Types, want) {
			t.Errorf("%s: reply %+v, want subscribed %v", frame, r, want)
		}
	}
	refused := func(frame string) {
		t.Helper()
		if r := control(t, c, frame); r.Op != "error" {
			t.Errorf("%s: reply %+v, want an error", frame, r)
		}
	}

	check("?types=a:x,z:mark", "a:x")
	subscribed(`{"op":"subscribe","types":["b:*"]}`, "a:x", "z:mark", "b:*")
	check("subscribe b:*", "a:x", "b:y")
	subscribed(`{"op":"unsubscribe","types":["a:x"]}`, "z:mark", "b:*")
	check("unsubscribe a:x", "b:y")
	subscribed(`{"op":"set","types":["c:z","z:mark"]}`, "c:z", "z:mark")
	check("set c:z", "c:z")

	// Refused frames leave the filter as it was and the connection open.
	for _, frame := range []string{
		`{"op":"frobnicate","types":["a:x"]}`,
		`{"op":`,
		`not json`,
		`{"op":"subscribe"}`,
		`{"op":"subscribe","types":null}`,
		`{"op":"subscribe","types":"a:x"}`,
		`{"op":"subscribe","types":[1]}`,
		`{"op":"subscribe","types":[]}`,
		`{"op":"subscribe","types":[""]}`,
		`{"op":"subscribe","types":["stream:ready"]}`,
		`{"op":"set","types":["stream:*"]}`,
		`{"op":"set","types":["localbus:session-opened"]}`,
		`{"op":"subscribe","types":["nocolon"]}`,
		`{"op":"set","types":["a:x"],"extra":1}`,
		`{"op":"set","types":["a:x"]} {"op":"set","types":null}`,
		`{"types":["a:x"]}`,
		`{"op":"unsubscribe","types":["c:z","z:mark"]}`,
		`{"op":"set","types":["a:` + strings.Repeat("n", 65) + `"]}`,
	} {
		refused(frame)
		check("refused "+frame, "c:z")
	}
	ctx := testCtx(t)
	if err := c.Write(ctx, websocket.MessageBinary, []byte(`{"op":"set","types":null}`)); err != nil {
		t.Fatal(err)
	}
	if r := readReply(t, c); r.Op != "error" {
		t.Errorf("binary frame: reply %+v, want an error", r)
	}
	check("binary frame", "c:z")

	subscribed(`{"op":"set","types":null}`)
	check("set null", all...)
	refused(`{"op":"unsubscribe","types":["a:x"]}`)
	check("unsubscribe on an unfiltered stream", all...)
	subscribed(`{"op":"subscribe","types":["a:x"]}`)
	check("subscribe on an unfiltered stream", all...)
	subscribed(`{"op":"set","types":["b:y","z:mark"]}`, "b:y", "z:mark")
	check("set after null", "b:y")
}

// TestWebSocketControlFrameWithTrailingDataIsRefused sends control frames
// that are one valid frame followed by more than white space: each is
// refused with an error that says so, the filter stays as it was and the
// stream stays open; white space after the frame is no trailing data.
func TestWebSocketControlFrameWithTrailingDataIsRefused(t *testing.T) {
	srv := newServer(t)
	createSession(t, srv, "s")
	c := srv.OpenWS(t, "/api/v1/sessions/s/ws?types=a:x,z:mark", nil)
	if env := ipctest.MustReadEnvelope(t, c); env.Type != bus.TypeReady {
		t.Fatalf("first frame %s, want stream:ready", env.Type)
	}
	const frame = `{"op":"set","types":["b:y","z:mark"]}`
	for _, trailing := range []string{"}", "]", "xyz", " 1", ` {"op":"set","types":null}`, "\n}", ",", "\x00"} {
		r := control(t, c, frame+trailing)
		if r.Op != "error" || !strings.Contains(r.Message, "trailing data") {
			t.Errorf("%q: reply %+v, want an error naming the trailing data", frame+trailing, r)
		}
		if got := probe(t, srv, c, "s", "z:mark", "a:x", "b:y"); !slices.Equal(got, []string{"a:x"}) {
			t.Errorf("after %q the stream carried %v, want [a:x]: the filter as it was", frame+trailing, got)
		}
	}
	if r := control(t, c, frame+" \r\n\t"); r.Op != "subscribed" || !slices.Equal(r.Types, []string{"b:y", "z:mark"}) {
		t.Errorf("frame followed by white space: reply %+v, want subscribed [b:y z:mark]", r)
	}
	if got := probe(t, srv, c, "s", "z:mark", "a:x", "b:y"); !slices.Equal(got, []string{"b:y"}) {
		t.Errorf("after the frame the stream carried %v, want [b:y]", got)
	}
}

func TestWebSocketControlOnFamilyRoute(t *testing.T) {
	srv := newServer(t)
	createSession(t, srv, "s")
	c := srv.OpenWS(t, "/api/v1/families/build/ws?types=build:a,build:mark", nil)
	if env := ipctest.MustReadEnvelope(t, c); env.Type != bus.TypeReady {
		t.Fatalf("first frame %s, want stream:ready", env.Type)
	}
	all := []string{"build:a", "build:b", "deploy:x", "deploy:y"}
	check := func(step string, want ...string) {
		t.Helper()
		if got := probe(t, srv, c, "s", "build:mark", all...); !slices.Equal(got, want) {
			t.Errorf("after %s the stream carried %v, want %v", step, got, want)
		}
	}
	check("?types=build:a,build:mark", "build:a")
	for _, frame := range []string{
		`{"op":"subscribe","types":["deploy:x"]}`,
		`{"op":"subscribe","types":["deploy:*"]}`,
		`{"op":"set","types":["build:b","deploy:x"]}`,
		`{"op":"set","types":["localbus:*"]}`,
		`{"op":"subscribe","types":["stream:ready"]}`,
	} {
		if r := control(t, c, frame); r.Op != "error" {
			t.Errorf("%s: reply %+v, want an error", frame, r)
		}
		check("refused "+frame, "build:a")
	}
	if r := control(t, c, `{"op":"set","types":null}`); r.Op != "subscribed" || !r.Null {
		t.Errorf("set null: reply %+v, want subscribed null", r)
	}
	check("set null", "build:a", "build:b")
	if r := control(t, c, `{"op":"set","types":["build:*"]}`); r.Op != "subscribed" || !slices.Equal(r.Types, []string{"build:*"}) {
		t.Errorf("set build:*: reply %+v, want subscribed [build:*]", r)
	}
	check("set build:*", "build:a", "build:b")
}

func TestWebSocketControlFrameTooBigCloses1009(t *testing.T) {
	srv := newServer(t)
	createSession(t, srv, "s")
	c := srv.OpenWS(t, "/api/v1/sessions/s/ws", nil)
	ipctest.MustReadEnvelope(t, c)
	big := `{"op":"set","types":["a:` + strings.Repeat("x", ipc.MaxControlFrame) + `"]}`
	if err := ipctest.WriteText(c, []byte(big)); err != nil {
		t.Fatal(err)
	}
	msgs, code, err := ipctest.ReadUntilClose(testCtx(t), c)
	if code != websocket.StatusMessageTooBig {
		t.Errorf("close = %d (%v) after %q, want 1009", code, err, msgs)
	}
}

// readToClose reads a WebSocket to its close and returns the envelopes and
// the close status.
func readToClose(tb testing.TB, c *websocket.Conn) ([]bus.Envelope, websocket.StatusCode) {
	tb.Helper()
	msgs, code, err := ipctest.ReadUntilClose(testCtx(tb), c)
	if err != nil {
		tb.Fatalf("read to close: %v", err)
	}
	envs := make([]bus.Envelope, len(msgs))
	for i, m := range msgs {
		if err := json.Unmarshal(m, &envs[i]); err != nil {
			tb.Fatalf("frame %q: %v", m, err)
		}
	}
	return envs, code
}

// readSSEToEnd reads an SSE stream to its end.
func readSSEToEnd(tb testing.TB, st *ipctest.SSE) []bus.Envelope {
	tb.Helper()
	envs, err := st.End(testCtx(tb))
	if err != nil {
		tb.Fatalf("SSE read to end: %v (got %v)", err, bustest.Types(envs))
	}
	return envs
}

// TestStreamsEndInBand pins how the daemon ends streams: the terminal
// stream:closed frame with its reason, then WebSocket 1000 for a deleted
// session and 1001 for shutdown and reload, and the end of the SSE body.
func TestStreamsEndInBand(t *testing.T) {
	cases := []struct {
		name   string
		end    func(*testing.T, *ipctest.Server)
		reason string
		code   websocket.StatusCode
		global bool // the global streams end too
	}{
		{"session deleted", func(t *testing.T, srv *ipctest.Server) {
			if r := srv.Do(t, http.MethodDelete, "/api/v1/sessions/s", nil, nil); r.Status != http.StatusNoContent {
				t.Errorf("DELETE = %d %s, want 204", r.Status, r.Body)
			}
		}, "session_deleted", websocket.StatusNormalClosure, false},
		{"shutdown", func(t *testing.T, srv *ipctest.Server) { srv.Hub.EndStreams(bus.EndShutdown) }, "shutdown", websocket.StatusGoingAway, true},
		{"reload", func(t *testing.T, srv *ipctest.Server) { srv.Hub.EndStreams(bus.EndReload) }, "reload", websocket.StatusGoingAway, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t)
			createSession(t, srv, "s")
			ws := srv.OpenWS(t, "/api/v1/sessions/s/ws", nil)
			gws := srv.OpenWS(t, "/api/v1/events/ws", nil)
			st := srv.OpenSSE(t, "/api/v1/sessions/s/events", nil)
			gst := srv.OpenSSE(t, "/api/v1/events", nil)
			for _, c := range []*websocket.Conn{ws, gws} {
				ipctest.MustReadEnvelope(t, c)
			}
			expectSSE(t, st, bus.TypeReady)
			expectSSE(t, gst, bus.TypeReady)
			srv.Publish(t, "s", ev("a:b", "1"))

			tc.end(t, srv)

			checkClosed := func(what string, envs []bus.Envelope) {
				t.Helper()
				if len(envs) == 0 {
					t.Fatalf("%s: nothing before the end", what)
				}
				last := envs[len(envs)-1]
				if last.Type != bus.TypeClosed || last.ID != 0 {
					t.Fatalf("%s: last frame %s (frames %v), want stream:closed", what, last.Type, bustest.Types(envs))
				}
				cd := data[bus.ClosedData](t, last)
				if cd.Reason != tc.reason || cd.RetryMs < 500 || cd.RetryMs > 1500 {
					t.Errorf("%s: stream:closed %s, want reason %s and retryMs in [500, 1500]", what, last.Data, tc.reason)
				}
				if got := bustest.IDs(envs); !slices.Equal(got, []uint64{1}) {
					t.Errorf("%s: events before the end %v, want [1]: queued frames go out first", what, got)
				}
			}
			envs, code := readToClose(t, ws)
			checkClosed("session WebSocket", envs)
			if code != tc.code {
				t.Errorf("session WebSocket close = %d, want %d", code, tc.code)
			}
			checkClosed("session SSE", readSSEToEnd(t, st))
			if tc.global {
				envs, code := readToClose(t, gws)
				if len(envs) == 0 || envs[len(envs)-1].Type != bus.TypeClosed || code != tc.code {
					t.Errorf("global WebSocket ended with %v and %d, want stream:closed and %d", bustest.Types(envs), code, tc.code)
				}
				genvs := readSSEToEnd(t, gst)
				if len(genvs) == 0 || genvs[len(genvs)-1].Type != bus.TypeClosed {
					t.Errorf("global SSE ended with %v, want stream:closed", bustest.Types(genvs))
				}
			} else {
				// Deleting a session leaves the global streams open.
				env := ipctest.MustReadEnvelope(t, gws)
				for env.Type != "localbus:session-closed" {
					env = ipctest.MustReadEnvelope(t, gws)
				}
			}
		})
	}
}

// TestSubscriberLimitInBand: past max_subscribers a stream is refused after
// its response began, so the reason goes in-band: SSE answers 200 with a
// terminal stream:error, WebSocket sends stream:error then closes 1013.
func TestSubscriberLimitInBand(t *testing.T) {
	srv := ipctest.New(t, ipctest.Options{Hub: hub.Options{AutoCreate: true, Limits: bus.Limits{MaxSubscribers: 1}}})
	createSession(t, srv, "s")
	first := srv.OpenSSE(t, "/api/v1/sessions/s/events", nil)
	expectSSE(t, first, bus.TypeReady)

	second := srv.OpenSSE(t, "/api/v1/sessions/s/events", nil)
	if ct := second.Response.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("refused SSE Content-Type = %q, want text/event-stream", ct)
	}
	if b := nextBlock(t, second); b.Retry != "3000" {
		t.Errorf("refused SSE first block %q, want retry: 3000", b.Raw)
	}
	envs := readSSEToEnd(t, second)
	if len(envs) != 1 || envs[0].Type != bus.TypeError || data[bus.ErrorData](t, envs[0]).Code != "subscriber_limit" {
		t.Errorf("refused SSE frames %v, want one stream:error subscriber_limit", bustest.Types(envs))
	}

	c := srv.OpenWS(t, "/api/v1/sessions/s/ws", nil)
	wenvs, code := readToClose(t, c)
	if len(wenvs) != 1 || wenvs[0].Type != bus.TypeError || data[bus.ErrorData](t, wenvs[0]).Code != "subscriber_limit" {
		t.Errorf("refused WebSocket frames %v, want one stream:error subscriber_limit", bustest.Types(wenvs))
	}
	if code != websocket.StatusTryAgainLater {
		t.Errorf("refused WebSocket close = %d, want 1013", code)
	}

	// The first stream is untouched.
	r := srv.Publish(t, "s", ev("a:b", ""))
	if env := first.MustNext(t); env.ID != r.LastID {
		t.Errorf("first stream got %s %d, want event %d", env.Type, env.ID, r.LastID)
	}
}

// TestWebSocketKeepalive: the server pings every keepalive; a peer that
// answers keeps its quiet stream as long as it likes, and a peer that does
// not answer is closed and its subscription removed.
func TestWebSocketKeepalive(t *testing.T) {
	srv := ipctest.New(t, ipctest.Options{
		Hub: hubOpts(),
		// Short, but long enough for a loaded machine to answer a ping:
		// the server waits one keepalive for the pong.
		Handler: ipc.Options{Settings: ipc.Settings{Keepalive: 250 * time.Millisecond, WriteTimeout: 250 * time.Millisecond}},
	})
	createSession(t, srv, "s")
	s, _ := srv.Hub.Session("s")
	ctx := testCtx(t)

	t.Run("answering peer stays", func(t *testing.T) {
		var pings atomic.Int64
		c, _, err := websocket.Dial(ctx, "ws://"+ipctest.Host+"/api/v1/sessions/s/ws", &websocket.DialOptions{
			HTTPClient: srv.Client,
			OnPingReceived: func(context.Context, []byte) bool {
				pings.Add(1)
				return true
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		// A reader answers pings while it waits.
		msgs := make(chan bus.Envelope)
		done := make(chan error, 1)
		go func() {
			for {
				env, _, err := ipctest.ReadEnvelope(ctx, c)
				if err != nil {
					done <- err
					return
				}
				select {
				case msgs <- env:
				case <-ctx.Done():
				}
			}
		}()
		defer func() {
			c.CloseNow()
			<-done
		}()
		if env := <-msgs; env.Type != bus.TypeReady {
			t.Fatalf("first frame %s, want stream:ready", env.Type)
		}
		// Several keepalives and write timeouts pass on the quiet stream.
		bustest.Eventually(t, wait, "four pings", func() bool { return pings.Load() >= 4 })
		r := srv.Publish(t, "s", ev("a:b", ""))
		select {
		case env := <-msgs:
			if env.ID != r.LastID {
				t.Errorf("after the quiet spell got %s %d, want event %d", env.Type, env.ID, r.LastID)
			}
		case err := <-done:
			t.Fatalf("quiet stream ended: %v", err)
		case <-ctx.Done():
			t.Fatal("no event after the quiet spell")
		}
	})

	t.Run("silent peer is closed", func(t *testing.T) {
		// This client never reads, so it never answers a ping.
		c, _, err := srv.DialWS(ctx, "/api/v1/sessions/s/ws", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		bustest.Eventually(t, wait, "one subscriber", func() bool { return s.Bus.Stats().Subscribers == 1 })
		bustest.Eventually(t, wait, "the silent peer's subscription to be removed", func() bool {
			return s.Bus.Stats().Subscribers == 0
		})
	})
}

// TestWebSocketControlOnUnfilteredFamilyStreamChecksNamesFirst pins SPEC
// §5's "names are checked first": on a family stream with no ?types=, a
// subscribe would add nothing, yet an out-of-family name in it is an error,
// and the stream keeps carrying its family.
func TestWebSocketControlOnUnfilteredFamilyStreamChecksNamesFirst(t *testing.T) {
	srv := newServer(t)
	createSession(t, srv, "s")
	c := srv.OpenWS(t, "/api/v1/families/build/ws", nil)
	if env := ipctest.MustReadEnvelope(t, c); env.Type != bus.TypeReady {
		t.Fatalf("first frame %s, want stream:ready", env.Type)
	}
	all := []string{"build:a", "deploy:x"}
	for _, frame := range []string{
		`{"op":"subscribe","types":["deploy:x"]}`,
		`{"op":"subscribe","types":["build:a","deploy:*"]}`,
		`{"op":"unsubscribe","types":["deploy:x"]}`,
	} {
		r := control(t, c, frame)
		if r.Op != "error" || !strings.Contains(r.Message, "outside family build") {
			t.Errorf("%s: reply %+v, want an error naming the family", frame, r)
		}
		if got := probe(t, srv, c, "s", "build:mark", all...); !slices.Equal(got, []string{"build:a"}) {
			t.Errorf("after refused %s the stream carried %v, want [build:a]", frame, got)
		}
	}
	if r := control(t, c, `{"op":"subscribe","types":["build:a"]}`); r.Op != "subscribed" || !r.Null {
		t.Errorf("in-family subscribe on an unfiltered stream: reply %+v, want subscribed null", r)
	}
}
