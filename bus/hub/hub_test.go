package hub_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newHub(t *testing.T, opts hub.Options) *hub.Hub {
	t.Helper()
	h, err := hub.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

func subscribe(t *testing.T, b *bus.Bus, opts bus.SubscribeOptions) *bus.Subscription {
	t.Helper()
	s, err := b.Subscribe(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func ev(typ string, data any) bus.Event {
	b, _ := json.Marshal(data)
	return bus.Event{Type: bustest.Type(typ), Data: b}
}

func TestPublishLandsOnTheGlobalBusWithSessionAndSeq(t *testing.T) {
	h := newHub(t, hub.Options{AutoCreate: true})
	g := subscribe(t, h.Global(), bus.SubscribeOptions{})
	first, last, err := h.Publish(bustest.SessionID("s1"), []bus.Event{ev("build:step", 1), ev("build:done", 2)})
	if err != nil || first != 1 || last != 2 {
		t.Fatalf("Publish = %d, %d, %v; want 1, 2, nil", first, last, err)
	}
	envs, _ := bustest.Collect(t, g, 4, 5*time.Second)
	// stream:ready, localbus:session-opened, then the two events.
	if got := bustest.Types(envs); fmt.Sprint(got) != "[stream:ready localbus:session-opened build:step build:done]" {
		t.Fatalf("global types = %v", got)
	}
	for i, e := range envs[2:] {
		if e.Session != "s1" || e.Seq != uint64(i+1) {
			t.Errorf("global event %d: session %q seq %d, want s1 %d", i, e.Session, e.Seq, i+1)
		}
	}
	if envs[3].ID != envs[2].ID+1 {
		t.Errorf("global ids %d, %d not consecutive", envs[2].ID, envs[3].ID)
	}
}

func TestGlobalBusKeepsEachSessionInSeqOrderUnderConcurrentPublishers(t *testing.T) {
	h := newHub(t, hub.Options{AutoCreate: true, Limits: bus.Limits{MaxQueued: 2048, MaxQueuedBytes: 64 << 20}})
	g := subscribe(t, h.Global(), bus.SubscribeOptions{Filter: mustFilter(t, "n:*"), MaxQueued: 2048})
	const sessions, perSession = 4, 100
	var wg sync.WaitGroup
	for s := range sessions {
		wg.Go(func() {
			for i := range perSession {
				if _, _, err := h.Publish(bustest.SessionID(fmt.Sprintf("s%d", s)), []bus.Event{ev("n:x", i)}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	envs, _ := bustest.Collect(t, g, 1+sessions*perSession, 10*time.Second)
	lastSeq := map[string]uint64{}
	for _, e := range envs[1:] {
		if e.Seq != lastSeq[e.Session]+1 {
			t.Fatalf("session %s: seq %d after %d", e.Session, e.Seq, lastSeq[e.Session])
		}
		lastSeq[e.Session] = e.Seq
	}
}

func mustFilter(t *testing.T, s string) *bus.Filter {
	t.Helper()
	f, err := bus.ParseFilter(s)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestCreateAndDeleteAnnounceOnTheGlobalBus(t *testing.T) {
	h := newHub(t, hub.Options{})
	g := subscribe(t, h.Global(), bus.SubscribeOptions{})
	if _, err := h.Create(bustest.SessionID("a"), 0); err != nil {
		t.Fatal(err)
	}
	if err := h.Delete("a"); err != nil {
		t.Fatal(err)
	}
	envs, _ := bustest.Collect(t, g, 3, 5*time.Second)
	if got := fmt.Sprint(bustest.Types(envs)); got != "[stream:ready localbus:session-opened localbus:session-closed]" {
		t.Fatalf("types = %s", got)
	}
	for _, e := range envs[1:] {
		d := bustest.Data[struct{ Session string }](t, e)
		if d.Session != "a" {
			t.Errorf("%s data session = %q, want a", e.Type, d.Session)
		}
	}
}

func TestCreateRefusals(t *testing.T) {
	h := newHub(t, hub.Options{MaxSessions: 1})
	if _, err := h.Create(bustest.SessionID("a"), 0); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		id       string
		ringSize int
		want     error
		input    bool
	}{
		{"exists", "a", 0, hub.ErrExists, false},
		{"limit", "b", 0, hub.ErrSessionLimit, false},
		{"ring too big", "c", bus.MaxRingSize + 1, nil, true},
		{"negative ring", "c", -1, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.Create(bustest.SessionID(tt.id), tt.ringSize)
			if tt.input {
				if !bus.IsInputError(err) {
					t.Fatalf("Create(%q, %d) = %v, want an input error", tt.id, tt.ringSize, err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Create(%q) = %v, want %v", tt.id, err, tt.want)
			}
		})
	}
	if h.Len() != 1 {
		t.Errorf("Len = %d after refusals, want 1", h.Len())
	}
}

func TestPublishToMissingSession(t *testing.T) {
	t.Run("auto-create off is not found", func(t *testing.T) {
		h := newHub(t, hub.Options{})
		if _, _, err := h.Publish(bustest.SessionID("nope"), []bus.Event{ev("a:b", 1)}); !errors.Is(err, hub.ErrNotFound) {
			t.Fatalf("Publish = %v, want ErrNotFound", err)
		}
	})
	t.Run("a refused batch creates nothing", func(t *testing.T) {
		h := newHub(t, hub.Options{AutoCreate: true})
		g := subscribe(t, h.Global(), bus.SubscribeOptions{})
		_, _, err := h.Publish(bustest.SessionID("new"), []bus.Event{ev("a:b", 1), {Type: bustest.Type("a:b"), Data: []byte("{")}})
		if !bus.IsInputError(err) {
			t.Fatalf("Publish = %v, want an input error", err)
		}
		if _, ok := h.Session("new"); ok {
			t.Error("a refused batch created the session")
		}
		if envs, _ := bustest.Drain(t, g); len(envs) != 1 {
			t.Errorf("global bus got %v, want only stream:ready", bustest.Types(envs))
		}
	})
	t.Run("deleted session is not found", func(t *testing.T) {
		h := newHub(t, hub.Options{})
		h.Create(bustest.SessionID("d"), 0)
		h.Delete("d")
		if err := h.Delete("d"); !errors.Is(err, hub.ErrNotFound) {
			t.Fatalf("second Delete = %v, want ErrNotFound", err)
		}
	})
}

func TestDeleteEndsStreamsWithSessionDeleted(t *testing.T) {
	h := newHub(t, hub.Options{})
	s, _ := h.Create(bustest.SessionID("a"), 0)
	sub := subscribe(t, s.Bus, bus.SubscribeOptions{})
	h.Delete("a")
	envs := bustest.CollectEnd(t, sub, 5*time.Second)
	last := envs[len(envs)-1]
	if last.Type != bus.TypeClosed || bustest.Data[bus.ClosedData](t, last).Reason != "session_deleted" {
		t.Fatalf("last frame = %s %s, want stream:closed session_deleted", last.Type, last.Data)
	}
}

func TestEndStreamsKeepsBusesAndIds(t *testing.T) {
	h := newHub(t, hub.Options{AutoCreate: true})
	h.Publish(bustest.SessionID("a"), []bus.Event{ev("a:b", 1)})
	s, _ := h.Session("a")
	sub := subscribe(t, s.Bus, bus.SubscribeOptions{})
	gsub := subscribe(t, h.Global(), bus.SubscribeOptions{})
	h.EndStreams(bus.EndReload)
	for _, x := range []*bus.Subscription{sub, gsub} {
		envs := bustest.CollectEnd(t, x, 5*time.Second)
		if d := bustest.Data[bus.ClosedData](t, envs[len(envs)-1]); d.Reason != "reload" {
			t.Errorf("closed reason %q, want reload", d.Reason)
		}
	}
	first, _, err := h.Publish(bustest.SessionID("a"), []bus.Event{ev("a:b", 2)})
	if err != nil || first != 2 {
		t.Fatalf("publish after EndStreams = %d, %v; want id 2", first, err)
	}
}

func TestSetOptionsAppliesRingLimitsButKeepsASessionsOwnRingSize(t *testing.T) {
	h := newHub(t, hub.Options{AutoCreate: true})
	h.Create(bustest.SessionID("own"), 5)
	for i := range 10 {
		h.Publish(bustest.SessionID("own"), []bus.Event{ev("a:b", i)})
		h.Publish(bustest.SessionID("dflt"), []bus.Event{ev("a:b", i)})
	}
	h.SetOptions(hub.Options{AutoCreate: true, Limits: bus.Limits{RingSize: 3}})
	own, _ := h.Session("own")
	dflt, _ := h.Session("dflt")
	if n := own.Bus.Stats().RingLen; n != 5 {
		t.Errorf("own ring holds %d, want its own size 5", n)
	}
	if n := dflt.Bus.Stats().RingLen; n != 3 {
		t.Errorf("default ring holds %d after SetOptions, want 3", n)
	}
}

func TestTotalsNeverGoDownWhenASessionIsDeleted(t *testing.T) {
	h := newHub(t, hub.Options{AutoCreate: true})
	h.Publish(bustest.SessionID("a"), []bus.Event{ev("a:b", 1), ev("a:b", 2)})
	h.Publish(bustest.SessionID("b"), []bus.Event{ev("a:b", 3)})
	before := h.Totals()
	if before.Sessions.Published != 3 || before.Count != 2 {
		t.Fatalf("totals before = published %d, count %d; want 3, 2", before.Sessions.Published, before.Count)
	}
	h.Delete("a")
	after := h.Totals()
	if after.Sessions.Published != 3 || after.Count != 1 || after.Sessions.RingLen != 1 {
		t.Errorf("totals after delete = published %d, count %d, ring %d; want 3, 1, 1", after.Sessions.Published, after.Count, after.Sessions.RingLen)
	}
}

func TestClosedHubRefusesEverything(t *testing.T) {
	h, err := hub.New(hub.Options{AutoCreate: true})
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	if _, err := h.Create(bustest.SessionID("a"), 0); !errors.Is(err, hub.ErrClosed) {
		t.Errorf("Create after Close = %v, want ErrClosed", err)
	}
	if _, _, err := h.Publish(bustest.SessionID("a"), []bus.Event{ev("a:b", 1)}); err == nil {
		t.Error("Publish after Close succeeded")
	}
	if _, err := h.Global().Subscribe(t.Context(), bus.SubscribeOptions{}); !errors.Is(err, bus.ErrClosed) {
		t.Errorf("Subscribe after Close = %v, want bus.ErrClosed", err)
	}
}

func TestReadOnlySessionRefusesPublishButTakesMirrorEvents(t *testing.T) {
	t.Parallel()
	h := newHub(t, hub.Options{AutoCreate: false})
	h.SetReadOnly(func(id string) bool { return id == "a.build" })
	if _, _, err := h.PublishMirror(bustest.SessionID("a.build"), []bus.Event{{Type: bustest.Type("x:y"), Origin: &bus.RemoteOrigin{Node: "a", Session: "build", ID: 7, Epoch: "e"}}}); err != nil {
		t.Fatalf("PublishMirror = %v, want a new mirror session", err)
	}
	if _, _, err := h.Publish(bustest.SessionID("a.build"), []bus.Event{ev("x:y", 1)}); !errors.Is(err, hub.ErrReadOnly) {
		t.Fatalf("Publish to a mirror = %v, want ErrReadOnly", err)
	}
	if _, _, err := h.Publish(bustest.SessionID("other"), []bus.Event{ev("x:y", 1)}); !errors.Is(err, hub.ErrNotFound) {
		t.Fatalf("Publish to a missing session without auto-create = %v, want ErrNotFound", err)
	}
	s, _ := h.Session("a.build")
	if got := s.Bus.LastID(); got != 1 {
		t.Fatalf("mirror lastId = %d, want 1 (the refused publish burns no id)", got)
	}
	env := bustest.Decode(t, s.Bus.LastFrame())
	if env.Origin == nil || *env.Origin != (bus.RemoteOrigin{Node: "a", Session: "build", ID: 7, Epoch: "e"}) {
		t.Fatalf("mirror envelope origin = %+v", env.Origin)
	}
	h.SetReadOnly(nil)
	if _, _, err := h.Publish(bustest.SessionID("a.build"), []bus.Event{ev("x:y", 1)}); err != nil {
		t.Fatalf("Publish after SetReadOnly(nil) = %v", err)
	}
}

func TestRefusedSetOptionsChangesNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		bad  func(*hub.Options)
	}{
		{"negative max queued", func(o *hub.Options) { o.Limits.MaxQueued = -1 }},
		{"ring size above the maximum", func(o *hub.Options) { o.Limits.RingSize = bus.MaxRingSize + 1 }},
		{"peer share above 1", func(o *hub.Options) { o.PeerShare = 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHub(t, hub.Options{MaxSessions: 2, Limits: bus.Limits{RingSize: 5}, AutoSessionTTL: time.Minute})
			if _, err := h.Create(bustest.SessionID("a"), 0); err != nil {
				t.Fatal(err)
			}
			a, _ := h.Session("a")
			wantGlobal, wantA := h.Global().Stats().Limits, a.Bus.Stats().Limits
			next := hub.Options{
				MaxSessions: 10, AutoCreate: true, AutoSessionTTL: time.Hour,
				Limits: bus.Limits{RingSize: 3, MaxSubscribers: 1},
			}
			tc.bad(&next)
			if err := next.Validate(); !bus.IsInputError(err) {
				t.Fatalf("Validate(%+v) = %v, want an *InputError", next, err)
			}
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("SetOptions(%+v) did not panic on options Validate refuses", next)
					}
				}()
				h.SetOptions(next)
			}()
			if got := h.Global().Stats().Limits; got != wantGlobal {
				t.Errorf("global limits = %+v, want %+v", got, wantGlobal)
			}
			if got := a.Bus.Stats().Limits; got != wantA {
				t.Errorf("session limits = %+v, want %+v", got, wantA)
			}
			if got := h.AutoSessionTTL(); got != time.Minute {
				t.Errorf("AutoSessionTTL = %v, want 1m0s", got)
			}
			if _, _, err := h.Publish(bustest.SessionID("missing"), []bus.Event{ev("a:b", 1)}); !errors.Is(err, hub.ErrNotFound) {
				t.Errorf("publish to a missing session = %v, want ErrNotFound (AutoCreate still off)", err)
			}
			h.Create(bustest.SessionID("b"), 0)
			if _, err := h.Create(bustest.SessionID("c"), 0); !errors.Is(err, hub.ErrSessionLimit) {
				t.Errorf("third Create = %v, want ErrSessionLimit (MaxSessions still 2)", err)
			}
		})
	}
}
