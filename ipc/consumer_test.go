package ipc_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/ipc"
	"github.com/localbus/localbus/ipc/access"
	"github.com/localbus/localbus/ipc/ipctest"
	"github.com/localbus/localbus/ipc/wire"
)

// consumerPath is the session stream of id through consumer name, with
// more query parameters in kv.
func consumerPath(id, name string, ws bool, kv ...string) string {
	q := url.Values{wire.ParamConsumer: {name}}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	p := wire.SessionEventsPath(id)
	if ws {
		p = wire.SessionWSPath(id)
	}
	return p + "?" + q.Encode()
}

// consumerOf returns the consumer name of session id as the hub keeps it.
func consumerOf(t *testing.T, srv *ipctest.Server, id, name string) (hub.ConsumerInfo, bool) {
	t.Helper()
	s, ok := srv.Hub.Session(id)
	if !ok {
		t.Fatalf("no session %s", id)
	}
	for _, c := range s.Consumers().List(s.Bus.LastID(), s.Bus.Epoch()) {
		if c.Name == name {
			return c, true
		}
	}
	return hub.ConsumerInfo{}, false
}

// waitIdle waits until no stream reads consumer name of session id: its
// stream's end has stored it.
func waitIdle(t *testing.T, srv *ipctest.Server, id, name string) hub.ConsumerInfo {
	t.Helper()
	var c hub.ConsumerInfo
	bustest.Eventually(t, ipctest.Wait, "the consumer's stream to end", func() bool {
		var ok bool
		c, ok = consumerOf(t, srv, id, name)
		return ok && !c.Connected
	})
	return c
}

// TestAConsumerResumesWhereItsStreamStopped: the first stream creates the
// consumer (stream:ready says so, cursor 0: the whole ring); the next
// starts after what the first wrote (auto), whatever Last-Event-ID says.
func TestAConsumerResumesWhereItsStreamStopped(t *testing.T) {
	srv := newServer(t)
	srv.Publish(t, "s", ev("a:x", "1"), ev("a:x", "2"), ev("a:x", "3"))
	st := srv.OpenSSE(t, consumerPath("s", "svc", false), nil)
	got := expectSSE(t, st, "stream:ready", "a:x", "a:x", "a:x", "stream:replayed")
	rd := data[bus.ReadyData](t, got[0])
	if rd.Cursor == nil || *rd.Cursor != 0 || !cmp.Equal(rd.Consumer, &bus.ReadyConsumer{Name: "svc", AckedID: 0, Ack: "auto", Created: true}) {
		t.Errorf("stream:ready cursor %v consumer %+v", rd.Cursor, rd.Consumer)
	}
	st.Close()
	if c := waitIdle(t, srv, "s", "svc"); c.AckedID != 3 {
		t.Errorf("after the first stream the consumer is at %d, want 3", c.AckedID)
	}
	srv.Publish(t, "s", ev("a:x", "4"), ev("a:x", "5"))
	st = srv.OpenSSE(t, consumerPath("s", "svc", false), header(wire.HeaderLastEventID, "1"))
	got = expectSSE(t, st, "stream:ready", "a:x", "a:x", "stream:replayed")
	rd = data[bus.ReadyData](t, got[0])
	if rd.Cursor == nil || *rd.Cursor != 3 || !cmp.Equal(rd.Consumer, &bus.ReadyConsumer{Name: "svc", AckedID: 3, Ack: "auto"}) {
		t.Errorf("second stream:ready cursor %v consumer %+v", rd.Cursor, rd.Consumer)
	}
	if ids := bustest.IDs(got); !slices.Equal(ids, []uint64{4, 5}) {
		t.Errorf("second stream ids %v, want [4 5] (Last-Event-ID ignored)", ids)
	}
	// Live events move it too.
	srv.Publish(t, "s", ev("a:x", "6"))
	if e := st.MustNext(t); e.ID != 6 {
		t.Fatalf("live event %d, want 6", e.ID)
	}
	st.Close()
	if c := waitIdle(t, srv, "s", "svc"); c.AckedID != 6 || c.Pending != 0 {
		t.Errorf("after the second stream: %+v, want at 6 with nothing pending", c)
	}
}

