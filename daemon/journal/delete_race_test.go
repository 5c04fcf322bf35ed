package journal_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/bus/share"
	"github.com/localbus/localbus/daemon/journal"
)

// deleteRaceRoundsEnv sets the rounds of
// TestHubDeleteRacingPublishesLeavesALiveSession: the issue asks for 10,000
// (LOCALBUS_DELETE_RACE_ROUNDS=10000, a run of minutes), the normal test
// runs deleteRaceRounds.
const (
	deleteRaceRoundsEnv = "LOCALBUS_DELETE_RACE_ROUNDS"
	deleteRaceRounds    = 300
)

// TestHubDeleteRacingPublishesLeavesALiveSession races publishers against a
// DELETE of their session, round after round, on a journaled hub with
// auto-create on (3,600 publishes): every publish succeeds, before the
// delete or in the session created again, never hub.ErrNotFound (at most
// hub.ErrRetry, a 503, which the hub gives only when the session is
// deleted under one publish again and again); after each round the session (created again by the
// publishes, on a new epoch) holds exactly the events acknowledged to it
// and takes more; and after a restart the last incarnation is back with its
// epoch and every acknowledged event.
func TestHubDeleteRacingPublishesLeavesALiveSession(t *testing.T) {
	rounds := deleteRaceRounds
	if v := os.Getenv(deleteRaceRoundsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", deleteRaceRoundsEnv, v)
		}
		rounds = n
	}
	dir := t.TempDir()
	openHub := func() (*journal.Journal, *hub.Hub) {
		t.Helper()
		// A clean restart keeps every acknowledged event whatever the
		// sync mode: "never" keeps the race tight and the test quick.
		j, err := journal.Open(journal.Options{Dir: dir, Logger: quiet, SegmentBytes: 1 << 20, Sync: journal.SyncNever})
		if err != nil {
			t.Fatal(err)
		}
		h, err := hub.New(hub.Options{Journal: j, AutoCreate: true})
		if err != nil {
			j.Close()
			t.Fatal(err)
		}
		return j, h
	}
	j, h := openHub()
	const (
		id         = "race"
		publishers = 4
		each       = 3
	)
	type mark struct{ P, K int }
	ev := func(p, k int) []bus.Event {
		return []bus.Event{{Type: bustest.Type("t:e"), Data: json.RawMessage(fmt.Sprintf(`{"P":%d,"K":%d}`, p, k))}}
	}
	// ring returns what the session's bus retains: marks by id.
	ring := func(h *hub.Hub) (map[uint64]mark, string, uint64) {
		t.Helper()
		s, ok := h.Session(id)
		if !ok {
			t.Fatalf("session %s is gone", id)
		}
		sub, err := s.Bus.Subscribe(t.Context(), bus.SubscribeOptions{Cursor: new(uint64)})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		frames, _ := sub.Take(nil)
		out := map[uint64]mark{}
		for _, f := range frames {
			if f.Reserved() {
				continue
			}
			var env struct{ Data mark }
			if err := json.Unmarshal(f.JSON(), &env); err != nil {
				t.Fatal(err)
			}
			out[f.ID] = env.Data
		}
		st := s.Bus.Stats()
		return out, st.Epoch, st.LastID
	}
	seq := 0 // marks of the non-racing publishes, P = -1
	var retries atomic.Int64
	defer func() { t.Logf("%d of %d racing publishes got ErrRetry", retries.Load(), rounds*publishers*each) }()
	for round := range rounds {
		if _, _, err := h.Publish(bustest.SessionID(id), ev(-1, seq)); err != nil {
			t.Fatalf("round %d: publish before the race: %v", round, err)
		}
		seq++
		s, _ := h.Session(id)
		before := s.Bus.Epoch()
		acked := map[mark]uint64{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		var deleteErr error
		wg.Go(func() {
			<-start
			deleteErr = h.Delete(id)
		})
		for p := range publishers {
			wg.Go(func() {
				<-start
				for k := range each {
					first, _, err := h.Publish(bustest.SessionID(id), ev(p, round*each+k))
					switch {
					case errors.Is(err, hub.ErrRetry):
						retries.Add(1)
					case err != nil:
						t.Errorf("round %d: publish = %v, want success (or hub.ErrRetry)", round, err)
					default:
						mu.Lock()
						acked[mark{p, round*each + k}] = first
						mu.Unlock()
					}
				}
			})
		}
		close(start)
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		if deleteErr != nil {
			t.Fatalf("round %d: Delete = %v", round, deleteErr)
		}
		if _, ok := h.Session(id); !ok {
			continue // deleted after every publish: the next round creates it
		}
		got, epoch, last := ring(h)
		if epoch == before {
			t.Fatalf("round %d: the session created again kept the deleted one's epoch %s", round, epoch)
		}
		if uint64(len(got)) != last {
			t.Fatalf("round %d: the session retains %d events, last id %d", round, len(got), last)
		}
		for n, m := range got {
			if acked[m] != n {
				t.Fatalf("round %d: id %d holds %v, which was acknowledged as id %d", round, n, m, acked[m])
			}
		}
	}
	// The session works after the race, and survives a restart.
	first, _, err := h.Publish(bustest.SessionID(id), ev(-1, seq))
	if err != nil {
		t.Fatalf("publish after the race: %v", err)
	}
	want, epoch, last := ring(h)
	if want[first] != (mark{-1, seq}) || last != first {
		t.Fatalf("after the race: id %d holds %v, last id %d", first, want[first], last)
	}
	h.Close()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j, h = openHub()
	defer j.Close()
	defer h.Close()
	got, epoch2, last2 := ring(h)
	if epoch2 != epoch || last2 != last || len(got) != len(want) {
		t.Fatalf("after a restart: epoch %s, last id %d, %d events; want %s, %d, %d", epoch2, last2, len(got), epoch, last, len(want))
	}
	for n, m := range want {
		if got[n] != m {
			t.Fatalf("after a restart: id %d holds %v, want %v", n, got[n], m)
		}
	}
}

