package hub_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/bus/share"
)

func TestAutoSessionLimitIsAtMostHalfOfMaxSessions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		sessions, auto int
		want           int
		lowered        bool
	}{
		{0, 0, 1024, false}, // the defaults: 4096 and 1024
		{20, 0, 10, true},   // max_sessions = 20 with the default max_auto_sessions
		{20, 10, 10, false},
		{20, 4, 4, false},
		{21, 1024, 10, true},
		{1, 1, 0, true}, // no room for publishers at all
	}
	for _, tt := range tests {
		got, lowered := hub.AutoSessionLimit(tt.sessions, tt.auto)
		if got != tt.want || lowered != tt.lowered {
			t.Errorf("AutoSessionLimit(%d, %d) = %d, %v; want %d, %v", tt.sessions, tt.auto, got, lowered, tt.want, tt.lowered)
		}
	}
}

// publishNew publishes to new sessions as peer until refused, and returns
// how many it created and the refusal.
func publishNew(t *testing.T, h *hub.Hub, peer share.Peer, prefix string) (int, error) {
	t.Helper()
	for n := 0; n < 10000; n++ {
		if _, _, err := h.PublishAs(peer, bustest.SessionID(fmt.Sprintf("%s-%d", prefix, n)), []bus.Event{ev("x:y", n)}); err != nil {
			return n, err
		}
	}
	t.Fatal("never refused")
	return 0, nil
}

