package bus_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
)

// mirrored is an event mirrored in from node a's session s1, origin id id,
// recording the loss of origin ids from..to before it (from 0 for none).
func mirrored(typ string, id, from, to uint64) bus.Event {
	e := ev(typ, `{}`)
	e.Origin = &bus.RemoteOrigin{Node: "a", Session: "s1", ID: id, Epoch: "e1", LostFrom: from, LostTo: to}
	return e
}

const lostGap = `stream:gap {earliestAvailableId:%d,lastDeliveredId:%d,lastId:%d,originFrom:%d,originTo:%d,reason:"upstream_lost"}`

// TestUpstreamLostGapLive: a live reader gets stream:gap (upstream_lost)
// just before the event that records the loss, whatever its filter, with
// its own cursor as lastDeliveredId; events without a loss bring none.
func TestUpstreamLostGapLive(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("a.s1")})
	publish(t, b, mirrored("a:x", 1, 0, 0))
	all := subscribe(t, b, bus.SubscribeOptions{})
	filtered := subscribe(t, b, bus.SubscribeOptions{Filter: mustFilter(t, "b:*")})
	take(t, all)
	take(t, filtered)
	publish(t, b, mirrored("a:x", 2, 0, 0), mirrored("a:x", 9, 3, 8), mirrored("a:x", 10, 0, 0))

	envs, _ := take(t, all)
	want := []string{"a:x#2", sprintf(lostGap, 3, 2, 4, 3, 8), "a:x#3", "a:x#4"}
	if diff := cmp.Diff(want, summary(t, envs)); diff != "" {
		t.Errorf("unfiltered reader (-want +got):\n%s", diff)
	}
	envs, _ = take(t, filtered)
	want = []string{sprintf(lostGap, 3, 1, 4, 3, 8)}
	if diff := cmp.Diff(want, summary(t, envs)); diff != "" {
		t.Errorf("reader filtering the event out (-want +got):\n%s", diff)
	}
	if got := b.Stats().GapUpstreamLost; got != 2 {
		t.Errorf("GapUpstreamLost = %d, want 2", got)
	}
}

// TestUpstreamLostGapOnReplay: a reader resuming from before the event
// gets the gap just before it in the replay; one resuming at or after it
// gets none.
func TestUpstreamLostGapOnReplay(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("a.s1")})
	publish(t, b, mirrored("a:x", 1, 0, 0), mirrored("a:x", 2, 0, 0), mirrored("a:x", 7, 3, 6), mirrored("a:x", 8, 0, 0))

	envs, _ := take(t, subscribe(t, b, bus.SubscribeOptions{Cursor: ptr[uint64](1)}))
	want := []string{
		`stream:ready {cursor:1,earliestId:1,epoch:"e0",lastId:4,maxQueued:256,types:null}`,
		"a:x#2", sprintf(lostGap, 3, 2, 4, 3, 6), "a:x#3", "a:x#4",
		`stream:replayed {lastReplayedEventId:4,replayedCount:3}`,
	}
	if diff := cmp.Diff(want, summary(t, envs)); diff != "" {
		t.Errorf("resuming before the loss (-want +got):\n%s", diff)
	}
	envs, _ = take(t, subscribe(t, b, bus.SubscribeOptions{Cursor: ptr[uint64](3)}))
	want = []string{
		`stream:ready {cursor:3,earliestId:1,epoch:"e0",lastId:4,maxQueued:256,types:null}`,
		"a:x#4", `stream:replayed {lastReplayedEventId:4,replayedCount:1}`,
	}
	if diff := cmp.Diff(want, summary(t, envs)); diff != "" {
		t.Errorf("resuming after the loss (-want +got):\n%s", diff)
	}
	// A new epoch: nothing of this sequence was delivered.
	envs, _ = take(t, subscribe(t, b, bus.SubscribeOptions{Cursor: ptr[uint64](2), Epoch: "old"}))
	if got := summary(t, envs)[4]; got != sprintf(lostGap, 3, 2, 4, 3, 6) {
		t.Errorf("after epoch_reset and two events, got %s", got)
	}
}

