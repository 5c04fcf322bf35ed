package hub

import (
	"errors"
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

func TestConsumerNamesAndAckModes(t *testing.T) {
	for _, ok := range []string{"a", "A9", "backup", "x.y-z_1", "0", strings.Repeat("n", 64)} {
		if !ValidConsumerName(ok) {
			t.Errorf("%q refused", ok)
		}
	}
	for _, bad := range []string{"", ".", "..", "-a", "_a", ".a", strings.Repeat("n", 65), "a b", "a/b", "é", "a\n"} {
		if ValidConsumerName(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
	s := NewConsumerSet(nil, nil, 0, 0)
	if _, err := s.Attach(AttachRequest{Name: "..", Now: t0}); !errors.Is(err, ErrConsumerName) {
		t.Errorf("Attach(..) = %v", err)
	}
	for in, want := range map[string]AckMode{"": "", "auto": AckAuto, "explicit": AckExplicit} {
		if got, err := ParseAckMode(in); err != nil || got != want {
			t.Errorf("ParseAckMode(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseAckMode("Explicit"); err == nil {
		t.Error("ParseAckMode(Explicit) succeeded")
	}
}

// TestAConsumerIsCreatedOnceAndTakenOver: the first attach creates the
// consumer at since and stores it; a later one starts at the acked id, is
// refused since and the other ack mode, and takes the consumer over (the
// first lease is replaced, and its end stores nothing).
func TestAConsumerIsCreatedOnceAndTakenOver(t *testing.T) {
	st := &memConsumers{m: map[string]ConsumerState{}}
	s := NewConsumerSet(st, nil, 0, 0)
	l1, err := s.Attach(AttachRequest{Name: "c", Ack: AckExplicit, Since: u64(5), Epoch: "e1", Peer: share.UID(1000), Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	if got := l1.State(); !l1.Created() || got.AckedID != 5 || got.Ack != AckExplicit || got.Epoch != "e1" {
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
	l2, err := s.Attach(AttachRequest{Name: "c", Epoch: "e1", Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l1.Done():
	default:
		t.Fatal("the first stream was not replaced")
	}
	if !l1.Replaced() || l2.Replaced() || l2.Created() || l2.State().AckedID != 8 {
		t.Errorf("after the takeover: first replaced %v, second replaced %v created %v at %d",
			l1.Replaced(), l2.Replaced(), l2.Created(), l2.State().AckedID)
	}
	if err := l1.End(t0); err != nil {
		t.Fatal(err)
	}
	if got := s.List(); len(got) != 1 || !got[0].Connected || got[0].AckedID != 8 {
		t.Errorf("List after the replaced stream ended: %+v", got)
	}
	l2.End(t0)
	if got := s.List(); got[0].Connected {
		t.Errorf("List after every stream ended: %+v", got)
	}
}

// TestExplicitAcksMoveForwardOnly: acks never move back, above lastId is
// refused, another epoch is refused and moves nothing, an auto consumer
// refuses acks, an unknown one is ErrNoConsumer, and a failed store moves
// nothing.
func TestExplicitAcksMoveForwardOnly(t *testing.T) {
	st := &memConsumers{m: map[string]ConsumerState{}}
	s := NewConsumerSet(st, nil, 0, 0)
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
	if got := s.List(); got[1].Name != "x" || got[1].AckedID != 7 {
		t.Errorf("after a failed store: %+v", got)
	}
}

// TestAutoLeasesStoreAtMostOnceASecondAndAtTheEnd: what the stream wrote
// (or skipped) moves the position in memory, a store happens at most once
// a second while it runs and once at its end; a new epoch is stored at
// once.
func TestAutoLeasesStoreAtMostOnceASecondAndAtTheEnd(t *testing.T) {
	st := &memConsumers{m: map[string]ConsumerState{}}
	s := NewConsumerSet(st, nil, 0, 0)
	l, err := s.Attach(AttachRequest{Name: "a", Epoch: "e1", Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	puts := st.puts
	for i := uint64(1); i <= 100; i++ {
		if err := l.Wrote(i, "e1", t0.Add(time.Duration(i)*5*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	if n := st.puts - puts; n != 0 {
		t.Errorf("%d stores within the first half second, want 0", n)
	}
	if err := l.Wrote(101, "e1", t0.Add(1100*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if rec, _ := st.get("a"); rec.AckedID != 101 || st.puts-puts != 1 {
		t.Errorf("after a second: stored %d in %d puts", rec.AckedID, st.puts-puts)
	}
	l.Wrote(150, "e1", t0.Add(1200*time.Millisecond))
	l.Wrote(3, "e2", t0.Add(1300*time.Millisecond))
	if rec, _ := st.get("a"); rec.AckedID != 3 || rec.Epoch != "e2" {
		t.Errorf("a new epoch is not stored at once: %+v", rec)
	}
	l.Wrote(9, "e2", t0.Add(1400*time.Millisecond))
	if err := l.End(t0.Add(1500 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if rec, _ := st.get("a"); rec.AckedID != 9 || rec.Epoch != "e2" {
		t.Errorf("at the end: %+v, want 9 under e2", rec)
	}
	l2, _ := s.Attach(AttachRequest{Name: "a", Epoch: "e2", Now: t0})
	if l2.State().AckedID != 9 {
		t.Errorf("the next stream starts at %d, want 9", l2.State().AckedID)
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
