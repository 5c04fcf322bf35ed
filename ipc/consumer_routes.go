package ipc

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/ipc/wire"
	"github.com/localbus/localbus/ipc/wire/grammar"
)

// The consumer routes (SPEC §2.4, §6): list a session's consumers,
// acknowledge for an explicit one (the SSE reader's way; a WebSocket
// reader sends {"op":"ack"}), forget one. Names are checked before the
// session is looked up.

// maxAckBody bounds the body of an ack.
const maxAckBody = 4 << 10

// consumerRef parses the {id} and {name} of a consumer route, in that
// order, before anything is looked up.
func consumerRef(r *http.Request) (session bus.SessionID, name string, err error) {
	if session, err = bus.ParseSessionID(r.PathValue("id")); err != nil {
		return bus.SessionID{}, "", err
	}
	if name, err = grammar.ParseConsumer(r.PathValue("name")); err != nil {
		return bus.SessionID{}, "", err
	}
	return session, name, nil
}

// serveListConsumers answers GET /api/v1/sessions/{id}/consumers: every
// consumer of the session, sorted by name, as a JSON array.
func (h *Handler) serveListConsumers(w http.ResponseWriter, r *http.Request, c Caller) {
	s, err := h.lookupSession(r)
	if err != nil {
		writeError(w, err)
		return
	}
	list := s.Consumers().List(s.Bus.LastID(), s.Bus.Epoch())
	out := make([]wire.Consumer, len(list))
	for i, ci := range list {
		out[i] = wire.Consumer{Name: ci.Name, AckedID: ci.AckedID, Pending: ci.Pending, Ack: string(ci.Ack),
			Connected: ci.Connected, LastActive: ci.LastActive.UTC(), Epoch: ci.Epoch}
	}
	writeJSON(w, http.StatusOK, out)
}

// parseAckBody reads an ack's body, {"id":N,"epoch":E}: id an event id,
// epoch optional.
func parseAckBody(body []byte) (id uint64, epoch string, err error) {
	var req struct {
		ID    json.RawMessage `json:"id"`
		Epoch *string         `json:"epoch"`
	}
	if err := decodeStrict(body, &req); err != nil {
		return 0, "", errorf(http.StatusBadRequest, wire.CodeInvalidBody, `want {"id": N, "epoch"?: "E"}: %v`, err)
	}
	if req.ID == nil {
		return 0, "", errorf(http.StatusBadRequest, wire.CodeInvalidID, `missing "id": the id of the last event handled`)
	}
	if id, err = grammar.ParseCursor(string(bytes.TrimSpace(req.ID))); err != nil {
		return 0, "", errorf(http.StatusBadRequest, wire.CodeInvalidID, `"id" must be an event id: a whole number from 0 to 2^53-1`)
	}
	if req.Epoch != nil {
		if *req.Epoch == "" {
			return 0, "", errorf(http.StatusBadRequest, wire.CodeInvalidBody, `"epoch" must not be empty: leave it out instead`)
		}
		epoch = *req.Epoch
	}
	return id, epoch, nil
}

// serveAckConsumer answers POST /api/v1/sessions/{id}/consumers/{name}/ack
// once the ack is stored, with the consumer's acknowledged id.
func (h *Handler) serveAckConsumer(w http.ResponseWriter, r *http.Request, c Caller) {
	session, name, err := consumerRef(r)
	if err != nil {
		writeError(w, err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxAckBody))
	if err != nil {
		writeError(w, err)
		return
	}
	id, epoch, err := parseAckBody(body)
	if err != nil {
		writeError(w, err)
		return
	}
	s, err := h.sessionOf(session)
	if err != nil {
		writeError(w, err)
		return
	}
	acked, err := s.Consumers().Ack(name, id, epoch, s.Bus.LastID(), time.Now())
	if err != nil {
		writeError(w, consumerStoreError(err))
		return
	}
	h.metrics.acks.Inc()
	writeJSON(w, http.StatusOK, wire.AckReply{Name: name, AckedID: acked})
}

// serveDeleteConsumer answers DELETE /api/v1/sessions/{id}/consumers/{name}:
// the consumer is forgotten, and its live stream gets stream:closed
// replaced.
func (h *Handler) serveDeleteConsumer(w http.ResponseWriter, r *http.Request, c Caller) {
	session, name, err := consumerRef(r)
	if err != nil {
		writeError(w, err)
		return
	}
	s, err := h.sessionOf(session)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.Consumers().Delete(name); err != nil {
		writeError(w, consumerStoreError(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// consumerStoreError is the answer to a consumer's store failing for lack
// of space: nothing was stored, which a 507 says better than its publish
// wording.
func consumerStoreError(err error) error {
	if errors.Is(err, bus.ErrDiskFull) {
		return errorf(http.StatusInsufficientStorage, wire.CodeDiskFull, "the journal's disk is full: nothing was stored")
	}
	return err
}
