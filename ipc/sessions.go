package ipc

import (
	"bytes"
	"io"
	"net/http"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/ipc/wire"
)

// sessionInfo is what GET /api/v1/sessions/{id} reports of s.
func sessionInfo(s *hub.Session) wire.SessionInfo {
	st := s.Bus.Stats()
	info := wire.SessionInfo{
		ID: s.ID, Epoch: st.Epoch, LastID: st.LastID, Subscribers: st.Subscribers,
		Ring: wire.RingInfo{Count: st.RingLen, Bytes: st.RingBytes, MaxCount: st.Limits.RingSize, MaxBytes: st.Limits.RingMaxBytes},
	}
	if st.EarliestID != 0 {
		e := st.EarliestID
		info.EarliestID = &e
	}
	if d, ok := s.Durability(); ok {
		info.Durability = &wire.DurabilityInfo{BytesOnDisk: d.BytesOnDisk, LastSyncedID: d.LastSyncedID}
	}
	return info
}

func (h *Handler) serveCreateSession(w http.ResponseWriter, r *http.Request, c Caller) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
	if err != nil {
		writeError(w, err)
		return
	}
	// ringSize is a pointer here so that an explicit 0 is refused rather
	// than taken for "absent" (the bus default).
	var req struct {
		ID       string `json:"id"`
		RingSize *int   `json:"ringSize"`
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := decodeStrict(body, &req); err != nil {
			writeError(w, errorf(http.StatusBadRequest, wire.CodeInvalidBody, "want {\"id\"?: string, \"ringSize\"?: number}: %v", err))
			return
		}
	}
	if req.ID == "" {
		req.ID = "s-" + bus.NewEpoch()
	}
	ringSize := 0 // the bus default
	if req.RingSize != nil {
		ringSize = *req.RingSize
		if ringSize < 1 || ringSize > bus.MaxRingSize {
			writeError(w, errorf(http.StatusBadRequest, wire.CodeInvalidRingSize, "ringSize must be 1 to %d, got %d", bus.MaxRingSize, ringSize))
			return
		}
	}
	s, err := h.options().Hub.Create(req.ID, ringSize)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Location", wire.SessionPath(s.ID))
	writeJSON(w, http.StatusCreated, sessionInfo(s))
}

func (h *Handler) serveListSessions(w http.ResponseWriter, r *http.Request, c Caller) {
	list := wire.SessionList{Sessions: []wire.SessionInfo{}}
	for _, s := range h.options().Hub.Sessions() {
		list.Sessions = append(list.Sessions, sessionInfo(s))
	}
	writeJSON(w, http.StatusOK, list)
}

// lookupSession validates the {id} of the path and finds its session.
func (h *Handler) lookupSession(r *http.Request) (*hub.Session, error) {
	id := r.PathValue("id")
	if err := bus.ValidateSessionID(id); err != nil {
		return nil, err
	}
	s, ok := h.options().Hub.Session(id)
	if !ok {
		return nil, errorf(http.StatusNotFound, wire.CodeNotFound, "no such session %q", id)
	}
	return s, nil
}

func (h *Handler) serveShowSession(w http.ResponseWriter, r *http.Request, c Caller) {
	s, err := h.lookupSession(r)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, sessionInfo(s))
}

func (h *Handler) serveDeleteSession(w http.ResponseWriter, r *http.Request, c Caller) {
	s, err := h.lookupSession(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := h.options().Hub.Delete(s.ID); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
