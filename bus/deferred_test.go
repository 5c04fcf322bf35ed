package bus_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
)

// deferredStore is a Ring whose appends become durable only when the test
// says so (or never, once it fails): a bus.DeferredStore under the test's
// control.
type deferredStore struct {
	*bus.Ring
	mu      sync.Mutex
	mark    uint64 // batches appended
	durable uint64
	fail    error
	changed chan struct{} // closed and replaced when durable or fail change
}

func newDeferredStore() *deferredStore {
	return &deferredStore{Ring: bus.NewRing(100, 1<<20), changed: make(chan struct{})}
}

func (s *deferredStore) AppendDeferred(frames []*bus.Frame) (uint64, bool, error) {
	if err := s.Ring.Append(frames); err != nil {
		return 0, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mark++
	return s.mark, false, nil
}

func (s *deferredStore) WaitDurable(mark uint64) (uint64, error) {
	deadline := time.After(wait)
	for {
		s.mu.Lock()
		d, fail, ch := s.durable, s.fail, s.changed
		s.mu.Unlock()
		switch {
		case fail != nil:
			return 0, fail
		case d >= mark:
			return d, nil
		}
		select {
		case <-ch:
		case <-deadline:
			return 0, errors.New("test: waited too long for durability")
		}
	}
}

func (s *deferredStore) set(durable uint64, fail error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.durable, s.fail = durable, fail
	close(s.changed)
	s.changed = make(chan struct{})
}

func stage(tb testing.TB, b *bus.Bus, data string) bus.Staged {
	tb.Helper()
	_, st, err := b.StageFrames(nil, ev("a:b", data))
	if err != nil {
		tb.Fatalf("StageFrames(%s) = %v", data, err)
	}
	return st
}

func TestStagedBatchIsShownToNobodyUntilDurable(t *testing.T) {
	t.Parallel()
	st := newDeferredStore()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s"), Store: st})
	live := subscribe(t, b, bus.SubscribeOptions{})
	take(t, live) // stream:ready
	a := stage(t, b, "1")
	if a.First != 1 || a.Last != 1 {
		t.Fatalf("staged ids %d..%d, want 1..1", a.First, a.Last)
	}
	if got, _ := take(t, live); len(got) != 0 {
		t.Fatalf("before durability the subscriber got %v", summary(t, got))
	}
	if got := b.LastID(); got != 0 {
		t.Errorf("LastID() before durability = %d, want 0", got)
	}
	resumer := subscribe(t, b, bus.SubscribeOptions{Cursor: ptr(uint64(0))})
	got, _ := take(t, resumer)
	want := []string{
		`stream:ready {cursor:0,earliestId:null,epoch:"e0",lastId:0,maxQueued:256,types:null}`,
		`stream:replayed {lastReplayedEventId:null,replayedCount:0}`,
	}
	if s := summary(t, got); !slices.Equal(s, want) {
		t.Fatalf("replay before durability = %q, want %q", s, want)
	}
	st.set(1, nil)
	if err := b.Finish(a); err != nil {
		t.Fatalf("Finish = %v", err)
	}
	for _, sub := range []*bus.Subscription{live, resumer} {
		if got, _ := take(t, sub); !slices.Equal(summary(t, got), []string{"a:b#1"}) {
			t.Errorf("after Finish got %v, want a:b#1 live", summary(t, got))
		}
	}
	if got := b.LastID(); got != 1 {
		t.Errorf("LastID() = %d, want 1", got)
	}
}

func TestFinishDeliversEveryDurableBatchInIDOrder(t *testing.T) {
	t.Parallel()
	st := newDeferredStore()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s"), Store: st})
	live := subscribe(t, b, bus.SubscribeOptions{})
	take(t, live)
	a, c := stage(t, b, "1"), stage(t, b, "2")
	st.set(2, nil)
	// The later batch finishes first: the earlier one goes out before it.
	if err := b.Finish(c); err != nil {
		t.Fatalf("Finish(second) = %v", err)
	}
	if got, _ := take(t, live); !slices.Equal(summary(t, got), []string{"a:b#1", "a:b#2"}) {
		t.Fatalf("got %v, want a:b#1, a:b#2", summary(t, got))
	}
	if err := b.Finish(a); err != nil {
		t.Fatalf("Finish(first) = %v", err)
	}
	if got, _ := take(t, live); len(got) != 0 {
		t.Fatalf("the first Finish delivered again: %v", summary(t, got))
	}
}

func TestFailedDurabilityDeliversNothingFromThatBatchOn(t *testing.T) {
	t.Parallel()
	st := newDeferredStore()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s"), Store: st})
	live := subscribe(t, b, bus.SubscribeOptions{})
	take(t, live)
	one, two, three := stage(t, b, "1"), stage(t, b, "2"), stage(t, b, "3")
	errSync := errors.New("sync failed")
	st.set(1, errSync)
	// The last batch learns of the failure first; the first was durable.
	if err := b.Finish(three); !errors.Is(err, errSync) {
		t.Fatalf("Finish(third) = %v, want the sync error", err)
	}
	if err := b.Finish(two); !errors.Is(err, errSync) {
		t.Fatalf("Finish(second) = %v, want the sync error", err)
	}
	st.set(1, nil) // the store would report the first durable
	if err := b.Finish(one); err != nil {
		t.Fatalf("Finish(first) = %v", err)
	}
	if got, _ := take(t, live); !slices.Equal(summary(t, got), []string{"a:b#1"}) {
		t.Fatalf("got %v, want a:b#1 alone", summary(t, got))
	}
	if _, _, err := b.Publish(ev("a:b", "4")); !errors.Is(err, errSync) {
		t.Fatalf("Publish after a failed sync = %v, want the sync error", err)
	}
	if got := b.LastID(); got != 1 {
		t.Errorf("LastID() = %d, want 1", got)
	}
	resumer := subscribe(t, b, bus.SubscribeOptions{Cursor: ptr(uint64(0))})
	got, _ := take(t, resumer)
	if s := summary(t, got); len(s) != 3 || s[1] != "a:b#1" {
		t.Errorf("replay = %q, want a:b#1 alone between ready and replayed", s)
	}
}

func TestConcurrentPublishersReachSubscribersInIDOrder(t *testing.T) {
	t.Parallel()
	st := newDeferredStore()
	b := newBus(t, bus.Options{Session: bustest.SessionID("s"), Store: st})
	sub, err := b.Subscribe(context.Background(), bus.SubscribeOptions{MaxQueued: 2048})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	take(t, sub)
	const publishers, each = 8, 20
	var wg sync.WaitGroup
	for range publishers {
		wg.Go(func() {
			for range each {
				if _, _, err := b.Publish(ev("a:b", "1")); err != nil {
					t.Errorf("Publish = %v", err)
					return
				}
			}
		})
	}
	// A syncer makes everything appended so far durable, again and again,
	// as a log's fsync does.
	done := make(chan struct{})
	syncer := make(chan struct{})
	go func() {
		defer close(syncer)
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
			st.mu.Lock()
			m := st.mark
			st.mu.Unlock()
			st.set(m, nil)
		}
	}()
	wg.Wait()
	close(done)
	<-syncer
	var ids []uint64
	eventually(t, "every event delivered", func() bool {
		got, _ := take(t, sub)
		for _, e := range got {
			ids = append(ids, e.ID)
		}
		return len(ids) >= publishers*each
	})
	for i, id := range ids {
		if id != uint64(i+1) {
			t.Fatalf("subscriber got id %d at position %d: ids %v", id, i, ids)
		}
	}
}
