package hub

import (
	"github.com/localbus/localbus/bus"
)

// Totals are the figures of every session's bus added up, and the global
// bus's apart.
type Totals struct {
	// Sessions adds up the session buses: cumulative counters include
	// deleted sessions; gauges (Subscribers, RingLen, RingBytes) only live ones.
	Sessions bus.Stats
	// Global is the global bus.
	Global bus.Stats
	// Count is the number of sessions.
	Count int
}

// Totals returns the hub's figures, for metrics.
func (h *Hub) Totals() Totals {
	var t Totals
	h.mu.Lock()
	t.Sessions = h.retired
	h.mu.Unlock()
	for _, s := range h.Sessions() {
		st := s.Bus.Stats()
		addCounters(&t.Sessions, &st)
		t.Sessions.Subscribers += st.Subscribers
		t.Sessions.RingLen += st.RingLen
		t.Sessions.RingBytes += st.RingBytes
		t.Count++
	}
	t.Global = h.global.Stats()
	return t
}

func addCounters(dst, src *bus.Stats) {
	dst.Published += src.Published
	dst.Delivered += src.Delivered
	dst.SlowWarnings += src.SlowWarnings
	dst.SlowBytes += src.SlowBytes
	dst.EvictedQueue += src.EvictedQueue
	dst.EvictedBytes += src.EvictedBytes
	dst.GapRingEvicted += src.GapRingEvicted
	dst.GapUpstreamLost += src.GapUpstreamLost
	dst.GapEpochReset += src.GapEpochReset
	dst.Replayed += src.Replayed
}

// Subscribers returns the number of subscribers across every bus.
func (h *Hub) Subscribers() int {
	n := h.global.Stats().Subscribers
	for _, s := range h.Sessions() {
		n += s.Bus.Stats().Subscribers
	}
	return n
}
