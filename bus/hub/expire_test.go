package hub_test

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
)

// clock is a settable clock for Options.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

const ttl = time.Hour

// quiet is a logger for the hubs of these tests, whose expiries are the
// point rather than news.
var quiet = slog.New(slog.DiscardHandler)

func newExpiringHub(t *testing.T, c *clock) *hub.Hub {
	return newHub(t, hub.Options{AutoCreate: true, AutoSessionTTL: ttl, Now: c.Now, Logger: quiet})
}

func TestIdleAutoSessionExpiresWithReasonOnTheGlobalBus(t *testing.T) {
	c := newClock()
	h := newExpiringHub(t, c)
	if _, _, err := h.Publish(bustest.SessionID("a"), []bus.Event{ev("x:y", 1)}); err != nil {
		t.Fatal(err)
	}
	g := subscribe(t, h.Global(), bus.SubscribeOptions{})
	if got := h.ExpireIdle(c.Advance(ttl - time.Second)); len(got) != 0 {
		t.Fatalf("ExpireIdle before the ttl = %v, want none", got)
	}
	if got := h.ExpireIdle(c.Advance(time.Second)); fmt.Sprint(got) != "[a]" {
		t.Fatalf("ExpireIdle at the ttl = %v, want [a]", got)
	}
	if _, ok := h.Session("a"); ok {
		t.Fatal("expired session still in the hub")
	}
	envs, _ := bustest.Collect(t, g, 2, 5*time.Second)
	if got := fmt.Sprint(bustest.Types(envs)); got != "[stream:ready localbus:session-closed]" {
		t.Fatalf("global types = %s", got)
	}
	d := bustest.Data[struct{ Session, Reason string }](t, envs[1])
	if d.Session != "a" || d.Reason != "expired" {
		t.Fatalf("session-closed data = %+v, want session a reason expired", d)
	}
	// The id is free again: a publish makes a new session.
	if first, _, err := h.Publish(bustest.SessionID("a"), []bus.Event{ev("x:y", 2)}); err != nil || first != 1 {
		t.Fatalf("publish after expiry = %d, %v; want 1, nil", first, err)
	}
}

func TestAutoSessionWithASubscriberDoesNotExpire(t *testing.T) {
	c := newClock()
	h := newExpiringHub(t, c)
	if _, _, err := h.Publish(bustest.SessionID("a"), []bus.Event{ev("x:y", 1)}); err != nil {
		t.Fatal(err)
	}
	s, _ := h.Session("a")
	sub := subscribe(t, s.Bus, bus.SubscribeOptions{})
	if got := h.ExpireIdle(c.Advance(10 * ttl)); len(got) != 0 {
		t.Fatalf("ExpireIdle = %v, want none while subscribed", got)
	}
	sub.Close()
	if got := h.ExpireIdle(c.Advance(time.Second)); fmt.Sprint(got) != "[a]" {
		t.Fatalf("ExpireIdle once unsubscribed = %v, want [a]", got)
	}
}

func TestRecentlyPublishedAutoSessionDoesNotExpire(t *testing.T) {
	c := newClock()
	h := newExpiringHub(t, c)
	for _, id := range []string{"busy", "idle"} {
		if _, _, err := h.Publish(bustest.SessionID(id), []bus.Event{ev("x:y", 1)}); err != nil {
			t.Fatal(err)
		}
	}
	c.Advance(ttl / 2)
	if _, _, err := h.Publish(bustest.SessionID("busy"), []bus.Event{ev("x:y", 2)}); err != nil {
		t.Fatal(err)
	}
	if got := h.ExpireIdle(c.Advance(ttl / 2)); fmt.Sprint(got) != "[idle]" {
		t.Fatalf("ExpireIdle = %v, want [idle]", got)
	}
	if _, ok := h.Session("busy"); !ok {
		t.Fatal("session published to within the ttl is gone")
	}
}

func TestCreatedSessionNeverExpires(t *testing.T) {
	c := newClock()
	h := newExpiringHub(t, c)
	if _, err := h.Create(bustest.SessionID("made"), 0); err != nil {
		t.Fatal(err)
	}
	if got := h.ExpireIdle(c.Advance(1000 * ttl)); len(got) != 0 {
		t.Fatalf("ExpireIdle = %v, want none", got)
	}
	if _, ok := h.Session("made"); !ok {
		t.Fatal("created session is gone")
	}
}

