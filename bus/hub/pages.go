package hub

import (
	"slices"
	"sort"
	"strings"
)

// Page returns at most limit sessions in id order (byte order), starting
// after the id after ("" for the first page; it need not name a session),
// and reports whether more follow. A listing costs a binary search and the
// page: the sorted order is kept until a session is created or deleted, and
// sorted again, outside the hub's lock, by the next listing after that.
func (h *Hub) Page(after string, limit int) (page []*Session, more bool) {
	order := h.sorted()
	i := sort.Search(len(order), func(i int) bool { return order[i].ID > after })
	end := min(i+max(limit, 0), len(order))
	return slices.Clone(order[i:end]), end < len(order)
}

// sorted returns every session sorted by id; the caller must not modify
// the slice.
func (h *Hub) sorted() []*Session {
	h.mu.Lock()
	if h.order != nil {
		o := h.order
		h.mu.Unlock()
		return o
	}
	gen := h.orderGen
	out := make([]*Session, 0, len(h.sessions))
	for _, s := range h.sessions {
		out = append(out, s)
	}
	h.mu.Unlock()
	slices.SortFunc(out, func(a, b *Session) int { return strings.Compare(a.ID, b.ID) })
	h.mu.Lock()
	if h.orderGen == gen {
		h.order = out
	}
	h.mu.Unlock()
	return out
}

// all returns every session in no particular order (sorted when the order
// is cached); the caller must not modify the slice.
func (h *Hub) all() []*Session {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.order != nil {
		return h.order
	}
	out := make([]*Session, 0, len(h.sessions))
	for _, s := range h.sessions {
		out = append(out, s)
	}
	return out
}

// ConsumerCount returns the number of consumers of every session.
func (h *Hub) ConsumerCount() int {
	n := 0
	for _, s := range h.all() {
		n += s.consumers.Len()
	}
	return n
}

// ConsumerFigures returns the number of consumers of every session and
// how many events they have pending together, for metrics.
func (h *Hub) ConsumerFigures() (consumers int, pending uint64) {
	for _, s := range h.all() {
		if s.consumers.Len() == 0 {
			continue
		}
		consumers += s.consumers.Len()
		pending += s.consumers.Pending(s.Bus.LastID(), s.Bus.Epoch())
	}
	return consumers, pending
}