// TestHubIdempotencyKeysSurviveARestart: a key remembered by
// Hub.PublishOnce on a journaled hub still answers with the first result
// after a restart, and a deleted session's keys are gone with it.
func TestHubIdempotencyKeysSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	openHub := func() (*journal.Journal, *hub.Hub) {
		t.Helper()
		j, err := journal.Open(journal.Options{Dir: dir, Logger: quiet, SegmentBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		h, err := hub.New(hub.Options{Journal: j, AutoCreate: true})
		if err != nil {
			j.Close()
			t.Fatal(err)
		}
		return j, h
	}
	j, h := openHub()
	digest := [32]byte{1}
	evs := func() []bus.Event {
		return []bus.Event{{Type: bustest.Type("t:e"), Data: json.RawMessage(`1`)}, {Type: bustest.Type("t:e"), Data: json.RawMessage(`2`)}}
	}
	first, replayed, err := h.PublishOnce(share.Unknown, bustest.SessionID("s"), "k", digest, evs())
	if err != nil || replayed {
		t.Fatalf("PublishOnce = %v, replayed %v", err, replayed)
	}
	if _, _, err := h.PublishOnce(share.Unknown, bustest.SessionID("gone"), "k", digest, evs()); err != nil {
		t.Fatal(err)
	}
	if err := h.Delete("gone"); err != nil {
		t.Fatal(err)
	}
	h.Close()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j, h = openHub()
	defer j.Close()
	defer h.Close()
	again, replayed, err := h.PublishOnce(share.Unknown, bustest.SessionID("s"), "k", digest, evs())
	if err != nil || !replayed || again != first {
		t.Fatalf("after a restart PublishOnce = %+v, replayed %v, %v; want %+v replayed", again, replayed, err, first)
	}
	if s, _ := h.Session("s"); s.Bus.LastID() != 2 {
		t.Errorf("after the repeat the session's last id is %d, want 2", s.Bus.LastID())
	}
	if _, _, err := h.PublishOnce(share.Unknown, bustest.SessionID("s"), "k", [32]byte{2}, evs()); !errors.Is(err, hub.ErrKeyReused) {
		t.Errorf("another digest after a restart: %v, want hub.ErrKeyReused", err)
	}
	if _, replayed, err := h.PublishOnce(share.Unknown, bustest.SessionID("gone"), "k", digest, evs()); err != nil || replayed {
		t.Errorf("the key of a deleted session: replayed %v, %v; want a new publish", replayed, err)
	}
}

// TestHubAutoSessionsStillCountAfterARestart: sessions a publish created
// count against MaxAutoSessions after a restart too, and those an admin
// created never do.
func TestHubAutoSessionsStillCountAfterARestart(t *testing.T) {
	dir := t.TempDir()
	openHub := func() (*journal.Journal, *hub.Hub) {
		t.Helper()
		j, err := journal.Open(journal.Options{Dir: dir, Logger: quiet, SegmentBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		h, err := hub.New(hub.Options{Journal: j, AutoCreate: true, MaxAutoSessions: 1})
		if err != nil {
			j.Close()
			t.Fatal(err)
		}
		return j, h
	}
	ev := []bus.Event{{Type: bustest.Type("t:e"), Data: json.RawMessage(`1`)}}
	j, h := openHub()
	if _, err := h.Create(bustest.SessionID("admin"), 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.Publish(bustest.SessionID("auto"), ev); err != nil {
		t.Fatal(err)
	}
	h.Close()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j, h = openHub()
	defer j.Close()
	defer h.Close()
	if _, _, err := h.Publish(bustest.SessionID("another"), ev); !errors.Is(err, hub.ErrAutoSessionLimit) {
		t.Fatalf("a second session by publish after a restart: %v, want hub.ErrAutoSessionLimit", err)
	}
	if _, err := h.Create(bustest.SessionID("admin-2"), 0); err != nil {
		t.Fatalf("Create after a restart: %v", err)
	}
	if err := h.Delete("auto"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.Publish(bustest.SessionID("another"), ev); err != nil {
		t.Fatalf("a session by publish once the first is deleted: %v", err)
	}
}