// TestLostIsInTheEnvelopeAndSurvivesARebuild: the loss is part of the
// event's envelope (origin.lostFrom, origin.lostTo), so a frame a journal
// rebuilds from the envelope (NewFrame, ParseFrame) carries it, and so
// does the global bus's copy, live and rebuilt.
func TestLostIsInTheEnvelopeAndSurvivesARebuild(t *testing.T) {
	t.Parallel()
	session, global := newBusPair(t)
	frames, err := session.PublishFrames(nil, mirrored("a:x", 9, 3, 8))
	if err != nil {
		t.Fatal(err)
	}
	sub := subscribe(t, global, bus.SubscribeOptions{})
	sub.Take(nil) // stream:ready
	if _, _, err := global.PublishCopies(bus.Copies{From: session, Frames: frames}); err != nil {
		t.Fatalf("PublishCopies: %v", err)
	}
	got, _ := sub.Take(nil)
	if len(got) != 2 || got[0].Type != bus.TypeGap {
		t.Fatalf("global bus delivered %d frames, want the gap and the copy", len(got))
	}
	sf, gf := frames[0], got[1]
	want := bus.Lost{From: 3, To: 8}
	for name, f := range map[string]*bus.Frame{
		"session frame": sf,
		"global copy":   gf,
		"NewFrame":      bus.NewFrame(sf.ID, sf.Type, sf.JSON()),
		"NewFrame copy": bus.NewFrame(gf.ID, gf.Type, gf.JSON()),
	} {
		if l, ok := f.Lost(); !ok || l != want {
			t.Errorf("%s: Lost() = %v, %v; want %v (envelope %s)", name, l, ok, want, f.JSON())
		}
	}
	if _, ok := gf.CopyOf(); !ok {
		t.Error("the copy lost its CopyOf")
	}
	pf, err := bus.ParseFrame(sf.JSON())
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := pf.Lost(); !ok || l != want {
		t.Errorf("ParseFrame: Lost() = %v, %v", l, ok)
	}
	env := string(sf.JSON())
	if wantTail := `"origin":{"node":"a","session":"s1","id":9,"epoch":"e1","lostFrom":3,"lostTo":8}}`; env[len(env)-len(wantTail):] != wantTail {
		t.Errorf("envelope %s, want it to end with %s", env, wantTail)
	}
}

// TestLostIsReadOnlyFromTheOrigin: nothing but an origin's lostFrom and
// lostTo records a loss: not data that looks like them, not an origin
// without them, not a reserved frame.
func TestLostIsReadOnlyFromTheOrigin(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s")})
	frames, err := b.PublishFrames(nil,
		ev("a:x", `{"origin":{"lostFrom":1,"lostTo":2}}`),
		bus.Event{Type: bustest.Type("a:x"), Data: []byte(`{}`), Originator: `,"lostFrom":1,"lostTo":2}}`},
		mirrored("a:x", 5, 0, 0),
	)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range frames {
		for _, g := range []*bus.Frame{f, bus.NewFrame(f.ID, f.Type, f.JSON())} {
			if l, ok := g.Lost(); ok {
				t.Errorf("event %d (%s): Lost() = %v", g.ID, g.JSON(), l)
			}
		}
	}
	for _, env := range []string{
		`{"id":1,"v":1,"type":"a:x","data":null,"origin":{"lostFrom":0,"lostTo":2}}`,
		`{"id":1,"v":1,"type":"a:x","data":null,"origin":{"lostFrom":3,"lostTo":2}}`,
		`{"id":1,"v":1,"type":"a:x","data":null,"origin":{"lostFrom":03,"lostTo":4}}`,
		`{"id":1,"v":1,"type":"a:x","data":null,"origin":{"xlostFrom":3,"lostTo":4}}`,
		`{"id":1,"v":1,"type":"a:x","data":null,"origin":{"lostTo":4}}`,
		`,"lostTo":4}}`,
		`}}`,
	} {
		if l, ok := bus.NewFrame(1, "a:x", []byte(env)).Lost(); ok {
			t.Errorf("NewFrame(%s).Lost() = %v", env, l)
		}
	}
	if l, ok := bus.NewFrame(0, "stream:gap", []byte(`{"v":1,"type":"stream:gap","data":{"x":{"lostFrom":1,"lostTo":2}}}`)).Lost(); ok {
		t.Errorf("reserved frame: Lost() = %v", l)
	}
}

// TestLostMustPrecedeTheOriginID: a loss that does not end before the
// event's origin id is refused like any bad input, burning no id.
func TestLostMustPrecedeTheOriginID(t *testing.T) {
	t.Parallel()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s")})
	for _, e := range []bus.Event{mirrored("a:x", 5, 3, 5), mirrored("a:x", 5, 4, 3)} {
		if _, _, err := b.Publish(e); !bus.IsInputError(err) {
			t.Errorf("Publish(lost %d..%d before %d) = %v, want an input error", e.Origin.LostFrom, e.Origin.LostTo, e.Origin.ID, err)
		}
	}
	if got := b.Stats().LastID; got != 0 {
		t.Errorf("lastId = %d, want 0", got)
	}
}
