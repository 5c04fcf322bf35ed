package ipc

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"time"

	"github.com/localbus/localbus/bus"
)

// ClientIDHeader names the publisher; its value becomes the envelope's
// "originator".
const ClientIDHeader = "Localbus-Client-Id"

// ndjsonType is the Content-Type of a newline-delimited JSON publish.
const ndjsonType = "application/x-ndjson"

// publishedEvent is one event of a publish body.
type publishedEvent struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// PublishReply is the body of a successful publish.
type PublishReply struct {
	IDs    []uint64 `json:"ids"`
	LastID uint64   `json:"lastId"`
}

// decodePublish decodes a publish body: one {"type","data"} object, a JSON
// array of them (at most maxBatch), or with ndjson one object per line. Any
// event over maxEventBytes is a 413; anything malformed a 400 naming the
// event. Nothing is published unless every event is valid.
func decodePublish(body []byte, ndjson bool, maxEventBytes int64, maxBatch int) ([]bus.Event, error) {
	var raws [][]byte
	if ndjson {
		for line := range bytes.Lines(body) {
			line = bytes.TrimSpace(line)
			if len(line) == 0 {
				continue
			}
			raws = append(raws, line)
			if len(raws) > maxBatch {
				return nil, errorf(http.StatusRequestEntityTooLarge, "batch_too_large", "more than %d events in one request", maxBatch)
			}
		}
	} else {
		trimmed := bytes.TrimSpace(body)
		switch {
		case len(trimmed) == 0:
			return nil, errorf(http.StatusBadRequest, "invalid_body", "empty body: send {\"type\":…,\"data\":…} or a JSON array of them")
		case trimmed[0] == '[':
			var arr []json.RawMessage
			if err := json.Unmarshal(trimmed, &arr); err != nil {
				return nil, errorf(http.StatusBadRequest, "invalid_body", "malformed JSON array: %v", err)
			}
			if len(arr) > maxBatch {
				return nil, errorf(http.StatusRequestEntityTooLarge, "batch_too_large", "%d events in one request; at most %d", len(arr), maxBatch)
			}
			for _, a := range arr {
				raws = append(raws, a)
			}
		default:
			raws = append(raws, trimmed)
		}
	}
	if len(raws) == 0 {
		return nil, errorf(http.StatusBadRequest, "invalid_body", "no events in the body")
	}
	events := make([]bus.Event, len(raws))
	for i, raw := range raws {
		if int64(len(raw)) > maxEventBytes {
			return nil, errorf(http.StatusRequestEntityTooLarge, "event_too_large", "event %d is %d bytes; at most %d", i, len(raw), maxEventBytes)
		}
		var pe publishedEvent
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&pe); err != nil {
			return nil, errorf(http.StatusBadRequest, "invalid_event", "event %d: want {\"type\":\"family:name\",\"data\":…}: %v", i, err)
		}
		if dec.More() {
			return nil, errorf(http.StatusBadRequest, "invalid_event", "event %d: trailing data after the object", i)
		}
		if err := bus.ValidatePublishType(pe.Type); err != nil {
			var ie *bus.InputError
			errors.As(err, &ie)
			return nil, errorf(http.StatusBadRequest, "invalid_type", "event %d: %s", i, ie.Error())
		}
		events[i] = bus.Event{Type: pe.Type, Data: pe.Data}
	}
	return events, nil
}

// validClientID reports whether a Localbus-Client-Id is 1 to 128 printable
// ASCII characters.
func validClientID(s string) bool {
	if len(s) < 1 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func (h *Handler) servePublish(w http.ResponseWriter, r *http.Request, c Caller) {
	o := h.options()
	id := r.PathValue("id")
	if err := bus.ValidateSessionID(id); err != nil {
		writeError(w, err)
		return
	}
	originator := r.Header.Get(ClientIDHeader)
	if _, ok := r.Header[http.CanonicalHeaderKey(ClientIDHeader)]; ok && !validClientID(originator) {
		writeError(w, errorf(http.StatusBadRequest, "invalid_client_id", "%s must be 1 to 128 printable ASCII characters", ClientIDHeader))
		return
	}
	ndjson := false
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, _ := mime.ParseMediaType(ct)
		ndjson = mt == ndjsonType
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, o.MaxBodyBytes))
	if err != nil {
		writeError(w, err)
		return
	}
	events, err := decodePublish(body, ndjson, o.MaxEventBytes, DefaultMaxBatch)
	if err != nil {
		writeError(w, err)
		return
	}
	for i := range events {
		if fam := bus.FamilyOf(events[i].Type); !c.Scopes.CanPublish(fam) {
			h.refuse(w, r, c, errorf(http.StatusForbidden, "forbidden", "event %d: this caller may not publish family %s; nothing was published", i, fam))
			return
		}
		events[i].Originator = originator
	}
	start := time.Now()
	first, last, err := o.Hub.Publish(id, events)
	h.metrics.publishSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		writeError(w, err)
		return
	}
	reply := PublishReply{IDs: make([]uint64, 0, last-first+1), LastID: last}
	for n := first; n <= last; n++ {
		reply.IDs = append(reply.IDs, n)
	}
	writeJSON(w, http.StatusOK, reply)
}