func TestZeroTTLKeepsAutoSessions(t *testing.T) {
	c := newClock()
	h := newHub(t, hub.Options{AutoCreate: true, Now: c.Now, Logger: quiet})
	if _, _, err := h.Publish(bustest.SessionID("a"), []bus.Event{ev("x:y", 1)}); err != nil {
		t.Fatal(err)
	}
	if got := h.ExpireIdle(c.Advance(1000 * ttl)); len(got) != 0 {
		t.Fatalf("ExpireIdle with ttl 0 = %v, want none", got)
	}
	// A reload can turn it on, and off again.
	h.SetOptions(hub.Options{AutoCreate: true, AutoSessionTTL: ttl})
	if got := h.AutoSessionTTL(); got != ttl {
		t.Fatalf("AutoSessionTTL = %v, want %v", got, ttl)
	}
	h.SetOptions(hub.Options{AutoCreate: true})
	if got := h.ExpireIdle(c.Advance(1000 * ttl)); len(got) != 0 {
		t.Fatalf("ExpireIdle after a reload to 0 = %v, want none", got)
	}
	h.SetOptions(hub.Options{AutoCreate: true, AutoSessionTTL: ttl})
	if got := h.ExpireIdle(c.Now()); fmt.Sprint(got) != "[a]" {
		t.Fatalf("ExpireIdle after a reload to %v = %v, want [a]", ttl, got)
	}
}

