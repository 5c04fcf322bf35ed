package ipc_test

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/ipc"
	"github.com/localbus/localbus/ipc/ipctest"
	"github.com/localbus/localbus/ipc/wire"
)

// decodeStrict decodes a reply body into v, refusing unknown fields, and
// checks it is JSON.
func decodeStrict(tb testing.TB, r *ipctest.Response, v any) {
	tb.Helper()
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		tb.Errorf("Content-Type = %q, want application/json", ct)
	}
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		tb.Fatalf("reply %d %s: %v", r.Status, r.Body, err)
	}
}

func TestPublishReplies(t *testing.T) {
	srv := newServer(t)
	cases := []struct {
		name   string
		header http.Header
		body   string
		want   wire.PublishReply
	}{
		{"one object", nil, `{"type":"a:one","data":{"k":1}}`, wire.PublishReply{IDs: []uint64{1}, LastID: 1}},
		{"one object without data", nil, `{"type":"a:two"}`, wire.PublishReply{IDs: []uint64{2}, LastID: 2}},
		{"array", nil, `[{"type":"a:b","data":1},{"type":"a:c"},{"type":"a:d","data":null}]`, wire.PublishReply{IDs: []uint64{3, 4, 5}, LastID: 5}},
		{"array of one", nil, ` [ {"type":"a:b"} ] `, wire.PublishReply{IDs: []uint64{6}, LastID: 6}},
		{"ndjson", header("Content-Type", "application/x-ndjson"), "{\"type\":\"n:a\",\"data\":1}\n\n{\"type\":\"n:b\"}\r\n", wire.PublishReply{IDs: []uint64{7, 8}, LastID: 8}},
		{"ndjson with charset", header("Content-Type", "application/x-ndjson; charset=utf-8"), "{\"type\":\"n:c\"}", wire.PublishReply{IDs: []uint64{9}, LastID: 9}},
		{"no content type", header("Content-Type", ""), `{"type":"a:e"}`, wire.PublishReply{IDs: []uint64{10}, LastID: 10}},
		{"batch of 1000", nil, batchBody(1000), wire.PublishReply{IDs: seq(11, 1010), LastID: 1010}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := srv.Do(t, http.MethodPost, "/api/v1/sessions/s/events", tc.header, []byte(tc.body))
			if r.Status != http.StatusOK {
				t.Fatalf("publish = %d %s, want 200", r.Status, r.Body)
			}
			var got wire.PublishReply
			decodeStrict(t, r, &got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("reply (-want +got):\n%s", diff)
			}
		})
	}
	// What was stored is what was sent, in order.
	st := srv.OpenSSE(t, "/api/v1/sessions/s/events?since=0", nil)
	expectSSE(t, st, bus.TypeReady)
	for _, w := range []struct{ typ, data string }{
		{"a:one", `{"k":1}`}, {"a:two", "null"}, {"a:b", "1"}, {"a:c", "null"}, {"a:d", "null"},
		{"a:b", "null"}, {"n:a", "1"}, {"n:b", "null"}, {"n:c", "null"}, {"a:e", "null"},
	} {
		env := st.MustNext(t)
		if env.Type != w.typ || string(env.Data) != w.data || env.Session != "s" || env.V != 1 {
			t.Errorf("stored %s %s (session %q v %d), want %s %s", env.Type, env.Data, env.Session, env.V, w.typ, w.data)
		}
	}
}

