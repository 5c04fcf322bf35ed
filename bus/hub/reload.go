package hub

// SetOptions applies new limits and settings (on reload). Ring limits apply
// at once to every bus; a session created with its own ring size keeps it.
func (h *Hub) SetOptions(opts Options) error {
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = DefaultMaxSessions
	}
	if opts.MaxAutoSessions <= 0 {
		opts.MaxAutoSessions = DefaultMaxAutoSessions
	}
	opts.Limits.PeerShare = opts.PeerShare
	if err := h.global.SetLimits(opts.Limits); err != nil {
		return err
	}
	h.mu.Lock()
	h.opts.Limits, h.opts.MaxSessions, h.opts.AutoCreate = opts.Limits, opts.MaxSessions, opts.AutoCreate
	h.opts.MaxAutoSessions, h.opts.PeerShare = opts.MaxAutoSessions, opts.PeerShare
	h.setShares(h.opts)
	if opts.MaxRingBytesTotal <= 0 {
		opts.MaxRingBytesTotal = DefaultMaxRingBytesTotal
	}
	h.opts.MaxRingBytesTotal = opts.MaxRingBytesTotal
	h.ringBudget.Store(opts.MaxRingBytesTotal)
	h.opts.AutoSessionTTL = opts.AutoSessionTTL
	h.mu.Unlock()
	h.setKeyWindow(opts.IdempotencyWindow)
	for _, s := range h.Sessions() {
		l := opts.Limits
		if s.RingSize > 0 {
			l.RingSize = s.RingSize
		}
		if err := s.Bus.SetLimits(l); err != nil {
			return err
		}
	}
	h.TrimRings()
	return nil
}
