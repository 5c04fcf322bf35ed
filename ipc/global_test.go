package ipc_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"testing"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/ipc/ipctest"
)

// globalEvent is what the global stream says of one event.
type globalEvent struct {
	id      uint64
	typ     string
	session string // the envelope's session; for localbus:* events, data.session
	seq     uint64
}

func toGlobal(tb testing.TB, env bus.Envelope) globalEvent {
	tb.Helper()
	g := globalEvent{id: env.ID, typ: env.Type, session: env.Session, seq: env.Seq}
	if bus.FamilyOf(env.Type) == bus.FamilyLocalbus {
		g.session = data[struct{ Session string }](tb, env).Session
	}
	return g
}

// TestGlobalStream: every publish lands on the global bus, with its own id
// sequence and the event's session and seq; session-opened and
// session-closed appear there too; SSE and WebSocket carry the same.
func TestGlobalStream(t *testing.T) {
	srv := newServer(t)
	sse := srv.OpenSSE(t, "/api/v1/events", nil)
	ws := srv.OpenWS(t, "/api/v1/events/ws", nil)
	expectSSE(t, sse, bus.TypeReady)
	if env := ipctest.MustReadEnvelope(t, ws); env.Type != bus.TypeReady {
		t.Fatalf("first WebSocket frame %s, want stream:ready", env.Type)
	}

	srv.Publish(t, "a", ev("build:one", "1")) // auto-created
	srv.Publish(t, "b", ev("deploy:x", ""), ev("build:two", "2"))
	createSession(t, srv, "c")
	srv.Publish(t, "a", ev("build:three", "3"))
	if r := srv.Do(t, http.MethodDelete, "/api/v1/sessions/a", nil, nil); r.Status != http.StatusNoContent {
		t.Fatalf("DELETE = %d %s", r.Status, r.Body)
	}
	want := []globalEvent{
		{1, "localbus:session-opened", "a", 0},
		{2, "build:one", "a", 1},
		{3, "localbus:session-opened", "b", 0},
		{4, "deploy:x", "b", 1},
		{5, "build:two", "b", 2},
		{6, "localbus:session-opened", "c", 0},
		{7, "build:three", "a", 2},
		{8, "localbus:session-closed", "a", 0},
	}
	for i, w := range want {
		env, f, err := sse.NextEnvelope(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if got := toGlobal(t, env); got != w {
			t.Errorf("global SSE event %d = %+v, want %+v", i, got, w)
		}
		msg, err := ipctest.ReadText(testCtx(t), ws)
		if err != nil {
			t.Fatal(err)
		}
		if string(msg) != f.Data {
			t.Errorf("global WebSocket frame %s, want %s as on SSE", msg, f.Data)
		}
		if bus.FamilyOf(w.typ) != bus.FamilyLocalbus {
			var raw map[string]json.RawMessage
			json.Unmarshal(msg, &raw)
			if string(raw["seq"]) != strconv.FormatUint(w.seq, 10) || string(raw["session"]) != strconv.Quote(w.session) {
				t.Errorf("global envelope %s, want \"seq\":%d and \"session\":%q", msg, w.seq, w.session)
			}
		}
	}

	// A replay of the global bus is the same sequence.
	re := srv.OpenSSE(t, "/api/v1/events?since=0", nil)
	expectSSE(t, re, bus.TypeReady)
	for i, w := range want {
		if got := toGlobal(t, re.MustNext(t)); got != w {
			t.Errorf("global replay event %d = %+v, want %+v", i, got, w)
		}
	}
	expectSSE(t, re, bus.TypeReplayed)
}

// TestFamilyStreamCarriesOnlyItsFamily: a family route never carries a type
// outside its family, in replay or live, over SSE and WebSocket; its ids
// are global ids; ?types= narrows within the family.
func TestFamilyStreamCarriesOnlyItsFamily(t *testing.T) {
	// Every run starts from the same global ring: 1 session-opened a,
	// 2 build:one, 3 deploy:x, 4 buildx:y, 5 session-opened b, 6 test:z,
	// 7 build:two. The live batch then adds 8 deploy:y, 9 build:three,
	// 10 other:w, 11 build:four, 12 builds:no, 13 session-opened c, 14 c's
	// build:five; and the marker that ends the run.
	build := []globalEvent{{9, "build:three", "b", 4}, {11, "build:four", "b", 6}, {14, "build:five", "c", 1}}
	cases := []struct {
		name   string
		family string
		query  string
		replay []globalEvent // nil: no replay expected
		live   []globalEvent
	}{
		{"build since 0", "build", "?since=0",
			[]globalEvent{{2, "build:one", "a", 1}, {7, "build:two", "b", 2}}, build},
		{"build since 2", "build", "?since=2",
			[]globalEvent{{7, "build:two", "b", 2}}, build},
		{"build since 7", "build", "?since=7",
			[]globalEvent{}, build},
		{"build narrowed", "build", "?since=0&types=build:two,build:four,build:end",
			[]globalEvent{{7, "build:two", "b", 2}}, []globalEvent{{11, "build:four", "b", 6}}},
		{"build live only", "build", "", nil, build},
		{"localbus since 0", "localbus", "?since=0",
			[]globalEvent{{1, "localbus:session-opened", "a", 0}, {5, "localbus:session-opened", "b", 0}},
			[]globalEvent{{13, "localbus:session-opened", "c", 0}}},
	}
	for _, tc := range cases {
		for _, kind := range []string{"events", "ws"} {
			t.Run(tc.name+" "+kind, func(t *testing.T) {
				srv := newServer(t)
				srv.Publish(t, "a", ev("build:one", "1"), ev("deploy:x", ""), ev("buildx:y", ""))
				srv.Publish(t, "b", ev("test:z", ""), ev("build:two", "2"))
				path := "/api/v1/families/" + tc.family + "/" + kind + tc.query
				var next func() bus.Envelope
				if kind == "events" {
					st := srv.OpenSSE(t, path, nil)
					next = func() bus.Envelope { return st.MustNext(t) }
				} else {
					c := srv.OpenWS(t, path, nil)
					next = func() bus.Envelope { return ipctest.MustReadEnvelope(t, c) }
				}
				read := func() bus.Envelope {
					t.Helper()
					env := next()
					if f := bus.FamilyOf(env.Type); f != tc.family && f != bus.FamilyStream {
						t.Fatalf("family %s stream carried %s %s", tc.family, env.Type, env.Data)
					}
					return env
				}
				ready := read()
				if rd := data[bus.ReadyData](t, ready); ready.Type != bus.TypeReady || len(rd.Types) == 0 {
					t.Errorf("first frame %s %s, want stream:ready with types", ready.Type, ready.Data)
				}
				if tc.replay != nil {
					replay := []globalEvent{}
					for env := read(); env.Type != bus.TypeReplayed; env = read() {
						replay = append(replay, toGlobal(t, env))
					}
					if !slices.Equal(replay, tc.replay) {
						t.Errorf("replay %+v, want %+v", replay, tc.replay)
					}
				}

				srv.Publish(t, "b", ev("deploy:y", ""), ev("build:three", "3"), ev("other:w", ""), ev("build:four", "4"), ev("builds:no", ""))
				srv.Publish(t, "c", ev("build:five", "5"))
				// The marker: a last event of the family.
				isMarker := func(g globalEvent) bool { return g.typ == "build:end" }
				if tc.family == bus.FamilyLocalbus {
					createSession(t, srv, "end")
					isMarker = func(g globalEvent) bool { return g.session == "end" }
				} else {
					srv.Publish(t, "b", ev("build:end", ""))
				}
				var live []globalEvent
				for g := toGlobal(t, read()); !isMarker(g); g = toGlobal(t, read()) {
					live = append(live, g)
				}
				if !slices.Equal(live, tc.live) {
					t.Errorf("live %+v, want %+v", live, tc.live)
				}
			})
		}
	}
}
