package hub

import (
	"slices"

	"github.com/localbus/localbus/bus"
)

// addRingBytes is every bus's OnRingBytes.
func (h *Hub) addRingBytes(delta int64) { h.ringBytes.Add(delta) }

// RingBytes returns the bytes the rings of every bus retain together.
func (h *Hub) RingBytes() int64 { return h.ringBytes.Load() }

// TrimRings enforces MaxRingBytesTotal: when the rings together retain
// more, the largest are trimmed, oldest events first, down to a common cap
// chosen so that the total fits (water-filling); smaller rings keep every
// event. A ring keeps at least its last event, so the total may stay above
// the budget by up to one event per ring. Publish calls it; it costs an
// atomic load when the total fits.
func (h *Hub) TrimRings() {
	budget := h.ringBudget.Load()
	if h.ringBytes.Load() <= budget {
		return
	}
	h.trimMu.Lock()
	defer h.trimMu.Unlock()
	if h.ringBytes.Load() <= budget {
		return
	}
	sessions := h.Sessions()
	buses := make([]*bus.Bus, 0, len(sessions)+1)
	buses = append(buses, h.global)
	for _, s := range sessions {
		buses = append(buses, s.Bus)
	}
	sizes := make([]int64, len(buses))
	for i, b := range buses {
		sizes[i] = b.RingBytes()
	}
	// Trim a little below the budget, so that a full budget is not
	// enforced again on every publish.
	limit := waterLevel(sizes, budget-budget/64)
	for i, b := range buses {
		if sizes[i] > limit {
			b.TrimTo(limit)
		}
	}
}

// waterLevel returns the largest cap such that the sizes, each cut to it,
// sum to at most total.
func waterLevel(sizes []int64, total int64) int64 {
	sorted := slices.Clone(sizes)
	slices.Sort(sorted)
	left := total
	for i, n := range sorted {
		k := int64(len(sorted) - i)
		if n*k > left {
			return max(left/k, 0)
		}
		left -= n
	}
	return sorted[len(sorted)-1]
}
