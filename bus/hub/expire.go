package hub

import (
	"slices"
	"strings"
	"time"
)

// ExpireIdle deletes, as Delete does, every session a publish created that
// has had no publish since now minus AutoSessionTTL, has no subscriber
// and no consumer with pending events, and returns their ids, sorted. Their
// localbus:session-closed carries reason "expired". It does nothing when
// AutoSessionTTL is 0.
//
// A publish racing it either lands first, and the session is kept, or
// finds the bus closed, as when it races Delete, and lands in the session
// made anew (auto-create is on for any session that can expire): the idle
// check and the close of the bus happen under the session's publishMu,
// which a publish holds from its stage until it records its time.
func (h *Hub) ExpireIdle(now time.Time) []string {
	h.mu.Lock()
	ttl := h.opts.AutoSessionTTL
	var candidates []*Session
	if ttl > 0 && !h.closed {
		for _, s := range h.sessions {
			if s.auto {
				candidates = append(candidates, s)
			}
		}
	}
	h.mu.Unlock()
	slices.SortFunc(candidates, func(a, b *Session) int { return strings.Compare(a.ID, b.ID) })
	var expired []string
	for _, s := range candidates {
		if h.expire(s, now.Add(-ttl)) {
			expired = append(expired, s.ID)
		}
	}
	return expired
}

// expire deletes session s if it has been idle since before cutoff and has
// no subscriber and no consumer with pending events (SPEC §2): a service
// that reads through a consumer comes back for them. It reports whether
// it did.
func (h *Hub) expire(s *Session, cutoff time.Time) bool {
	s.publishMu.Lock()
	if s.active.After(cutoff) || s.Bus.Stats().Subscribers > 0 || s.consumers.Pending(s.Bus.LastID(), s.Bus.Epoch()) > 0 {
		s.publishMu.Unlock()
		return false
	}
	h.mu.Lock()
	if h.closed || h.sessions[s.ID] != s {
		// Deleted (or deleted and created again) meanwhile.
		h.mu.Unlock()
		s.publishMu.Unlock()
		return false
	}
	done := h.unlinkLocked(s)
	h.mu.Unlock()
	// Closed before publishMu is let go: a publish waiting for it stages
	// onto a closed bus and tries again (publish).
	s.Bus.Close()
	s.publishMu.Unlock()
	if err := h.forget(s, done, "expired"); err != nil {
		h.opts.Logger.Error("deleting an expired session", "session", s.ID, "err", err)
	}
	return true
}

// AutoSessionTTL returns the idle time after which ExpireIdle deletes a
// session a publish created; 0 when they are kept.
func (h *Hub) AutoSessionTTL() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.opts.AutoSessionTTL
}

// ExpireConsumers forgets, in every session, the consumers that have had no
// stream for ConsumerTTL (SPEC §2.4), logs each, and returns how many it
// forgot. It does nothing when ConsumerTTL is 0.
func (h *Hub) ExpireConsumers(now time.Time) int {
	h.mu.Lock()
	ttl := h.opts.ConsumerTTL
	h.mu.Unlock()
	if ttl <= 0 {
		return 0
	}
	n := 0
	for _, s := range h.Sessions() {
		names, err := s.consumers.Expire(now, ttl)
		for _, name := range names {
			h.opts.Logger.Info("consumer expired", "session", s.ID, "consumer", name, "consumer_ttl", ttl)
		}
		if err != nil {
			h.opts.Logger.Error("deleting an expired consumer", "session", s.ID, "err", err)
		}
		n += len(names)
	}
	return n
}

// ConsumerTTL returns the time without a stream after which
// ExpireConsumers forgets a consumer; 0 when they are kept.
func (h *Hub) ConsumerTTL() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.opts.ConsumerTTL
}