// TestPublishRacingExpiryIsKeptOrRefused races publishers against
// ExpireIdle on sessions idle for longer than the ttl: either a publish
// lands first, and the session stays with every acknowledged event, or the
// session expires and every publish gets ErrNotFound. An acknowledged
// event is never lost.
func TestPublishRacingExpiryIsKeptOrRefused(t *testing.T) {
	const rounds, publishers, each = 100, 2, 5
	expired := 0
	for range rounds {
		c := newClock()
		h, err := hub.New(hub.Options{AutoCreate: true, AutoSessionTTL: ttl, Now: c.Now, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		const id = "s"
		if _, _, err := h.Publish(bustest.SessionID(id), []bus.Event{ev("x:y", 0)}); err != nil {
			t.Fatal(err)
		}
		// No publish may create the id again: a refused one must stay refused.
		h.SetOptions(hub.Options{AutoSessionTTL: ttl})
		now := c.Advance(2 * ttl)
		s, _ := h.Session(id)
		var acked, refused int
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range publishers {
			wg.Go(func() {
				<-start
				for i := range each {
					_, _, err := h.Publish(bustest.SessionID(id), []bus.Event{ev("x:y", i)})
					mu.Lock()
					switch {
					case err == nil:
						acked++
					case errors.Is(err, hub.ErrNotFound):
						refused++
					default:
						t.Errorf("publish: %v", err)
					}
					mu.Unlock()
				}
			})
		}
		var got []string
		wg.Go(func() {
			<-start
			got = h.ExpireIdle(now)
		})
		close(start)
		wg.Wait()
		gone := slices.Contains(got, id)
		_, present := h.Session(id)
		published := s.Bus.Stats().Published
		h.Close()
		switch {
		case gone && (acked != 0 || present):
			t.Fatalf("expired after %d acknowledged publishes (present %v)", acked, present)
		case !gone && (refused != 0 || !present):
			t.Fatalf("kept, but %d publishes refused (present %v)", refused, present)
		case !gone && published != uint64(1+acked):
			t.Fatalf("session holds %d events, want %d", published, 1+acked)
		}
		if gone {
			expired++
		}
	}
	t.Logf("%d of %d sessions expired under publishers", expired, rounds)
}

// TestPublishRacingExpiryWithAutoCreateIsNeverRefused races publishers
// against ExpireIdle with auto-create on (2,000 publishes in all): every
// publish succeeds, before the expiry or in the session made anew on a
// new epoch, and every acknowledged event is in one of the two.
func TestPublishRacingExpiryWithAutoCreateIsNeverRefused(t *testing.T) {
	const rounds, publishers, each = 100, 4, 5
	expired := 0
	for range rounds {
		c := newClock()
		h, err := hub.New(hub.Options{AutoCreate: true, AutoSessionTTL: ttl, Now: c.Now, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		const id = "s"
		if _, _, err := h.Publish(bustest.SessionID(id), []bus.Event{ev("x:y", 0)}); err != nil {
			t.Fatal(err)
		}
		now := c.Advance(2 * ttl)
		old, _ := h.Session(id)
		var acked atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range publishers {
			wg.Go(func() {
				<-start
				for i := range each {
					if _, _, err := h.Publish(bustest.SessionID(id), []bus.Event{ev("x:y", i)}); err != nil {
						t.Errorf("publish racing an expiry: %v, want success", err)
						continue
					}
					acked.Add(1)
				}
			})
		}
		var got []string
		wg.Go(func() {
			<-start
			got = h.ExpireIdle(now)
		})
		close(start)
		wg.Wait()
		held := old.Bus.Stats().Published
		if slices.Contains(got, id) {
			expired++
			if cur, ok := h.Session(id); ok {
				if cur.Bus.Epoch() == old.Bus.Epoch() {
					t.Fatalf("the session made anew kept the expired one's epoch")
				}
				held += cur.Bus.Stats().Published
			}
		}
		h.Close()
		if held != uint64(1+acked.Load()) {
			t.Fatalf("the sessions hold %d events, want %d", held, 1+acked.Load())
		}
	}
	t.Logf("%d of %d sessions expired under publishers", expired, rounds)
}

// TestAutoSessionWithPendingConsumerEventsDoesNotExpire: a session whose
// consumer has events it has not acknowledged is kept past the ttl, until
// the consumer acknowledges them or expires itself (consumer_ttl).
func TestAutoSessionWithPendingConsumerEventsDoesNotExpire(t *testing.T) {
	c := newClock()
	h := newHub(t, hub.Options{AutoCreate: true, AutoSessionTTL: ttl, ConsumerTTL: 3 * ttl, Now: c.Now, Logger: quiet})
	if _, _, err := h.Publish(bustest.SessionID("a"), []bus.Event{ev("x:y", 1), ev("x:y", 2)}); err != nil {
		t.Fatal(err)
	}
	s, _ := h.Session("a")
	l, err := s.Consumers().Attach(hub.AttachRequest{Name: "svc", Ack: hub.AckExplicit, Epoch: s.Bus.Epoch(), LastID: s.Bus.LastID(), Now: c.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.End(c.Now()); err != nil {
		t.Fatal(err)
	}
	if got := h.ExpireIdle(c.Advance(2 * ttl)); len(got) != 0 {
		t.Fatalf("ExpireIdle with 2 pending = %v, want none", got)
	}
	if _, err := s.Consumers().Ack("svc", 2, "", s.Bus.LastID(), c.Now()); err != nil {
		t.Fatal(err)
	}
	if got := h.ExpireIdle(c.Now()); fmt.Sprint(got) != "[a]" {
		t.Fatalf("ExpireIdle once every event is acknowledged = %v, want [a]", got)
	}

	// The same, kept until its consumer expires.
	if _, _, err := h.Publish(bustest.SessionID("b"), []bus.Event{ev("x:y", 1)}); err != nil {
		t.Fatal(err)
	}
	s, _ = h.Session("b")
	l, _ = s.Consumers().Attach(hub.AttachRequest{Name: "svc", Ack: hub.AckExplicit, Epoch: s.Bus.Epoch(), LastID: s.Bus.LastID(), Now: c.Now()})
	l.End(c.Now())
	if got := h.ExpireIdle(c.Advance(2 * ttl)); len(got) != 0 {
		t.Fatalf("ExpireIdle with 1 pending = %v, want none", got)
	}
	if n := h.ExpireConsumers(c.Now()); n != 0 {
		t.Fatalf("ExpireConsumers within consumer_ttl = %d", n)
	}
	if n := h.ExpireConsumers(c.Advance(ttl)); n != 1 || s.Consumers().Len() != 0 {
		t.Fatalf("ExpireConsumers after consumer_ttl = %d, %d left", n, s.Consumers().Len())
	}
	if got := h.ExpireIdle(c.Now()); fmt.Sprint(got) != "[b]" {
		t.Fatalf("ExpireIdle once the consumer expired = %v, want [b]", got)
	}
}
