package ipc

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/ipc/wire"
)

// sessionInfo is what GET /api/v1/sessions/{id} reports of s.
func sessionInfo(s *hub.Session) wire.SessionInfo {
	st := s.Bus.Stats()
	info := wire.SessionInfo{
		ID: s.ID, Epoch: st.Epoch, LastID: st.LastID, Subscribers: st.Subscribers, Consumers: s.Consumers().Len(),
		Ring: wire.RingInfo{Count: st.RingLen, Bytes: st.RingBytes, MaxCount: st.Limits.RingSize, MaxBytes: st.Limits.RingMaxBytes},
	}
	info.PublishRate, info.DeliverRate = s.Rates()
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
	id, err := bus.ParseSessionID(req.ID)
	if err != nil {
		writeError(w, err)
		return
	}
	s, err := h.options().Hub.Create(id, ringSize)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Location", wire.SessionPath(s.ID))
	writeJSON(w, http.StatusCreated, sessionInfo(s))
}

// serveListSessions is one page of the sessions, in id order (SPEC §6):
// ?limit= (1 to 10,000, default 1000) after ?after= (an id, which need not
// exist), with next when more follow.
func (h *Handler) serveListSessions(w http.ResponseWriter, r *http.Request, c Caller) {
	after, limit, err := parsePage(r)
	if err != nil {
		writeError(w, err)
		return
	}
	page, more := h.options().Hub.Page(after, limit)
	next := ""
	if more && len(page) > 0 {
		next = page[len(page)-1].ID
	}
	writeSessionList(w, func(yield func(wire.SessionInfo) bool) {
		for _, s := range page {
			if !yield(sessionInfo(s)) {
				return
			}
		}
	}, next)
}

// parsePage reads ?after= and ?limit=, each at most once.
func parsePage(r *http.Request) (after string, limit int, err error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return "", 0, errorf(http.StatusBadRequest, wire.CodeInvalidQuery, "malformed query string")
	}
	limit = wire.DefaultPageLimit
	if vs, ok := q[wire.ParamLimit]; ok {
		n, err := strconv.Atoi(vs[0])
		if len(vs) > 1 || err != nil || n < 1 || n > wire.MaxPageLimit || vs[0] != strconv.Itoa(n) {
			return "", 0, errorf(http.StatusBadRequest, wire.CodeInvalidLimit, "limit must be one decimal number from 1 to %d", wire.MaxPageLimit)
		}
		limit = n
	}
	if vs, ok := q[wire.ParamAfter]; ok {
		if len(vs) > 1 {
			return "", 0, errorf(http.StatusBadRequest, wire.CodeInvalidAfter, "after given more than once")
		}
		if _, err := bus.ParseSessionID(vs[0]); err != nil {
			return "", 0, errorf(http.StatusBadRequest, wire.CodeInvalidAfter, "after must be a session id")
		}
		after = vs[0]
	}
	return after, limit, nil
}

// lookupSession parses the {id} of the path and finds its session.
func (h *Handler) lookupSession(r *http.Request) (*hub.Session, error) {
	id, err := bus.ParseSessionID(r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	return h.sessionOf(id)
}

// sessionOf finds session id, a 404 when there is none.
func (h *Handler) sessionOf(id bus.SessionID) (*hub.Session, error) {
	s, ok := h.options().Hub.Session(id.String())
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
