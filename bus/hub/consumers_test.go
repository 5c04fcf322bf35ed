package hub

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/localbus/localbus/bus/share"
)

// memConsumers is a ConsumerStore that records what it was asked to keep,
// and can be told to fail.
type memConsumers struct {
	mu   sync.Mutex
	m    map[string]ConsumerState
	puts int
	fail error
}

func (s *memConsumers) PutConsumer(c ConsumerState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	s.puts++
	s.m[c.Name] = c
	return nil
}

func (s *memConsumers) DeleteConsumer(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	delete(s.m, name)
	return nil
}

func (s *memConsumers) get(name string) (ConsumerState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.m[name]
	return c, ok
}

var t0 = time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)

func u64(n uint64) *uint64 { return &n }

func TestAttachRefusesBadNames(t *testing.T) {
	s := NewConsumerSet(nil, nil, DefaultMaxConsumers, 0)
	for _, bad := range []string{"", ".", "..", strings.Repeat("n", 65)} {
		if _, err := s.Attach(AttachRequest{Name: bad, Now: t0}); !errors.Is(err, ErrConsumerName) {
			t.Errorf("Attach(%q) = %v", bad, err)
		}
	}
}

// TestAConsumerIsCreatedOnceAndTakenOver: the first attach creates the
// consumer at since and stores it; a later one starts at the acked id, is
// refused since and the other ack mode, and takes the consumer over (the
// first lease is replaced, and its end stores nothing).
func TestAConsumerIsCreatedOnceAndTakenOver(t *testing.T) {
	st := &memConsumers{m: map[string]ConsumerState{}}
	s := NewConsumerSet(st, nil, DefaultMaxConsumers, 0)
	l1, err := s.Attach(AttachRequest{Name: "c", Ack: AckExplicit, Since: u64(5), Epoch: "e1", LastID: 10, Peer: share.UID(1000), Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	if got := l1.Start(); !l1.Created() || got.AckedID != 5 || got.Ack != AckExplicit || got.Epoch != "e1" {
		t.Errorf("created: %+v, created %v", got, l1.Created())
	}
	if got, ok := st.get("c"); !ok || got.AckedID != 5 {
		t.Errorf("stored at creation: %+v, %v", got, ok)
	}
	if _, err := s.Attach(AttachRequest{Name: "c", Since: u64(1), Epoch: "e1", Now: t0}); !errors.Is(err, ErrConsumerExists) {
		t.Errorf("since on an existing consumer: %v", err)
	}
	if _, err := s.Attach(AttachRequest{Name: "c", Ack: AckAuto, Epoch: "e1", Now: t0}); !errors.Is(err, ErrConsumerAckMode) {
		t.Errorf("the other ack mode: %v", err)
	}
	if l1.Replaced() {
		t.Fatal("a refused attach replaced the live stream")
	}
	if id, err := s.Ack("c", 8, "e1", 10, t0); err != nil || id != 8 {
		t.Fatalf("Ack 8 = %d, %v", id, err)
	}
	l2, err := s.Attach(AttachRequest{Name: "c", Epoch: "e1", LastID: 10, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l1.Done():
	default:
		t.Fatal("the first stream was not replaced")
	}
	if !l1.Replaced() || l2.Replaced() || l2.Created() || l2.Start().AckedID != 8 {
		t.Errorf("after the takeover: first replaced %v, second replaced %v created %v at %d",
			l1.Replaced(), l2.Replaced(), l2.Created(), l2.Start().AckedID)
	}
	if err := l1.End(t0); err != nil {
		t.Fatal(err)
	}
	if got := s.List(10, "e1"); len(got) != 1 || !got[0].Connected || got[0].AckedID != 8 {
		t.Errorf("List after the replaced stream ended: %+v", got)
	}
	l2.End(t0)
	if got := s.List(10, "e1"); got[0].Connected {
		t.Errorf("List after every stream ended: %+v", got)
	}
}

// TestExplicitAcksMoveForwardOnly: acks never move back, above lastId is
// refused, another epoch is refused and moves nothing, an auto consumer
// refuses acks, an unknown one is ErrNoConsumer, and a failed store moves
// nothing.
func TestExplicitAcksMoveForwardOnly(t *testing.T) {
	st := &memConsumers{m: map[string]ConsumerState{}}
	s := NewConsumerSet(st, nil, DefaultMaxConsumers, 0)
	if _, err := s.Attach(AttachRequest{Name: "x", Ack: AckExplicit, Epoch: "e1", Now: t0}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Attach(AttachRequest{Name: "a", Epoch: "e1", Now: t0}); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		id     uint64
		epoch  string
		want   uint64
		err    error
		stored uint64
	}{
		{4, "e1", 4, nil, 4},
		{2, "e1", 4, nil, 4},
		{4, "", 4, nil, 4},
		{11, "e1", 0, ErrAckAboveLastID, 4},
		{6, "e0", 0, ErrEpochMismatch, 4},
		{7, "", 7, nil, 7},
	}
	for _, c := range steps {
		got, err := s.Ack("x", c.id, c.epoch, 10, t0)
		if !errors.Is(err, c.err) || got != c.want {
			t.Errorf("Ack(%d, %q) = %d, %v; want %d, %v", c.id, c.epoch, got, err, c.want, c.err)
		}
		if rec, _ := st.get("x"); rec.AckedID != c.stored {
			t.Errorf("after Ack(%d, %q) stored %d, want %d", c.id, c.epoch, rec.AckedID, c.stored)
		}
	}
	if _, err := s.Ack("a", 1, "", 10, t0); !errors.Is(err, ErrConsumerNotExplicit) {
		t.Errorf("ack on an auto consumer: %v", err)
	}
	if _, err := s.Ack("nope", 1, "", 10, t0); !errors.Is(err, ErrNoConsumer) {
		t.Errorf("ack on an unknown consumer: %v", err)
	}
	st.fail = errors.New("disk full")
	if _, err := s.Ack("x", 9, "", 10, t0); err == nil {
		t.Error("an ack whose store failed succeeded")
	}
	st.fail = nil
	if got := s.List(10, "e1"); got[1].Name != "x" || got[1].AckedID != 7 {
		t.Errorf("after a failed store: %+v", got)
	}
}

// TestAutoLeasesStoreOnSyncAndAtTheEnd: what the stream wrote (or
// skipped) moves the position in memory only; Sync stores it, End stores
// it once more, and the next stream starts after it.
func TestAutoLeasesStoreOnSyncAndAtTheEnd(t *testing.T) {
	st := &memConsumers{m: map[string]ConsumerState{}}
	s := NewConsumerSet(st, nil, DefaultMaxConsumers, 0)
	l, err := s.Attach(AttachRequest{Name: "a", Epoch: "e1", LastID: 200, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	puts := st.puts
	for i := uint64(1); i <= 100; i++ {
		if !l.Wrote(i) {
			t.Fatalf("Wrote(%d) did not move the position", i)
		}
	}
	if l.Wrote(50) {
		t.Error("Wrote(50) after 100 moved the position back")
	}
	if n := st.puts - puts; n != 0 {
		t.Errorf("%d stores without a Sync, want 0", n)
	}
	if err := l.Sync(t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if rec, _ := st.get("a"); rec.AckedID != 100 || st.puts-puts != 1 {
		t.Errorf("after Sync: stored %d in %d puts", rec.AckedID, st.puts-puts)
	}
	if err := l.Sync(t0.Add(2 * time.Second)); err != nil || st.puts-puts != 1 {
		t.Errorf("a Sync with nothing new stored again: %d puts, %v", st.puts-puts, err)
	}
	l.Wrote(150)
	if err := l.End(t0.Add(3 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if rec, _ := st.get("a"); rec.AckedID != 150 || rec.Epoch != "e1" || !rec.LastActive.Equal(t0.Add(3*time.Second)) {
		t.Errorf("at the end: %+v, want 150 under e1, active at its end", rec)
	}
	l2, _ := s.Attach(AttachRequest{Name: "a", Epoch: "e1", LastID: 200, Now: t0})
	if got := l2.Start().AckedID; got != 150 {
		t.Errorf("the next stream starts at %d, want 150", got)
	}
	// Taken over, the old stream's position is stored first, and the new
	// one starts after it; the old one's later writes and its end store
	// nothing.
	l2.Wrote(170)
	l3, err := s.Attach(AttachRequest{Name: "a", Epoch: "e1", LastID: 200, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	if got := l3.Start().AckedID; got != 170 {
		t.Errorf("after a takeover the stream starts at %d, want 170", got)
	}
	l2.Wrote(190)
	l2.Sync(t0.Add(5 * time.Second))
	l2.End(t0.Add(5 * time.Second))
	if rec, _ := st.get("a"); rec.AckedID != 170 {
		t.Errorf("the replaced stream stored %d, want 170 kept", rec.AckedID)
	}
}

// TestANewEpochMovesTheConsumerOnAttach: a consumer whose epoch is not the
// session's any more starts its stream where it was, in its old epoch (the
// bus makes that an epoch_reset), and is moved to 0 in the session's
// epoch at once, so acks of the new epoch are taken and compared within
// it.
func TestANewEpochMovesTheConsumerOnAttach(t *testing.T) {
	st := &memConsumers{m: map[string]ConsumerState{}}
	s := NewConsumerSet(st, []ConsumerState{{Name: "x", Ack: AckExplicit, AckedID: 5, Epoch: "e1"}}, DefaultMaxConsumers, 0)
	if _, err := s.Ack("x", 3, "e2", 10, t0); !errors.Is(err, ErrEpochMismatch) {
		t.Errorf("an ack of the new epoch before any stream: %v", err)
	}
	l, err := s.Attach(AttachRequest{Name: "x", Epoch: "e2", LastID: 10, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Start(); got.AckedID != 5 || got.Epoch != "e1" {
		t.Errorf("the stream starts at %d in %q, want 5 in e1", got.AckedID, got.Epoch)
	}
	if l.Epoch() != "e2" {
		t.Errorf("the lease's epoch is %q, want e2", l.Epoch())
	}
	if rec, _ := st.get("x"); rec.AckedID != 0 || rec.Epoch != "e2" {
		t.Errorf("stored %+v, want 0 in e2", rec)
	}
	if id, err := s.Ack("x", 3, "e2", 10, t0); err != nil || id != 3 {
		t.Errorf("an ack of 3 in e2 (below the old 5) = %d, %v; want 3", id, err)
	}
	if _, err := s.Ack("x", 4, "e1", 10, t0); !errors.Is(err, ErrEpochMismatch) {
		t.Errorf("an ack of the old epoch: %v", err)
	}
	if got := s.List(10, "e2"); got[0].AckedID != 3 || got[0].Pending != 7 {
		t.Errorf("List: %+v, want acked 3, 7 pending", got)
	}
	// A new consumer whose since is above the session's last id is the
	// same: an epoch_reset, and 0.
	l2, err := s.Attach(AttachRequest{Name: "y", Ack: AckExplicit, Since: u64(50), Epoch: "e2", LastID: 10, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	if got := l2.Start(); got.AckedID != 50 {
		t.Errorf("start %+v, want after 50", got)
	}
	if rec, _ := st.get("y"); rec.AckedID != 0 || rec.Epoch != "e2" {
		t.Errorf("stored %+v, want 0 in e2", rec)
	}
}

// TestConsumersExpireWithoutAStream: consumer_ttl forgets a consumer with
// no stream since before the cutoff, never a connected one; 0 keeps them.
func TestConsumersExpireWithoutAStream(t *testing.T) {
	st := &memConsumers{m: map[string]ConsumerState{}}
	s := NewConsumerSet(st, nil, DefaultMaxConsumers, 0)
	live, _ := s.Attach(AttachRequest{Name: "live", Epoch: "e1", Now: t0})
	gone, _ := s.Attach(AttachRequest{Name: "gone", Epoch: "e1", Now: t0})
	gone.End(t0)
	recent, _ := s.Attach(AttachRequest{Name: "recent", Epoch: "e1", Now: t0})
	recent.End(t0.Add(time.Hour))
	if names, err := s.Expire(t0.Add(100*time.Hour), 0); err != nil || names != nil {
		t.Errorf("Expire with ttl 0 = %v, %v", names, err)
	}
	names, err := s.Expire(t0.Add(90*time.Minute), time.Hour)
	if err != nil || !slices.Equal(names, []string{"gone"}) {
		t.Errorf("Expire = %v, %v; want [gone]", names, err)
	}
	if _, ok := st.get("gone"); ok {
		t.Error("the expired consumer is still stored")
	}
	if live.Replaced() || s.Len() != 2 {
		t.Errorf("expiry touched the others: %d left", s.Len())
	}
}

// TestConsumerLimitsAreFairSharesAndDeleteFreesOne: max_consumers refuses
// past the limit and past a peer's share with ErrConsumerLimit, a refusal
// leaves the others as they were, and deleting a consumer replaces its
// stream and frees its unit; restored consumers count.
func TestConsumerLimitsAreFairSharesAndDeleteFreesOne(t *testing.T) {
	st := &memConsumers{m: map[string]ConsumerState{}}
	s := NewConsumerSet(st, []ConsumerState{{Name: "old", Ack: AckAuto, Epoch: "e1"}}, 4, 0.5)
	p1, p2 := share.UID(1000), share.UID(1001)
	attach := func(name string, p share.Peer) (*Lease, error) {
		return s.Attach(AttachRequest{Name: name, Epoch: "e1", Peer: p, Now: t0})
	}
	l1, err := attach("a1", p1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := attach("a2", p1); err != nil {
		t.Fatal(err)
	}
	_, err = attach("a3", p1)
	var ref *share.Refusal
	if !errors.Is(err, ErrConsumerLimit) || !errors.As(err, &ref) || ref.Pool != PoolConsumers {
		t.Fatalf("past the share: %v", err)
	}
	if _, err := attach("b1", p2); err != nil {
		t.Fatal(err)
	}
	if _, err := attach("b2", p2); !errors.Is(err, ErrConsumerLimit) {
		t.Fatalf("past the limit (the restored one counts): %v", err)
	}
	if l1.Replaced() || s.Len() != 4 {
		t.Errorf("a refusal changed the others: replaced %v, %d consumers", l1.Replaced(), s.Len())
	}
	if err := s.Delete("a1"); err != nil {
		t.Fatal(err)
	}
	if !l1.Replaced() {
		t.Error("deleting a consumer did not replace its stream")
	}
	if _, ok := st.get("a1"); ok {
		t.Error("a deleted consumer is still stored")
	}
	if err := s.Delete("a1"); !errors.Is(err, ErrNoConsumer) {
		t.Errorf("deleting it again: %v", err)
	}
	if _, err := attach("a3", p1); err != nil {
		t.Errorf("after a delete: %v", err)
	}
	st.fail = errors.New("disk full")
	if _, err := attach("c", share.Privileged); err == nil {
		t.Error("an attach whose store failed succeeded")
	}
	st.fail = nil
	if s.Len() != 4 {
		t.Errorf("%d consumers after a failed create, want 4", s.Len())
	}
}

// TestAnEndStoresNothingNewWithinASecond: a stream that ends with its
// position unmoved less than a second after the consumer was stored
// stores nothing more; later, it stores its last activity.
func TestAnEndStoresNothingNewWithinASecond(t *testing.T) {
	st := &memConsumers{m: map[string]ConsumerState{}}
	s := NewConsumerSet(st, nil, DefaultMaxConsumers, 0)
	for _, ack := range []AckMode{AckAuto, AckExplicit} {
		name := string(ack)
		l, err := s.Attach(AttachRequest{Name: name, Ack: ack, Epoch: "e1", LastID: 5, Peer: share.Privileged, Now: t0})
		if err != nil {
			t.Fatal(err)
		}
		puts := st.puts
		if err := l.End(t0.Add(500 * time.Millisecond)); err != nil || st.puts != puts {
			t.Errorf("%s: an end half a second after the creation stored %d times (%v)", ack, st.puts-puts, err)
		}
		l, _ = s.Attach(AttachRequest{Name: name, Epoch: "e1", LastID: 5, Now: t0})
		if err := l.End(t0.Add(2 * time.Second)); err != nil || st.puts != puts+1 {
			t.Errorf("%s: an end two seconds after it stored %d times (%v), want once", ack, st.puts-puts, err)
		}
		if rec, _ := st.get(name); !rec.LastActive.Equal(t0.Add(2 * time.Second)) {
			t.Errorf("%s: last active %v, want the end", ack, rec.LastActive)
		}
	}
}
