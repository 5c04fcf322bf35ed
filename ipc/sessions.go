package ipc

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/hub"
)

// SessionInfo is what GET /api/v1/sessions/{id} reports of a session.
type SessionInfo struct {
	ID          string   `json:"id"`
	Epoch       string   `json:"epoch"`
	LastID      uint64   `json:"lastId"`
	EarliestID  *uint64  `json:"earliestId"`
	Subscribers int      `json:"subscribers"`
	Ring        RingInfo `json:"ring"`
	// Durability is present when the session is journaled.
	Durability *DurabilityInfo `json:"durability,omitempty"`
}

// DurabilityInfo is a journaled session's figures.
type DurabilityInfo struct {
	// BytesOnDisk is what the session's retained events take on disk.
	BytesOnDisk int64 `json:"bytesOnDisk"`
	// LastSyncedID is the last id known to be on stable storage.
	LastSyncedID uint64 `json:"lastSyncedId"`
}

// RingInfo is a session's replay ring occupancy and limits.
type RingInfo struct {
	Count    int   `json:"count"`
	Bytes    int64 `json:"bytes"`
	MaxCount int   `json:"maxCount"`
	MaxBytes int64 `json:"maxBytes"`
}

// SessionList is the body of GET /api/v1/sessions.
type SessionList struct {
	Sessions []SessionInfo `json:"sessions"`
}

func sessionInfo(s *hub.Session) SessionInfo {
	st := s.Bus.Stats()
	info := SessionInfo{
		ID: s.ID, Epoch: st.Epoch, LastID: st.LastID, Subscribers: st.Subscribers,
		Ring: RingInfo{Count: st.RingLen, Bytes: st.RingBytes, MaxCount: st.Limits.RingSize, MaxBytes: st.Limits.RingMaxBytes},
	}
	if st.EarliestID != 0 {
		e := st.EarliestID
		info.EarliestID = &e
	}
	if d, ok := s.Durability(); ok {
		info.Durability = &DurabilityInfo{BytesOnDisk: d.BytesOnDisk, LastSyncedID: d.LastSyncedID}
	}
	return info
}

// CreateSessionRequest is the optional body of POST /api/v1/sessions, as a
// client sends it. A zero RingSize is left out (the daemon's ring_size);
// sent explicitly, 0 is a 400.
type CreateSessionRequest struct {
	ID       string `json:"id,omitempty"`
	RingSize int    `json:"ringSize,omitempty"`
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
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, errorf(http.StatusBadRequest, "invalid_body", "want {\"id\"?: string, \"ringSize\"?: number}: %v", err))
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
			writeError(w, errorf(http.StatusBadRequest, "invalid_ringSize", "ringSize must be 1 to %d, got %d", bus.MaxRingSize, ringSize))
			return
		}
	}
	s, err := h.options().Hub.Create(req.ID, ringSize)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Location", "/api/v1/sessions/"+s.ID)
	writeJSON(w, http.StatusCreated, sessionInfo(s))
}

func (h *Handler) serveListSessions(w http.ResponseWriter, r *http.Request, c Caller) {
	list := SessionList{Sessions: []SessionInfo{}}
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
		return nil, errorf(http.StatusNotFound, "not_found", "no such session %q", id)
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