// TestANewConsumerStartsAtSinceAndAnExistingOneRefusesIt: ?since= and
// ?sinceTime= place a new consumer; on an existing one they are a 409
// consumer_exists, and the other ack mode a 409 consumer_ack_mode.
func TestANewConsumerStartsAtSinceAndAnExistingOneRefusesIt(t *testing.T) {
	srv := newServer(t)
	srv.Publish(t, "s", ev("a:x", "1"), ev("a:x", "2"), ev("a:x", "3"))
	st := srv.OpenSSE(t, consumerPath("s", "late", false, wire.ParamSince, "2", wire.ParamAck, "explicit"), nil)
	got := expectSSE(t, st, "stream:ready", "a:x", "stream:replayed")
	if rd := data[bus.ReadyData](t, got[0]); *rd.Cursor != 2 || rd.Consumer.AckedID != 2 || rd.Consumer.Ack != "explicit" {
		t.Errorf("stream:ready %+v, consumer %+v", rd, rd.Consumer)
	}
	st.Close()
	st = srv.OpenSSE(t, consumerPath("s", "timed", false, wire.ParamSinceTime, "1h"), nil)
	expectSSE(t, st, "stream:ready", "a:x", "a:x", "a:x", "stream:replayed")
	st.Close()
	waitIdle(t, srv, "s", "late")
	for _, tc := range []struct {
		name, path string
		status     int
		code       string
	}{
		{"since on an existing one", consumerPath("s", "late", false, wire.ParamSince, "0"), http.StatusConflict, wire.CodeConsumerExists},
		{"sinceTime on an existing one", consumerPath("s", "late", true, wire.ParamSinceTime, "1h"), http.StatusConflict, wire.CodeConsumerExists},
		{"the other ack mode", consumerPath("s", "late", false, wire.ParamAck, "auto"), http.StatusConflict, wire.CodeConsumerAckMode},
		{"the other ack mode, ws", consumerPath("s", "timed", true, wire.ParamAck, "explicit"), http.StatusConflict, wire.CodeConsumerAckMode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if strings.Contains(tc.path, "/ws?") {
				h = header("Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
			}
			r := srv.Do(t, http.MethodGet, tc.path, h, nil)
			if e := r.ErrorBody(t); r.Status != tc.status || e.Error.Code != tc.code {
				t.Errorf("GET %s = %d %s, want %d %s", tc.path, r.Status, e.Error.Code, tc.status, tc.code)
			}
		})
	}
	// The refusals touched nothing.
	if c, _ := consumerOf(t, srv, "s", "late"); c.AckedID != 2 || c.Ack != hub.AckExplicit || c.Connected {
		t.Errorf("after the refusals: %+v", c)
	}
}

// TestConsumerParametersAreCheckedFirst: bad names, ack modes, and a
// consumer on a family or the global route are 400s, before any lookup
// (an unknown session is no 404), and leave the bus and its other streams
// as they were.
func TestConsumerParametersAreCheckedFirst(t *testing.T) {
	srv := newServer(t)
	srv.Publish(t, "s", ev("a:x", "1"))
	other := srv.OpenSSE(t, wire.SessionEventsPath("s"), nil)
	expectSSE(t, other, "stream:ready")
	long := strings.Repeat("n", 65)
	for _, tc := range []struct {
		name, path, code string
	}{
		{"dot", wire.SessionEventsPath("nope") + "?consumer=.", wire.CodeInvalidConsumer},
		{"dot dot", wire.SessionEventsPath("nope") + "?consumer=..", wire.CodeInvalidConsumer},
		{"65 characters", wire.SessionEventsPath("nope") + "?consumer=" + long, wire.CodeInvalidConsumer},
		{"empty", wire.SessionEventsPath("s") + "?consumer=", wire.CodeInvalidConsumer},
		{"slash", wire.SessionEventsPath("s") + "?consumer=a%2Fb", wire.CodeInvalidConsumer},
		{"twice", wire.SessionEventsPath("s") + "?consumer=a&consumer=b", "invalid_consumer"},
		{"bad ack", wire.SessionEventsPath("nope") + "?consumer=a&ack=sometimes", wire.CodeInvalidAck},
		{"ack alone", wire.SessionEventsPath("s") + "?ack=auto", wire.CodeInvalidAck},
		{"global", wire.PathEvents + "?consumer=a", wire.CodeInvalidConsumer},
		{"family", wire.FamilyEventsPath("a") + "?consumer=a", wire.CodeInvalidConsumer},
		{"bad since", wire.SessionEventsPath("nope") + "?consumer=a&since=-1", wire.CodeInvalidSince},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := srv.Do(t, http.MethodGet, tc.path, nil, nil)
			if e := r.ErrorBody(t); r.Status != http.StatusBadRequest || e.Error.Code != tc.code {
				t.Errorf("GET %s = %d %s (%s), want 400 %s", tc.path, r.Status, e.Error.Code, e.Error.Message, tc.code)
			}
		})
	}
	for _, ws := range []string{wire.PathEventsWS + "?consumer=a", wire.FamilyWSPath("a") + "?consumer=a"} {
		ctx, cancel := context.WithTimeout(context.Background(), ipctest.Wait)
		_, resp, err := srv.DialWS(ctx, ws, nil)
		cancel()
		if err == nil || resp == nil || resp.StatusCode != http.StatusBadRequest {
			t.Errorf("WebSocket %s: %v, %v; want a 400 before the upgrade", ws, err, resp)
		}
	}
	if s, _ := srv.Hub.Session("s"); s.Consumers().Len() != 0 {
		t.Errorf("the refusals created %d consumers", s.Consumers().Len())
	}
	srv.Publish(t, "s", ev("a:x", "2"))
	if e := other.MustNext(t); e.ID != 2 {
		t.Errorf("the other stream got %d, want 2", e.ID)
	}
}