func TestAutoSessionsAreSharedByPeer(t *testing.T) {
	t.Parallel()
	h := newHub(t, hub.Options{AutoCreate: true, MaxSessions: 100, MaxAutoSessions: 8, PeerShare: 0.25, AutoSessionTTL: time.Hour})
	hog := share.UID(65534)
	n, err := publishNew(t, h, hog, "hog")
	var r *share.Refusal
	if n != 2 || !errors.As(err, &r) || r.Kind != share.ByShare || r.Pool != hub.PoolAutoSessions ||
		!errors.Is(err, hub.ErrAutoSessionLimit) || !errors.Is(err, hub.ErrSessionLimit) {
		t.Fatalf("one peer created %d sessions, then %v; want 2 (its share of 8), then its share refused as ErrAutoSessionLimit", n, err)
	}
	// Publishing to its own sessions goes on.
	if _, _, err := h.PublishAs(hog, bustest.SessionID("hog-0"), []bus.Event{ev("x:y", 1)}); err != nil {
		t.Fatalf("publish to its own session: %v", err)
	}
	for i, p := range []share.Peer{share.UID(65533), share.Key("ci"), share.Unknown} {
		if n, _ := publishNew(t, h, p, fmt.Sprint("other", i)); n != 2 {
			t.Errorf("%v created %d sessions beside the hog, want its share, 2", p, n)
		}
	}
	// Other peers fill the 8: a privileged publisher still creates up to
	// 8 of its own, and an admin's Create is unaffected.
	if n, err := publishNew(t, h, share.Privileged, "root"); n != 8 || !errors.As(err, &r) || r.Kind != share.ByPool {
		t.Fatalf("privileged created %d beside a full pool, then %v; want 8, then the pool's limit", n, err)
	}
	if _, err := h.Create(bustest.SessionID("admin"), 0); err != nil {
		t.Fatalf("Create beside a full pool: %v", err)
	}
	// Deleting one of the hog's gives its place back; expiry too.
	if err := h.Delete("hog-0"); err != nil {
		t.Fatal(err)
	}
	for i := range 8 { // what the privileged publisher holds counts in the pool
		if err := h.Delete(fmt.Sprint("root-", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := h.PublishAs(hog, bustest.SessionID("hog-again"), []bus.Event{ev("x:y", 1)}); err != nil {
		t.Fatalf("after deleting one of its sessions: %v", err)
	}
	if got := h.ExpireIdle(time.Now().Add(2 * time.Hour)); len(got) != 8 {
		t.Fatalf("expired %d sessions, want the 8 a publish created that are left", len(got))
	}
	if n, _ := publishNew(t, h, hog, "hog-after"); n != 2 {
		t.Errorf("after expiry the hog created %d, want its share, 2", n)
	}
}

func TestPublishersLeaveAnAdminHalfOfMaxSessions(t *testing.T) {
	t.Parallel()
	// max_sessions = 20 with the default max_auto_sessions (1024), shares
	// off: publishers get 10, Create the rest.
	h := newHub(t, hub.Options{AutoCreate: true, MaxSessions: 20, PeerShare: 1})
	if n, err := publishNew(t, h, share.UID(65534), "p"); n != 10 || !errors.Is(err, hub.ErrAutoSessionLimit) {
		t.Fatalf("a publisher created %d, then %v; want 10, then ErrAutoSessionLimit", n, err)
	}
	for i := range 10 {
		if _, err := h.Create(bustest.SessionID(fmt.Sprintf("admin-%d", i)), 0); err != nil {
			t.Fatalf("Create %d: %v", i, err)
		}
	}
	if _, err := h.Create(bustest.SessionID("one-more"), 0); !errors.Is(err, hub.ErrSessionLimit) || errors.Is(err, hub.ErrAutoSessionLimit) {
		t.Fatalf("Create past max_sessions = %v, want ErrSessionLimit", err)
	}
	// A reload that raises max_sessions raises the half.
	h.SetOptions(hub.Options{AutoCreate: true, MaxSessions: 40, PeerShare: 1})
	if n, _ := publishNew(t, h, share.UID(65534), "q"); n != 10 {
		t.Errorf("after raising max_sessions to 40 the publisher created %d more, want 10", n)
	}
}

func TestSubscribersOfEveryBusAreShared(t *testing.T) {
	t.Parallel()
	h := newHub(t, hub.Options{AutoCreate: true, Limits: bus.Limits{MaxSubscribers: 4}, PeerShare: 0.25})
	if _, err := h.Create(bustest.SessionID("s"), 0); err != nil {
		t.Fatal(err)
	}
	s, _ := h.Session("s")
	for _, b := range []*bus.Bus{s.Bus, h.Global()} {
		subscribe(t, b, bus.SubscribeOptions{Peer: share.UID(1)})
		if _, err := b.Subscribe(t.Context(), bus.SubscribeOptions{Peer: share.UID(1)}); !errors.Is(err, bus.ErrSubscriberLimit) {
			t.Errorf("%q: second subscriber of a share of 1 = %v", b.Session(), err)
		}
		subscribe(t, b, bus.SubscribeOptions{Peer: share.UID(2)})
	}
	// A reload to shares off applies to every bus.
	h.SetOptions(hub.Options{AutoCreate: true, Limits: bus.Limits{MaxSubscribers: 4}, PeerShare: 1})
	for _, b := range []*bus.Bus{s.Bus, h.Global()} {
		subscribe(t, b, bus.SubscribeOptions{Peer: share.UID(1)})
	}
}

// TestIdempotencyKeysPastAPeersShareForgetItsOldest fills one peer's share
// of the remembered keys: its oldest are forgotten, counted, and another
// peer's and a privileged one's are kept.
func TestIdempotencyKeysPastAPeersShareForgetItsOldest(t *testing.T) {
	t.Parallel()
	const share4 = 100 // a quarter of the pool, in keys of "s" and five digits
	h := newHub(t, hub.Options{AutoCreate: true, PeerShare: 0.25, IdempotencyMaxBytes: 4 * share4 * hub.KeyCost("s", "00000")})
	once := func(p share.Peer, key string) bool {
		t.Helper()
		_, replayed, err := h.PublishOnce(p, bustest.SessionID("s"), key, [32]byte{}, []bus.Event{ev("x:y", 1)})
		if err != nil {
			t.Fatal(err)
		}
		return replayed
	}
	once(share.UID(2), "other")
	once(share.Privileged, "rootk")
	for i := range share4 + 10 {
		once(share.UID(1), fmt.Sprintf("%05d", i))
	}
	if byShare, byPool := h.KeysForgotten(); byShare != 10 || byPool != 0 {
		t.Fatalf("KeysForgotten() = %d, %d; want 10 past the peer's share, 0", byShare, byPool)
	}
	if once(share.UID(1), "00000") {
		t.Error("the peer's oldest key is still remembered past its share")
	}
	if !once(share.UID(1), fmt.Sprintf("%05d", share4+9)) {
		t.Error("the peer's newest key was forgotten")
	}
	if !once(share.UID(2), "other") || !once(share.Privileged, "rootk") {
		t.Error("one peer's keys pushed out another's")
	}
}

// memJournal is a Journal that keeps what a restart needs in memory: the
// sessions a publish created with their peers, and the idempotency keys.
type memJournal struct {
	autos map[string]string // session → peer
	keys  map[[2]string][]byte
}

func newMemJournal() *memJournal {
	return &memJournal{autos: map[string]string{}, keys: map[[2]string][]byte{}}
}

func (j *memJournal) Sessions() []string {
	var ids []string
	for id := range j.autos {
		ids = append(ids, id)
	}
	return ids
}

func (j *memJournal) OpenBus(session string, ringSize int) (bus.Store, string, int, error) {
	return bus.NewRing(100, 1<<20), "e", 0, nil
}

func (j *memJournal) OpenAutoBus(session, peer string) (bus.Store, string, int, error) {
	j.autos[session] = peer
	return j.OpenBus(session, 0)
}

func (j *memJournal) Auto(session string) (string, bool) {
	p, ok := j.autos[session]
	return p, ok
}

func (j *memJournal) Delete(session string) error { delete(j.autos, session); return nil }

func (j *memJournal) PutKey(session, key string, rec []byte) error {
	j.keys[[2]string{session, key}] = rec
	return nil
}

func (j *memJournal) DropKeys(session string, keys []string) error {
	for k := range j.keys {
		if k[0] == session && (keys == nil || slices.Contains(keys, k[1])) {
			delete(j.keys, k)
		}
	}
	return nil
}

func (j *memJournal) Keys(fn func(session, key string, rec []byte)) error {
	for k, rec := range j.keys {
		fn(k[0], k[1], rec)
	}
	return nil
}

// TestSharesHoldAfterARestart restarts a hub on the same journal: the
// sessions a peer created, and its idempotency keys, still count on its
// share; those stored without a peer count as Unknown's.
func TestSharesHoldAfterARestart(t *testing.T) {
	t.Parallel()
	j := newMemJournal()
	const keyShare = 100 // the hog's share of the keys, of "hog-0" and five digits
	opts := hub.Options{Journal: j, AutoCreate: true, MaxSessions: 100, MaxAutoSessions: 8, PeerShare: 0.25,
		IdempotencyMaxBytes: 4 * keyShare * hub.KeyCost("hog-0", "00000")}
	h, err := hub.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	hog := share.UID(65534)
	if n, _ := publishNew(t, h, hog, "hog"); n != 2 {
		t.Fatalf("created %d, want 2", n)
	}
	for i := range keyShare {
		if _, _, err := h.PublishOnce(hog, bustest.SessionID("hog-0"), fmt.Sprintf("%05d", i), [32]byte{}, []bus.Event{ev("x:y", i)}); err != nil {
			t.Fatal(err)
		}
	}
	h.Close()
	j.autos["old"] = "" // stored before peers were

	h2 := newHub(t, opts)
	if _, _, err := h2.PublishAs(hog, bustest.SessionID("hog-new"), []bus.Event{ev("x:y", 1)}); !errors.Is(err, hub.ErrAutoSessionLimit) {
		t.Fatalf("after a restart the hog created a third session: %v", err)
	}
	if n, _ := publishNew(t, h2, share.UID(65533), "other"); n != 2 {
		t.Errorf("another peer created %d after the restart, want 2", n)
	}
	if n, _ := publishNew(t, h2, share.Unknown, "unknown"); n != 1 {
		t.Errorf("Unknown created %d beside the session stored without a peer, want 1", n)
	}
	if _, _, err := h2.PublishOnce(hog, bustest.SessionID("hog-0"), "more1", [32]byte{}, []bus.Event{ev("x:y", 1)}); err != nil {
		t.Fatal(err)
	}
	if byShare, _ := h2.KeysForgotten(); byShare != 1 {
		t.Errorf("a key past the hog's restored share forgot %d keys, want 1", byShare)
	}
}
