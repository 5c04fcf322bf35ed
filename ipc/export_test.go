package ipc

// InflightBodyBytes returns the bytes of request bodies being read now,
// for tests.
func (h *Handler) InflightBodyBytes() int64 { return h.bodies.Held() }