// TestATakenOverStreamEndsForGood: a second stream naming the consumer
// takes it over; the first gets stream:closed replaced without retryMs
// and, on a WebSocket, close code 1000. The second starts after what the
// first wrote.
func TestATakenOverStreamEndsForGood(t *testing.T) {
	srv := newServer(t)
	srv.Publish(t, "s", ev("a:x", "1"), ev("a:x", "2"))
	first := srv.OpenWS(t, consumerPath("s", "svc", true), nil)
	for range 4 { // ready, 1, 2, replayed
		ipctest.MustReadEnvelope(t, first)
	}
	// Once 3 arrived, the writer has reported 2 (it wrote 3 after that).
	srv.Publish(t, "s", ev("a:x", "3"))
	if e := ipctest.MustReadEnvelope(t, first); e.ID != 3 {
		t.Fatalf("live event %d, want 3", e.ID)
	}
	sse := srv.OpenSSE(t, consumerPath("s", "svc", false), nil)
	ctx, cancel := context.WithTimeout(context.Background(), ipctest.Wait)
	defer cancel()
	msgs, code, err := ipctest.ReadUntilClose(ctx, first)
	if err != nil || code != websocket.StatusNormalClosure || len(msgs) != 1 {
		t.Fatalf("the first stream ended with %d messages, code %v, %v; want stream:closed and 1000", len(msgs), code, err)
	}
	var closed bus.Envelope
	if err := json.Unmarshal(msgs[0], &closed); err != nil || closed.Type != bus.TypeClosed || string(closed.Data) != `{"reason":"replaced"}` {
		t.Errorf("the first stream's last frame %s, want stream:closed {\"reason\":\"replaced\"}", msgs[0])
	}
	got := expectSSE(t, sse, "stream:ready")
	if rd := data[bus.ReadyData](t, got[0]); rd.Consumer.Created || *rd.Cursor < 2 || *rd.Cursor > 3 {
		t.Errorf("the second stream's stream:ready %+v: want it to start after what the first wrote, 2 or 3", rd.Consumer)
	}
	// The SSE stream is taken over in turn, by a WebSocket.
	ws := srv.OpenWS(t, consumerPath("s", "svc", true), nil)
	ipctest.MustReadEnvelope(t, ws)
	rest, err := sse.End(ctx)
	if err != nil || len(rest) == 0 || rest[len(rest)-1].Type != bus.TypeClosed {
		t.Fatalf("the SSE stream ended with %v, %v", bustest.Types(rest), err)
	}
	if cd := data[map[string]any](t, rest[len(rest)-1]); !cmp.Equal(cd, map[string]any{"reason": "replaced"}) {
		t.Errorf("SSE stream:closed %v, want reason replaced and no retryMs", cd)
	}
	if c, _ := consumerOf(t, srv, "s", "svc"); !c.Connected {
		t.Error("the consumer is not connected to the stream that took it over")
	}
}

