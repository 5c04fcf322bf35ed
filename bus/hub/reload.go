package hub

// Validate reports the first option SetOptions would refuse, as a
// *bus.InputError, or nil.
func (o Options) Validate() error {
	o.fill()
	return o.Limits.Validate()
}

// SetOptions applies new limits and settings (on reload). opts must have
// passed Validate, which a reload checks before it changes anything: so
// SetOptions cannot fail, and it panics on options Validate refuses, as a
// caller's bug. Ring limits apply at once to every bus; a session created
// with its own ring size keeps it. The Journal, GlobalEpoch, Logger and Now
// of New stay.
func (h *Hub) SetOptions(opts Options) {
	if err := opts.Validate(); err != nil {
		panic("hub: SetOptions with options Validate refuses: " + err.Error())
	}
	opts.fill()
	// Nothing below fails: the limits passed Validate, and a session's own
	// ring size passed Create's check.
	h.global.SetLimits(opts.Limits)
	h.mu.Lock()
	h.opts.Limits, h.opts.MaxSessions, h.opts.AutoCreate = opts.Limits, opts.MaxSessions, opts.AutoCreate
	h.opts.MaxAutoSessions, h.opts.PeerShare = opts.MaxAutoSessions, opts.PeerShare
	h.opts.IdempotencyMaxBytes = opts.IdempotencyMaxBytes
	h.setShares(h.opts)
	h.opts.MaxRingBytesTotal = opts.MaxRingBytesTotal
	h.ringBudget.Store(opts.MaxRingBytesTotal)
	h.opts.AutoSessionTTL = opts.AutoSessionTTL
	h.opts.MaxConsumers, h.opts.ConsumerTTL = opts.MaxConsumers, opts.ConsumerTTL
	h.mu.Unlock()
	h.setKeyWindow(opts.IdempotencyWindow)
	for _, s := range h.Sessions() {
		l := opts.Limits
		if s.RingSize > 0 {
			l.RingSize = s.RingSize
		}
		s.Bus.SetLimits(l)
		s.consumers.SetLimit(opts.MaxConsumers, opts.PeerShare)
	}
	h.TrimRings()
}
