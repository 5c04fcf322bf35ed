package hub_test

import (
	"strings"
	"testing"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
)

// publishN publishes n events of about size bytes each to session id.
func publishN(t *testing.T, h *hub.Hub, id string, n, size int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, _, err := h.Publish(bustest.SessionID(id), []bus.Event{ev("fill:x", strings.Repeat("x", size))}); err != nil {
			t.Fatal(err)
		}
	}
}

func ringStats(h *hub.Hub, id string) bus.Stats {
	s, _ := h.Session(id)
	return s.Bus.Stats()
}

// sumRings adds up what every bus's ring holds, and the largest event
// any of them could be allowed to keep beyond the budget.
func sumRings(h *hub.Hub) int64 {
	total := h.Global().Stats().RingBytes
	for _, s := range h.Sessions() {
		total += s.Bus.Stats().RingBytes
	}
	return total
}

func TestRingBudgetBoundsEveryRingTogether(t *testing.T) {
	const budget, size = 64 << 10, 1000
	h := newHub(t, hub.Options{AutoCreate: true, MaxRingBytesTotal: budget})
	publishN(t, h, "small", 3, size)
	publishN(t, h, "big", 150, size)
	publishN(t, h, "mid", 10, size)
	publishN(t, h, "big", 50, size)

	const slack = 3 * (size + 512) // at most one event per ring over
	if got := sumRings(h); got > budget+slack {
		t.Fatalf("rings hold %d bytes together, budget %d", got, budget)
	}
	if got, want := h.RingBytes(), sumRings(h); got != want {
		t.Fatalf("RingBytes = %d, rings hold %d", got, want)
	}
	big := ringStats(h, "big")
	if big.EarliestID <= 1 || big.LastID != 200 {
		t.Fatalf("big ring holds %d..%d, want its oldest evicted and 200 last", big.EarliestID, big.LastID)
	}
	for _, id := range []string{"small", "mid"} {
		if st := ringStats(h, id); st.EarliestID != 1 || st.RingLen != int(st.LastID) {
			t.Errorf("%s ring holds %d events from %d, want all %d", id, st.RingLen, st.EarliestID, st.LastID)
		}
	}
	// The global bus held a copy of everything, so it was the largest and
	// was trimmed too.
	if g := h.Global().Stats(); g.EarliestID <= 1 {
		t.Errorf("global ring starts at %d, want its oldest evicted", g.EarliestID)
	}
}

func TestRingBudgetTrimsTheLargestRingFirst(t *testing.T) {
	const budget, size = 64 << 10, 1000
	h := newHub(t, hub.Options{AutoCreate: true, MaxRingBytesTotal: budget})
	publishN(t, h, "a", 5, size)
	publishN(t, h, "b", 20, size)
	if st := ringStats(h, "b"); st.EarliestID != 1 {
		t.Fatalf("b trimmed at %d before the budget was reached", st.EarliestID)
	}
	// b's 20 events and their global copies fit; c's push past the budget.
	publishN(t, h, "c", 12, size)
	for _, id := range []string{"a", "b", "c"} {
		if st := ringStats(h, id); st.EarliestID != 1 {
			t.Errorf("%s ring starts at %d, want 1: only the global ring is larger", id, st.EarliestID)
		}
	}
	if g := h.Global().Stats(); g.EarliestID <= 1 {
		t.Fatalf("global ring starts at %d, want it trimmed first", g.EarliestID)
	}
}

func TestResumeFromAnIdTheBudgetEvictedGetsRingEvicted(t *testing.T) {
	const budget, size = 32 << 10, 1000
	h := newHub(t, hub.Options{AutoCreate: true, MaxRingBytesTotal: budget})
	publishN(t, h, "big", 100, size)
	s, _ := h.Session("big")
	earliest := s.Bus.EarliestID()
	if earliest <= 2 {
		t.Fatalf("earliest id %d, want the budget to have evicted some", earliest)
	}
	cursor := uint64(1)
	sub := subscribe(t, s.Bus, bus.SubscribeOptions{Cursor: &cursor})
	envs, _ := bustest.Drain(t, sub)
	if len(envs) < 3 || envs[1].Type != bus.TypeGap {
		t.Fatalf("frames %v, want stream:ready, stream:gap, ...", bustest.Types(envs))
	}
	gap := bustest.Data[bus.GapData](t, envs[1])
	if gap.Reason != bus.GapRingEvicted || gap.EarliestAvailableID == nil || *gap.EarliestAvailableID != earliest {
		t.Fatalf("gap %+v, want ring_evicted from %d", gap, earliest)
	}
	replay := envs[2 : len(envs)-1]
	if len(replay) != int(100-earliest+1) || replay[0].ID != earliest || replay[len(replay)-1].ID != 100 {
		t.Fatalf("replayed ids %v, want %d..100", bustest.IDs(replay), earliest)
	}
}

func TestRingBudgetKeepsEachRingsLastEvent(t *testing.T) {
	// A budget smaller than one event: every ring keeps its last.
	h := newHub(t, hub.Options{AutoCreate: true, MaxRingBytesTotal: 100})
	publishN(t, h, "a", 3, 1000)
	publishN(t, h, "b", 3, 1000)
	for _, id := range []string{"a", "b"} {
		if st := ringStats(h, id); st.RingLen != 1 || st.EarliestID != 3 {
			t.Errorf("%s ring holds %d events from %d, want its last alone", id, st.RingLen, st.EarliestID)
		}
	}
}

func TestDeletedSessionsLeaveTheRingBudget(t *testing.T) {
	h := newHub(t, hub.Options{AutoCreate: true})
	publishN(t, h, "a", 3, 1000)
	before := h.RingBytes()
	if err := h.Delete("a"); err != nil {
		t.Fatal(err)
	}
	if got, want := h.RingBytes(), h.Global().Stats().RingBytes; got != want || got >= before {
		t.Fatalf("RingBytes after delete = %d (before %d), want the global ring's %d", got, before, want)
	}
}

func TestReloadingASmallerRingBudgetTrimsAtOnce(t *testing.T) {
	h := newHub(t, hub.Options{AutoCreate: true})
	publishN(t, h, "a", 50, 1000)
	h.SetOptions(hub.Options{AutoCreate: true, MaxRingBytesTotal: 16 << 10})
	if got := sumRings(h); got > 16<<10+2*1600 {
		t.Fatalf("rings hold %d bytes after reload, budget %d", got, 16<<10)
	}
}