// TestExplicitAcksOnTheWebSocket: {"op":"ack","id":N} is answered with
// {"op":"acked","id":N} once stored and moves the consumer; a lower id
// moves nothing, an id above lastId, a malformed one, or an ack on a
// stream without an explicit consumer is an error reply, and the stream
// goes on.
func TestExplicitAcksOnTheWebSocket(t *testing.T) {
	srv := newServer(t)
	srv.Publish(t, "s", ev("a:x", "1"), ev("a:x", "2"), ev("a:x", "3"))
	c := srv.OpenWS(t, consumerPath("s", "svc", true, wire.ParamAck, "explicit"), nil)
	for range 5 {
		ipctest.MustReadEnvelope(t, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), ipctest.Wait)
	defer cancel()
	exchange := func(msg string) string {
		t.Helper()
		if err := ipctest.WriteText(c, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		b, err := ipctest.ReadText(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, tc := range []struct{ send, want string }{
		{`{"op":"ack","id":2}`, `{"op":"acked","id":2}`},
		{`{"op":"ack","id":1}`, `{"op":"acked","id":2}`},
		{`{"op":"ack","id":4}`, `{"op":"error","message":"the id is above the session's lastId"}`},
		{`{"op":"ack","id":-1}`, `must be an event id`},
		{`{"op":"ack","id":"3"}`, `must be an event id`},
		{`{"op":"ack","id":2.5}`, `must be an event id`},
		{`{"op":"ack"}`, `missing \"id\"`},
		{`{"op":"ack","id":3,"types":["a:x"]}`, `ack takes no \"types\"`},
		{`{"op":"set","types":null,"id":3}`, `set takes no \"id\"`},
		{`{"op":"ack","id":3}`, `{"op":"acked","id":3}`},
	} {
		if got := exchange(tc.send); !strings.Contains(got, tc.want) {
			t.Errorf("%s answered %s, want %s", tc.send, got, tc.want)
		}
	}
	if got, _ := consumerOf(t, srv, "s", "svc"); got.AckedID != 3 {
		t.Errorf("the consumer is at %d, want 3", got.AckedID)
	}
	srv.Publish(t, "s", ev("a:x", "4"))
	if e := ipctest.MustReadEnvelope(t, c); e.ID != 4 {
		t.Errorf("after the acks the stream got %d, want 4", e.ID)
	}

	// An ack on a stream without a consumer, or an auto one.
	for _, path := range []string{wire.SessionWSPath("s"), consumerPath("s", "auto", true)} {
		o := srv.OpenWS(t, path, nil)
		ipctest.MustReadEnvelope(t, o)
		if err := ipctest.WriteText(o, []byte(`{"op":"ack","id":1}`)); err != nil {
			t.Fatal(err)
		}
		for {
			b, err := ipctest.ReadText(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(string(b), `{"op":`) {
				if !strings.HasPrefix(string(b), `{"op":"error"`) {
					t.Errorf("an ack on %s answered %s, want an error", path, b)
				}
				break
			}
		}
	}
}

// TestFilteredEventsMoveAnAutoConsumer: events the filter skips move the
// position of an auto consumer, so its next stream does not replay them.
func TestFilteredEventsMoveAnAutoConsumer(t *testing.T) {
	srv := newServer(t)
	srv.Publish(t, "s", ev("a:x", "1"), ev("b:y", "2"))
	st := srv.OpenSSE(t, consumerPath("s", "svc", false, wire.ParamTypes, "a:*"), nil)
	expectSSE(t, st, "stream:ready", "a:x", "stream:replayed")
	srv.Publish(t, "s", ev("b:y", "3"), ev("b:y", "4"), ev("a:x", "5"), ev("b:y", "6"))
	if e := st.MustNext(t); e.ID != 5 {
		t.Fatalf("live event %d, want 5", e.ID)
	}
	// A ping-free way to know the writer saw 6: publish one that matches.
	srv.Publish(t, "s", ev("a:x", "7"), ev("b:y", "8"))
	if e := st.MustNext(t); e.ID != 7 {
		t.Fatalf("live event %d, want 7", e.ID)
	}
	st.Close()
	if c := waitIdle(t, srv, "s", "svc"); c.AckedID < 7 {
		t.Errorf("the consumer is at %d, want at least 7", c.AckedID)
	}
	st = srv.OpenSSE(t, consumerPath("s", "svc", false, wire.ParamTypes, "a:*"), nil)
	got := expectSSE(t, st, "stream:ready", "stream:replayed")
	if rd := data[bus.ReadyData](t, got[0]); *rd.Cursor < 7 {
		t.Errorf("the next stream starts after %d, want at least 7", *rd.Cursor)
	}
}

// TestAConsumerWhoseIDLeftTheRingGetsAGap: the consumer's acknowledged id
// fell out of the ring: its stream starts with stream:gap ring_evicted.
func TestAConsumerWhoseIDLeftTheRingGetsAGap(t *testing.T) {
	srv := ipctest.New(t, ipctest.Options{Hub: hub.Options{AutoCreate: true, Limits: bus.Limits{RingSize: 3}}})
	srv.Publish(t, "s", ev("a:x", "1"))
	st := srv.OpenSSE(t, consumerPath("s", "svc", false, wire.ParamAck, "explicit"), nil)
	expectSSE(t, st, "stream:ready", "a:x", "stream:replayed")
	st.Close()
	waitIdle(t, srv, "s", "svc")
	for range 5 {
		srv.Publish(t, "s", ev("a:x", "0"))
	}
	st = srv.OpenSSE(t, consumerPath("s", "svc", false), nil)
	got := expectSSE(t, st, "stream:ready", "stream:gap", "a:x", "a:x", "a:x", "stream:replayed")
	if gd := data[bus.GapData](t, got[1]); gd.Reason != bus.GapRingEvicted || gd.LastDeliveredID != 0 || *gd.EarliestAvailableID != 4 {
		t.Errorf("stream:gap %+v", gd)
	}
}

// TestConsumerLimitIs429: max_consumers refuses one more consumer with 429
// consumer_limit; a stream of an existing consumer is still served.
func TestConsumerLimitIs429(t *testing.T) {
	srv := ipctest.New(t, ipctest.Options{Hub: hub.Options{AutoCreate: true, MaxConsumers: 2}})
	srv.Publish(t, "s", ev("a:x", "1"))
	for _, name := range []string{"a", "b"} {
		st := srv.OpenSSE(t, consumerPath("s", name, false), nil)
		expectSSE(t, st, "stream:ready")
		st.Close()
	}
	r := srv.Do(t, http.MethodGet, consumerPath("s", "c", false), nil, nil)
	if e := r.ErrorBody(t); r.Status != http.StatusTooManyRequests || e.Error.Code != wire.CodeConsumerLimit {
		t.Errorf("a third consumer = %d %s, want 429 consumer_limit", r.Status, e.Error.Code)
	}
	st := srv.OpenSSE(t, consumerPath("s", "a", false), nil)
	expectSSE(t, st, "stream:ready")
}

// TestSubscribersNameTheirConsumer: GET …/subscribers shows the consumer
// a stream reads through.
func TestSubscribersNameTheirConsumer(t *testing.T) {
	srv := newServer(t)
	srv.Publish(t, "s", ev("a:x", "1"))
	st := srv.OpenSSE(t, consumerPath("s", "svc", false), nil)
	expectSSE(t, st, "stream:ready")
	plain := srv.OpenSSE(t, wire.SessionEventsPath("s"), nil)
	expectSSE(t, plain, "stream:ready")
	var l wire.SubscriberList
	srv.Do(t, http.MethodGet, wire.SessionSubscribersPath("s"), nil, nil).DecodeJSON(t, &l)
	var names []string
	for _, s := range l.Subscribers {
		if s.Consumer == nil {
			names = append(names, "")
		} else {
			names = append(names, *s.Consumer)
		}
	}
	if !slices.Equal(names, []string{"svc", ""}) {
		t.Errorf("subscribers' consumers %q, want [svc \"\"]", names)
	}
}

// memJournal keeps buses in memory and sessions' consumers in a map, and
// counts the consumers' stores: a hub.Journal with consumers, for tests
// of how often a stream stores its consumer.
type memJournal struct {
	mu    sync.Mutex
	puts  int
	last  map[string]hub.ConsumerState
	delay time.Duration // each store takes this long, like a synced write
}

func (j *memJournal) Sessions() []string { return nil }

func (j *memJournal) OpenBus(string, int) (bus.Store, string, int, error) {
	return bus.NewRing(bus.DefaultRingSize, bus.DefaultRingMaxBytes), "", 0, nil
}

func (j *memJournal) Delete(string) error { return nil }

func (j *memJournal) SessionConsumers(string) ([]hub.ConsumerState, hub.ConsumerStore, error) {
	return nil, j, nil
}

func (j *memJournal) PutConsumer(c hub.ConsumerState) error {
	time.Sleep(j.delay) // a stand-in for the disk, not synchronisation
	j.mu.Lock()
	defer j.mu.Unlock()
	j.puts++
	j.last[c.Name] = c
	return nil
}

func (j *memJournal) DeleteConsumer(string) error { return nil }

func (j *memJournal) stored(name string) (int, hub.ConsumerState) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.puts, j.last[name]
}

// TestAnAutoConsumerIsStoredAtMostOnceASecond: while its stream writes
// event after event, an auto consumer's position is stored within about a
// second, and never more than once a second; its end stores it once
// more.
func TestAnAutoConsumerIsStoredAtMostOnceASecond(t *testing.T) {
	j := &memJournal{last: map[string]hub.ConsumerState{}}
	srv := ipctest.New(t, ipctest.Options{Hub: hub.Options{AutoCreate: true, Journal: j}})
	srv.Publish(t, "s", ev("a:x", "0"))
	opened := time.Now()
	st := srv.OpenSSE(t, consumerPath("s", "svc", false), nil)
	expectSSE(t, st, "stream:ready", "a:x", "stream:replayed")
	created, _ := j.stored("svc")
	var last uint64
	publish := func() {
		last = srv.Publish(t, "s", ev("a:x", "1")).LastID
		if e := st.MustNext(t); e.ID != last {
			t.Fatalf("live event %d, want %d", e.ID, last)
		}
	}
	// Stored while the stream runs: within a second or so of a write.
	bustest.Eventually(t, 10*time.Second, "the position to be stored while the stream runs", func() bool {
		publish()
		_, c := j.stored("svc")
		return c.AckedID > 1
	})
	// Keep writing for a while longer.
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); {
		publish()
	}
	puts, _ := j.stored("svc")
	elapsed := time.Since(opened)
	// The first store waits a second after the first write, and each
	// next one a second after the one before.
	if max := int(elapsed / time.Second); puts-created > max {
		t.Errorf("%d stores in %v of writing, want at most %d (one a second)", puts-created, elapsed, max)
	}
	st.Close()
	waitIdle(t, srv, "s", "svc")
	if n, c := j.stored("svc"); n-puts != 1 || c.AckedID != last {
		t.Errorf("the stream's end stored %d times, at %d; want once, at %d", n-puts, c.AckedID, last)
	}
}

// TestConsumerRoutes: GET …/consumers lists them with their position and
// what is pending; POST …/ack acknowledges an explicit one (once stored),
// refuses another epoch, an auto consumer, an id above lastId, bad bodies
// and unknown consumers; DELETE forgets one and replaces its stream.
func TestConsumerRoutes(t *testing.T) {
	srv := newServer(t)
	srv.Publish(t, "s", ev("a:x", "1"), ev("a:x", "2"), ev("a:x", "3"))
	ex := srv.OpenSSE(t, consumerPath("s", "backup", false, wire.ParamAck, "explicit"), nil)
	got := expectSSE(t, ex, "stream:ready", "a:x", "a:x", "a:x", "stream:replayed")
	epoch := data[bus.ReadyData](t, got[0]).Epoch
	auto := srv.OpenSSE(t, consumerPath("s", "tail", false, wire.ParamSince, "3"), nil)
	expectSSE(t, auto, "stream:ready", "stream:replayed")
	auto.Close()
	waitIdle(t, srv, "s", "tail")

	ack := func(name, body string) *ipctest.Response {
		return srv.Do(t, http.MethodPost, wire.ConsumerAckPath("s", name), header("Content-Type", "application/json"), []byte(body))
	}
	r := ack("backup", `{"id":2,"epoch":"`+epoch+`"}`)
	var reply wire.AckReply
	if r.Status != http.StatusOK {
		t.Fatalf("ack = %d %s", r.Status, r.Body)
	}
	r.DecodeJSON(t, &reply)
	if reply != (wire.AckReply{Name: "backup", AckedID: 2}) {
		t.Errorf("ack reply %+v", reply)
	}
	if r := ack("backup", `{"id":1}`); r.Status != http.StatusOK || !strings.Contains(string(r.Body), `"ackedId":2`) {
		t.Errorf("a lower ack = %d %s, want 200 at 2", r.Status, r.Body)
	}
	for _, tc := range []struct {
		name, consumer, body string
		status               int
		code                 string
	}{
		{"another epoch", "backup", `{"id":3,"epoch":"before-the-restart"}`, http.StatusConflict, wire.CodeEpochMismatch},
		{"auto", "tail", `{"id":3}`, http.StatusConflict, wire.CodeConsumerNotExplicit},
		{"above lastId", "backup", `{"id":4}`, http.StatusBadRequest, wire.CodeInvalidID},
		{"negative", "backup", `{"id":-1}`, http.StatusBadRequest, wire.CodeInvalidID},
		{"a string", "backup", `{"id":"3"}`, http.StatusBadRequest, wire.CodeInvalidID},
		{"a fraction", "backup", `{"id":2.5}`, http.StatusBadRequest, wire.CodeInvalidID},
		{"past 2^53", "backup", `{"id":9007199254740992}`, http.StatusBadRequest, wire.CodeInvalidID},
		{"no id", "backup", `{"epoch":"x"}`, http.StatusBadRequest, wire.CodeInvalidID},
		{"an empty epoch", "backup", `{"id":3,"epoch":""}`, http.StatusBadRequest, wire.CodeInvalidBody},
		{"unknown field", "backup", `{"id":3,"force":true}`, http.StatusBadRequest, wire.CodeInvalidBody},
		{"trailing", "backup", `{"id":3}x`, http.StatusBadRequest, wire.CodeInvalidBody},
		{"unknown consumer", "nope", `{"id":3}`, http.StatusNotFound, wire.CodeNotFound},
		// "." and ".." are dot segments in a path, which clients and the
		// router's mux resolve before any route sees them; the stream's
		// ?consumer= refuses them (TestConsumerParametersAreCheckedFirst).
		{"dash first", "-x", `{"id":3}`, http.StatusBadRequest, wire.CodeInvalidConsumer},
		{"65 characters", strings.Repeat("n", 65), `{"id":3}`, http.StatusBadRequest, wire.CodeInvalidConsumer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ack(tc.consumer, tc.body)
			if e := r.ErrorBody(t); r.Status != tc.status || e.Error.Code != tc.code {
				t.Errorf("ack %s %s = %d %s (%s), want %d %s", tc.consumer, tc.body, r.Status, e.Error.Code, e.Error.Message, tc.status, tc.code)
			}
		})
	}
	// A bad name on an unknown session is a 400, not a 404.
	r = srv.Do(t, http.MethodPost, wire.ConsumerAckPath("nope", "-x"), nil, []byte(`{"id":1}`))
	if r.Status != http.StatusBadRequest {
		t.Errorf("a bad name on an unknown session = %d, want 400", r.Status)
	}
	if r := srv.Do(t, http.MethodPost, wire.ConsumerAckPath("nope", "x"), nil, []byte(`{"id":1}`)); r.Status != http.StatusNotFound {
		t.Errorf("an ack on an unknown session = %d, want 404", r.Status)
	}

	var list []wire.Consumer
	srv.Do(t, http.MethodGet, wire.SessionConsumersPath("s"), nil, nil).DecodeJSON(t, &list)
	for i := range list {
		if list[i].LastActive.IsZero() {
			t.Errorf("%s: lastActive is zero", list[i].Name)
		}
		list[i].LastActive = time.Time{}
	}
	want := []wire.Consumer{
		{Name: "backup", AckedID: 2, Pending: 1, Ack: "explicit", Connected: true, Epoch: epoch},
		{Name: "tail", AckedID: 3, Pending: 0, Ack: "auto", Connected: false, Epoch: epoch},
	}
	if diff := cmp.Diff(want, list); diff != "" {
		t.Errorf("GET consumers (-want +got):\n%s", diff)
	}
	if r := srv.Do(t, http.MethodGet, wire.SessionConsumersPath("nope"), nil, nil); r.Status != http.StatusNotFound {
		t.Errorf("GET consumers of an unknown session = %d", r.Status)
	}

	// DELETE replaces the live stream and forgets the consumer.
	if r := srv.Do(t, http.MethodDelete, wire.ConsumerPath("s", "backup"), nil, nil); r.Status != http.StatusNoContent {
		t.Fatalf("DELETE = %d %s", r.Status, r.Body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), ipctest.Wait)
	defer cancel()
	rest, err := ex.End(ctx)
	if err != nil || len(rest) != 1 || rest[0].Type != bus.TypeClosed || string(rest[0].Data) != `{"reason":"replaced"}` {
		t.Errorf("the deleted consumer's stream ended with %v %+v, %v", bustest.Types(rest), rest, err)
	}
	if r := srv.Do(t, http.MethodDelete, wire.ConsumerPath("s", "backup"), nil, nil); r.Status != http.StatusNotFound {
		t.Errorf("DELETE again = %d, want 404", r.Status)
	}
	if r := ack("backup", `{"id":3}`); r.Status != http.StatusNotFound {
		t.Errorf("an ack of a deleted consumer = %d, want 404", r.Status)
	}
	// The name starts again from the whole ring.
	st := srv.OpenSSE(t, consumerPath("s", "backup", false), nil)
	if rd := data[bus.ReadyData](t, expectSSE(t, st, "stream:ready", "a:x", "a:x", "a:x", "stream:replayed")[0]); !rd.Consumer.Created {
		t.Error("a consumer made again under a deleted one's name is not new")
	}
}

// TestDeletingAConsumerNeedsAdmin: a reader may list and acknowledge, not
// forget.
func TestDeletingAConsumerNeedsAdmin(t *testing.T) {
	reader := func(*http.Request) (ipc.Caller, error) {
		return ipc.Caller{Authenticated: true, Scopes: access.NewScopes(access.Read, access.Publish)}, nil
	}
	srv := ipctest.New(t, ipctest.Options{Hub: hubOpts(), Handler: ipc.Options{Settings: ipc.Settings{Authenticate: reader}}})
	srv.Publish(t, "s", ev("a:x", "1"))
	st := srv.OpenSSE(t, consumerPath("s", "svc", false), nil)
	expectSSE(t, st, "stream:ready")
	if r := srv.Do(t, http.MethodGet, wire.SessionConsumersPath("s"), nil, nil); r.Status != http.StatusOK {
		t.Errorf("GET consumers as a reader = %d", r.Status)
	}
	r := srv.Do(t, http.MethodDelete, wire.ConsumerPath("s", "svc"), nil, nil)
	if e := r.ErrorBody(t); r.Status != http.StatusForbidden || e.Error.Code != wire.CodeForbidden {
		t.Errorf("DELETE as a reader = %d %s, want 403", r.Status, e.Error.Code)
	}
	if c, ok := consumerOf(t, srv, "s", "svc"); !ok || !c.Connected {
		t.Error("a refused DELETE touched the consumer")
	}
}

// TestDeletingTheSessionDeletesItsConsumers: the session created again
// under the same id has none.
func TestDeletingTheSessionDeletesItsConsumers(t *testing.T) {
	srv := newServer(t)
	srv.Publish(t, "s", ev("a:x", "1"))
	st := srv.OpenSSE(t, consumerPath("s", "svc", false), nil)
	expectSSE(t, st, "stream:ready")
	if r := srv.Do(t, http.MethodDelete, wire.SessionPath("s"), nil, nil); r.Status != http.StatusNoContent {
		t.Fatalf("DELETE session = %d", r.Status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), ipctest.Wait)
	defer cancel()
	if rest, err := st.End(ctx); err != nil || rest[len(rest)-1].Type != bus.TypeClosed {
		t.Fatalf("the stream ended with %v, %v", bustest.Types(rest), err)
	}
	srv.Publish(t, "s", ev("a:x", "1"))
	var list []wire.Consumer
	srv.Do(t, http.MethodGet, wire.SessionConsumersPath("s"), nil, nil).DecodeJSON(t, &list)
	if len(list) != 0 {
		t.Errorf("the session made again has consumers %+v", list)
	}
}

// TestAClientThatAcksEveryEventInOneLoopIsNeverStuck: a client that reads
// and acknowledges in one loop, an ack per event without waiting for the
// answers, stops reading whenever its socket cannot take another ack;
// stores slower than the events pile acks up. The stream still delivers
// every event and answers up to the last ack (acks that arrive during a
// store share the next one).
func TestAClientThatAcksEveryEventInOneLoopIsNeverStuck(t *testing.T) {
	j := &memJournal{last: map[string]hub.ConsumerState{}, delay: 5 * time.Millisecond}
	srv := ipctest.New(t, ipctest.Options{Hub: hub.Options{AutoCreate: true, Journal: j}})
	srv.Publish(t, "s", ev("a:x", "0"))
	c := srv.OpenWS(t, consumerPath("s", "svc", true, wire.ParamAck, "explicit"), nil)
	const batches, per = 100, 50
	// The publisher keeps within two batches of what the client has seen,
	// under the stream's queue limit: an eviction as lagged is not what
	// this test is about.
	var (
		mu      sync.Mutex
		moved   = sync.NewCond(&mu)
		seenNow uint64
		done    bool
	)
	defer func() {
		mu.Lock()
		done = true
		moved.Broadcast()
		mu.Unlock()
	}()
	published := make(chan error, 1)
	go func() {
		events := make([]ipctest.Event, per)
		for i := range events {
			events[i] = ev("a:x", strconv.Itoa(i))
		}
		for b := range batches {
			mu.Lock()
			for !done && seenNow+2*per < uint64(b*per) {
				moved.Wait()
			}
			mu.Unlock()
			if _, err := srv.TryPublish(context.Background(), "s", nil, events...); err != nil {
				published <- err
				return
			}
		}
		published <- nil
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const last = 1 + batches*per
	var answered, seen uint64
	for answered < last {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v; %d events seen, acks answered up to %d", err, seen, answered)
		}
		if strings.HasPrefix(string(b), `{"op":`) {
			var r struct {
				Op string
				ID uint64
			}
			if json.Unmarshal(b, &r) != nil || r.Op != "acked" || r.ID < answered {
				t.Fatalf("reply %s after acked %d", b, answered)
			}
			answered = r.ID
			continue
		}
		var env bus.Envelope
		if err := json.Unmarshal(b, &env); err != nil {
			t.Fatal(err)
		}
		if env.ID == 0 {
			continue
		}
		if env.ID != seen+1 {
			t.Fatalf("event %d after %d", env.ID, seen)
		}
		seen = env.ID
		mu.Lock()
		seenNow = seen
		moved.Broadcast()
		mu.Unlock()
		if err := c.Write(ctx, websocket.MessageText, []byte(`{"op":"ack","id":`+strconv.FormatUint(env.ID, 10)+`}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	if puts, st := j.stored("svc"); st.AckedID != last || puts >= last {
		t.Errorf("stored %d in %d stores; want %d, in fewer stores than acks", st.AckedID, puts, last)
	}
}