func TestPublishOriginator(t *testing.T) {
	srv := newServer(t)
	ctx := testCtx(t)
	if _, err := srv.TryPublish(ctx, "s", header(wire.HeaderClientID, "cli-9"), ev("a:b", "1"), ev("a:c", "2")); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.TryPublish(ctx, "s", nil, ev("a:d", "3")); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.TryPublish(ctx, "s", header(wire.HeaderClientID, `we "quote" \ it`), ev("a:e", "4")); err != nil {
		t.Fatal(err)
	}
	want := []string{"cli-9", "cli-9", "", `we "quote" \ it`}
	for _, path := range []string{"/api/v1/sessions/s/events?since=0", "/api/v1/families/a/events?since=0"} {
		st := srv.OpenSSE(t, path, nil)
		expectSSE(t, st, bus.TypeReady)
		for i, w := range want {
			env, f, err := st.NextEnvelope(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			if env.Originator != w {
				t.Errorf("%s event %d originator = %q, want %q", path, i, env.Originator, w)
			}
			if w == "" && strings.Contains(f.Data, `"originator"`) {
				t.Errorf("%s event %d = %s, want no originator field", path, i, f.Data)
			}
		}
	}
}

// TestRefusedPublishCreatesNothing: with auto-create on, a refused batch
// creates no session and announces none.
func TestRefusedPublishCreatesNothing(t *testing.T) {
	srv := newServer(t)
	for _, body := range []string{
		`{"type":"stream:x"}`,
		`[{"type":"a:b"},{"type":"localbus:x"}]`,
		`{"type":"a:b","data":`,
		"{\"type\":\"a:b\",\"data\":\"\xff\"}",
		`[{"type":"a:b"},{"type":"a:c","data":"\u0000ok"},{"type":"a:d","data":"` + "\xc3\x28" + `"}]`,
	} {
		r := srv.Do(t, http.MethodPost, "/api/v1/sessions/fresh/events", nil, []byte(body))
		if r.Status != http.StatusBadRequest {
			t.Errorf("publish %q = %d %s, want 400", body, r.Status, r.Body)
		}
		r.ErrorBody(t)
		if _, ok := srv.Hub.Session("fresh"); ok {
			t.Fatalf("publish %q was refused but created the session", body)
		}
		if n := srv.Hub.Global().LastID(); n != 0 {
			t.Fatalf("publish %q was refused but the global bus has %d events", body, n)
		}
	}
}

func TestSessionsREST(t *testing.T) {
	srv := newServer(t)

	// Create without a body: a generated id.
	r := srv.Do(t, http.MethodPost, "/api/v1/sessions", nil, nil)
	if r.Status != http.StatusCreated {
		t.Fatalf("create = %d %s, want 201", r.Status, r.Body)
	}
	var gen wire.SessionInfo
	decodeStrict(t, r, &gen)
	if _, err := bus.ParseSessionID(gen.ID); err != nil {
		t.Errorf("generated id %q: %v", gen.ID, err)
	}
	if loc := r.Header.Get("Location"); loc != "/api/v1/sessions/"+gen.ID {
		t.Errorf("Location = %q, want /api/v1/sessions/%s", loc, gen.ID)
	}
	want := wire.SessionInfo{ID: gen.ID, Epoch: gen.Epoch, Ring: wire.RingInfo{MaxCount: bus.DefaultRingSize, MaxBytes: bus.DefaultRingMaxBytes}}
	if diff := cmp.Diff(want, gen); diff != "" || gen.Epoch == "" {
		t.Errorf("created session (-want +got):\n%s", diff)
	}
	r2 := srv.Do(t, http.MethodPost, "/api/v1/sessions", nil, []byte(`{}`))
	var gen2 wire.SessionInfo
	decodeStrict(t, r2, &gen2)
	if r2.Status != http.StatusCreated || gen2.ID == gen.ID {
		t.Errorf("second create = %d %s, want 201 with another id than %s", r2.Status, r2.Body, gen.ID)
	}

	// Create with an id and a ring size, which the ring honours.
	r = srv.Do(t, http.MethodPost, "/api/v1/sessions", nil, []byte(`{"id":"r5","ringSize":5}`))
	if r.Status != http.StatusCreated {
		t.Fatalf("create r5 = %d %s, want 201", r.Status, r.Body)
	}
	var r5 wire.SessionInfo
	decodeStrict(t, r, &r5)
	if r5.ID != "r5" || r5.Ring.MaxCount != 5 {
		t.Errorf("created %+v, want id r5 with ring maxCount 5", r5)
	}
	for range 8 {
		srv.Publish(t, "r5", ev("a:b", strings.Repeat("7", 10)))
	}
	st := srv.OpenSSE(t, "/api/v1/sessions/r5/events", nil)
	expectSSE(t, st, bus.TypeReady)

	// Show: every field, exactly.
	r = srv.Do(t, http.MethodGet, "/api/v1/sessions/r5", nil, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("show = %d %s", r.Status, r.Body)
	}
	var fields map[string]json.RawMessage
	r.DecodeJSON(t, &fields)
	keys := slices.Sorted(maps.Keys(fields))
	if want := []string{"consumers", "deliverRate", "earliestId", "epoch", "id", "lastId", "publishRate", "ring", "subscribers"}; !slices.Equal(keys, want) {
		t.Errorf("show fields %v, want %v", keys, want)
	}
	var ring map[string]json.RawMessage
	json.Unmarshal(fields["ring"], &ring)
	if keys := slices.Sorted(maps.Keys(ring)); !slices.Equal(keys, []string{"bytes", "count", "maxBytes", "maxCount"}) {
		t.Errorf("show ring fields %v, want bytes, count, maxBytes, maxCount", keys)
	}
	var show wire.SessionInfo
	decodeStrict(t, r, &show)
	s, _ := srv.Hub.Session("r5")
	st5 := s.Bus.Stats()
	wantShow := wire.SessionInfo{
		ID: "r5", Epoch: s.Bus.Epoch(), LastID: 8, EarliestID: ptr[uint64](4), Subscribers: 1,
		Ring: wire.RingInfo{Count: 5, Bytes: st5.RingBytes, MaxCount: 5, MaxBytes: bus.DefaultRingMaxBytes},
	}
	if diff := cmp.Diff(wantShow, show); diff != "" || show.Ring.Bytes <= 0 {
		t.Errorf("show r5 (-want +got):\n%s", diff)
	}

	// List: every session, sorted by id.
	r = srv.Do(t, http.MethodGet, "/api/v1/sessions", nil, nil)
	var list wire.SessionList
	decodeStrict(t, r, &list)
	var listed []string
	for _, si := range list.Sessions {
		listed = append(listed, si.ID)
	}
	wantIDs := []string{gen.ID, gen2.ID, "r5"}
	slices.Sort(wantIDs)
	if !slices.Equal(listed, wantIDs) {
		t.Errorf("list = %v, want %v", listed, wantIDs)
	}

	// Delete: 204 and no body; gone from show and list; its stream ends.
	r = srv.Do(t, http.MethodDelete, "/api/v1/sessions/r5", nil, nil)
	if r.Status != http.StatusNoContent || len(r.Body) != 0 {
		t.Errorf("delete = %d %q, want 204 and no body", r.Status, r.Body)
	}
	if envs := readSSEToEnd(t, st); len(envs) != 1 || envs[0].Type != bus.TypeClosed {
		t.Errorf("stream of the deleted session ended with %v, want stream:closed", bustest.Types(envs))
	}
	if r := srv.Do(t, http.MethodGet, "/api/v1/sessions/r5", nil, nil); r.Status != http.StatusNotFound {
		t.Errorf("show after delete = %d, want 404", r.Status)
	}
	r = srv.Do(t, http.MethodGet, "/api/v1/sessions", nil, nil)
	decodeStrict(t, r, &list)
	if len(list.Sessions) != 2 {
		t.Errorf("list after delete has %d sessions, want 2", len(list.Sessions))
	}
	// Created again, it is a new bus: ids from 1, a new epoch.
	createSession(t, srv, "r5")
	r = srv.Do(t, http.MethodGet, "/api/v1/sessions/r5", nil, nil)
	decodeStrict(t, r, &show)
	if show.LastID != 0 || show.Epoch == wantShow.Epoch || show.Ring.MaxCount != bus.DefaultRingSize {
		t.Errorf("recreated r5 = %+v, want lastId 0, a new epoch, the default ring", show)
	}

	// An empty list is a list.
	empty := newServer(t)
	r = empty.Do(t, http.MethodGet, "/api/v1/sessions", nil, nil)
	if strings.TrimSpace(string(r.Body)) != `{"sessions":[]}` {
		t.Errorf("empty list = %s, want {\"sessions\":[]}", r.Body)
	}
}

func TestCaps(t *testing.T) {
	srv := ipctest.New(t, ipctest.Options{Hub: hubOpts(), Handler: ipc.Options{
		Version: "1.2.3-test",
		Settings: ipc.Settings{
			MaxEventBytes: 4096,
			Caps:          wire.Limits{RingSize: 100, RingMaxBytes: 1 << 20, MaxQueued: 64, MaxQueuedBytes: 1 << 16, MaxSubscribers: 8, MaxConsumers: 5, MaxSessions: 10},
		},
	}})
	r := srv.Do(t, http.MethodGet, "/api/v1/caps", nil, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("caps = %d %s", r.Status, r.Body)
	}
	var caps wire.Caps
	decodeStrict(t, r, &caps)
	if caps.Version != "1.2.3-test" || caps.SchemaVersion != bus.SchemaVersion {
		t.Errorf("caps version %q schema %d, want 1.2.3-test and %d", caps.Version, caps.SchemaVersion, bus.SchemaVersion)
	}
	for _, f := range []string{"session_events", "slow_client_warning", "typed_event_schema", "resume", "ws_control", "consumers"} {
		if !slices.Contains(caps.Features, f) {
			t.Errorf("caps features %v lack %s", caps.Features, f)
		}
	}
	want := wire.Limits{
		RingSize: 100, RingMaxBytes: 1 << 20, MaxQueued: 64, MaxQueuedBytes: 1 << 16, MaxSubscribers: 8, MaxConsumers: 5, MaxSessions: 10,
		MaxEventBytes: 4096, MaxBatch: 1000, MinMaxQueued: 16, MaxMaxQueued: 2048, KeepaliveMs: 15000,
	}
	if diff := cmp.Diff(want, caps.Limits); diff != "" {
		t.Errorf("caps limits (-want +got):\n%s", diff)
	}
	if caps.Durability != "" || caps.Fsync != "" {
		t.Errorf("caps durability %q fsync %q with none configured, want both omitted", caps.Durability, caps.Fsync)
	}
}

// TestSetSettingsSwapsTheSettingsAndKeepsTheRest: a reload's new settings
// reach /api/v1/caps; what New read (the version, the durability) stays.
func TestSetSettingsSwapsTheSettingsAndKeepsTheRest(t *testing.T) {
	srv := ipctest.New(t, ipctest.Options{Hub: hubOpts(), Handler: ipc.Options{
		Version: "1.2.3-test", Durability: "disk", Fsync: "always",
		Settings: ipc.Settings{MaxEventBytes: 4096, Caps: wire.Limits{RingSize: 100}},
	}})
	srv.Handler.SetSettings(ipc.Settings{Authenticate: ipctest.AllowAll, MaxEventBytes: 512, Caps: wire.Limits{RingSize: 7}})
	r := srv.Do(t, http.MethodGet, "/api/v1/caps", nil, nil)
	var caps wire.Caps
	decodeStrict(t, r, &caps)
	if caps.Limits.MaxEventBytes != 512 || caps.Limits.RingSize != 7 {
		t.Errorf("caps limits after SetSettings = %+v, want maxEventBytes 512 and ringSize 7", caps.Limits)
	}
	if caps.Version != "1.2.3-test" || caps.Durability != "disk" || caps.Fsync != "always" {
		t.Errorf("caps after SetSettings: version %q durability %q fsync %q, want what New read", caps.Version, caps.Durability, caps.Fsync)
	}
}

func TestCapsSayTheDurability(t *testing.T) {
	srv := ipctest.New(t, ipctest.Options{Hub: hubOpts(), Handler: ipc.Options{Durability: "disk", Fsync: "always"}})
	r := srv.Do(t, http.MethodGet, "/api/v1/caps", nil, nil)
	var caps wire.Caps
	decodeStrict(t, r, &caps)
	if caps.Durability != "disk" || caps.Fsync != "always" {
		t.Errorf("caps durability %q fsync %q, want disk and always", caps.Durability, caps.Fsync)
	}
}

func TestEventSizeLimitIsInclusive(t *testing.T) {
	srv := ipctest.New(t, ipctest.Options{Hub: hubOpts(), Handler: ipc.Options{Settings: ipc.Settings{MaxEventBytes: 256}}})
	body := func(n int) []byte {
		// {"type":"a:b","data":"xxx"} is 24 bytes around the x's.
		return []byte(`{"type":"a:b","data":"` + strings.Repeat("x", n-24) + `"}`)
	}
	if r := srv.Do(t, http.MethodPost, "/api/v1/sessions/s/events", nil, body(256)); r.Status != http.StatusOK {
		t.Errorf("event of exactly max_event_bytes = %d %s, want 200", r.Status, r.Body)
	}
	if r := srv.Do(t, http.MethodPost, "/api/v1/sessions/s/events", nil, body(257)); r.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("event of max_event_bytes+1 = %d %s, want 413", r.Status, r.Body)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	srv := newServer(t)
	createSession(t, srv, "s")
	status := func(path string, h http.Header) *ipctest.Response {
		return srv.Do(t, http.MethodGet, path, h, nil)
	}
	if r := status("/healthz", nil); r.Status != http.StatusOK || strings.TrimSpace(string(r.Body)) != `{"status":"ok"}` {
		t.Errorf("healthz = %d %s, want 200 {\"status\":\"ok\"}", r.Status, r.Body)
	}
	if r := status("/readyz", nil); r.Status != http.StatusOK {
		t.Errorf("readyz = %d %s, want 200", r.Status, r.Body)
	}
	srv.Handler.SetReady(false)
	if r := status("/readyz", nil); r.Status != http.StatusServiceUnavailable || r.ErrorBody(t).Error.Code != "not_ready" {
		t.Errorf("readyz when not ready = %d %s, want 503 not_ready", r.Status, r.Body)
	}
	srv.Handler.SetReady(true)
	if r := status("/readyz", nil); r.Status != http.StatusOK {
		t.Errorf("readyz when ready again = %d %s, want 200", r.Status, r.Body)
	}

	open := srv.OpenSSE(t, "/api/v1/sessions/s/events", nil)
	expectSSE(t, open, bus.TypeReady)
	srv.Handler.Drain()
	if r := status("/readyz", nil); r.Status != http.StatusServiceUnavailable || r.ErrorBody(t).Error.Code != "not_ready" {
		t.Errorf("readyz after Drain = %d %s, want 503 not_ready", r.Status, r.Body)
	}
	if r := status("/healthz", nil); r.Status != http.StatusOK {
		t.Errorf("healthz after Drain = %d %s, want 200: alive, not ready", r.Status, r.Body)
	}
	for _, tc := range []struct {
		path string
		h    http.Header
	}{
		{"/api/v1/sessions/s/events", nil},
		{"/api/v1/events", nil},
		{"/api/v1/sessions/s/ws", upgrade()},
	} {
		if r := status(tc.path, tc.h); r.Status != http.StatusServiceUnavailable || r.ErrorBody(t).Error.Code != "shutting_down" {
			t.Errorf("new stream %s after Drain = %d %s, want 503 shutting_down", tc.path, r.Status, r.Body)
		}
	}
	// Streams already open keep going until the daemon ends them.
	rep := srv.Publish(t, "s", ev("a:b", ""))
	if env := open.MustNext(t); env.ID != rep.LastID {
		t.Errorf("open stream after Drain got %s %d, want event %d", env.Type, env.ID, rep.LastID)
	}
}

// TestCreateSessionRefusesRingSizeOutOfRange pins SPEC §6: a ringSize
// outside 1…1,000,000 is a 400, an explicit 0 included (it is not "absent"),
// and no session is created; other sessions are unaffected.
func TestCreateSessionRefusesRingSizeOutOfRange(t *testing.T) {
	srv := newServer(t)
	createSession(t, srv, "other")
	for _, body := range []string{`{"id":"r","ringSize":0}`, `{"id":"r","ringSize":-1}`, `{"id":"r","ringSize":1000001}`} {
		r := srv.Do(t, http.MethodPost, "/api/v1/sessions", nil, []byte(body))
		var e wire.ErrorBody
		r.DecodeJSON(t, &e)
		if r.Status != http.StatusBadRequest || e.Error.Code != "invalid_ringSize" {
			t.Errorf("create %s = %d %s, want 400 invalid_ringSize", body, r.Status, r.Body)
		}
		if _, ok := srv.Hub.Session("r"); ok {
			t.Errorf("create %s made session r", body)
		}
	}
	if got := srv.Publish(t, "other", ev("a:b", "")); len(got.IDs) != 1 {
		t.Errorf("publish to other after the refusals = %+v, want one id", got)
	}
	r := srv.Do(t, http.MethodPost, "/api/v1/sessions", nil, []byte(`{"id":"r","ringSize":1}`))
	var info wire.SessionInfo
	decodeStrict(t, r, &info)
	if r.Status != http.StatusCreated || info.Ring.MaxCount != 1 {
		t.Errorf("create ringSize 1 = %d %s, want 201 with maxCount 1", r.Status, r.Body)
	}
}

// TestJSONBodiesRefuseTrailingData pins SPEC §6: anything but white space
// after a request's JSON value is a 400 (session create, ticket, publish),
// and nothing is created or published; white space after it is fine.
func TestJSONBodiesRefuseTrailingData(t *testing.T) {
	srv := newServer(t)
	createSession(t, srv, "other")
	for _, tail := range []string{"xyz", "}", "]", `{}`, `{"id":"b"}`, "null", "1"} {
		body := `{"id":"a"}` + tail
		r := srv.Do(t, http.MethodPost, "/api/v1/sessions", nil, []byte(body))
		var e wire.ErrorBody
		r.DecodeJSON(t, &e)
		if r.Status != http.StatusBadRequest || e.Error.Code != wire.CodeInvalidBody {
			t.Errorf("create %s = %d %s, want 400 %s", body, r.Status, r.Body, wire.CodeInvalidBody)
		}
		if _, ok := srv.Hub.Session("a"); ok {
			t.Fatalf("create %s made session a", body)
		}
		body = `{"path":"/api/v1/sessions/other/events"}` + tail
		if r := srv.Do(t, http.MethodPost, "/api/v1/tickets", nil, []byte(body)); r.Status != http.StatusBadRequest {
			t.Errorf("ticket %s = %d %s, want 400", body, r.Status, r.Body)
		}
		body = `{"type":"a:b","data":1}` + tail
		if r := srv.Do(t, http.MethodPost, "/api/v1/sessions/other/events", nil, []byte(body)); r.Status != http.StatusBadRequest {
			t.Errorf("publish %s = %d %s, want 400", body, r.Status, r.Body)
		}
	}
	if s, _ := srv.Hub.Session("other"); s.Bus.LastID() != 0 {
		t.Errorf("session other: last id %d after refused publishes, want 0", s.Bus.LastID())
	}
	r := srv.Do(t, http.MethodPost, "/api/v1/sessions", nil, []byte("{\"id\":\"a\"} \r\n\t"))
	if r.Status != http.StatusCreated {
		t.Errorf("create with trailing white space = %d %s, want 201", r.Status, r.Body)
	}
}
