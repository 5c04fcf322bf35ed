package ipc

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/ipc/wire"
)

// publishedEvent is one event of a publish body.
type publishedEvent struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// decodePublish decodes a publish body: one {"type","data"} object, a JSON
// array of them (at most maxBatch), or with ndjson one object per line. Any
// event over maxEventBytes is a 413; anything malformed a 400 naming the
// event. Nothing is published unless every event is valid. The events'
// data may share memory with body.
//
// This is where a publish parses each event's type, once, into a bus.Type,
// which the hub, the session's bus and the global bus take as it is (the
// streaming publish does the same line by line).
func decodePublish(body []byte, ndjson bool, maxEventBytes int64, maxBatch int) ([]bus.Event, error) {
	if events, ok := scanPublish(body, ndjson, maxEventBytes, maxBatch); ok {
		return events, nil
	}
	return decodePublishReference(body, ndjson, maxEventBytes, maxBatch)
}

// scanPublish is decodePublish's fast path (see publish_scan.go). It only
// ever succeeds: on any doubt, or any error to report, it returns ok false
// and the reference decoder decides.
func scanPublish(body []byte, ndjson bool, maxEventBytes int64, maxBatch int) (events []bus.Event, ok bool) {
	var one [1][]byte
	raws := one[:0]
	if ndjson {
		for line := range bytes.Lines(body) {
			if line = bytes.TrimSpace(line); len(line) > 0 {
				raws = append(raws, line)
			}
		}
	} else {
		i := skipSpace(body, 0)
		switch {
		case i == len(body):
			return nil, false
		case body[i] == '[':
			if raws, ok = splitArray(body, make([][]byte, 0, 64)); !ok {
				return nil, false
			}
		default:
			raws = append(raws, bytes.TrimSpace(body))
		}
	}
	if len(raws) == 0 || len(raws) > maxBatch {
		return nil, false
	}
	events = make([]bus.Event, len(raws))
	for i, raw := range raws {
		if int64(len(raw)) > maxEventBytes || !scanEvent(raw, &events[i]) {
			return nil, false
		}
	}
	return events, true
}

// decodePublishReference is decodePublish with encoding/json: the
// reference for what is accepted, and the source of every error message.
func decodePublishReference(body []byte, ndjson bool, maxEventBytes int64, maxBatch int) ([]bus.Event, error) {
	var raws [][]byte
	if ndjson {
		for line := range bytes.Lines(body) {
			line = bytes.TrimSpace(line)
			if len(line) == 0 {
				continue
			}
			raws = append(raws, line)
			if len(raws) > maxBatch {
				return nil, errorf(http.StatusRequestEntityTooLarge, wire.CodeBatchTooLarge, "more than %d events in one request", maxBatch)
			}
		}
	} else {
		trimmed := bytes.TrimSpace(body)
		switch {
		case len(trimmed) == 0:
			return nil, errorf(http.StatusBadRequest, wire.CodeInvalidBody, "empty body: send {\"type\":…,\"data\":…} or a JSON array of them")
		case trimmed[0] == '[':
			var arr []json.RawMessage
			if err := json.Unmarshal(trimmed, &arr); err != nil {
				return nil, errorf(http.StatusBadRequest, wire.CodeInvalidBody, "malformed JSON array: %v", err)
			}
			if len(arr) > maxBatch {
				return nil, errorf(http.StatusRequestEntityTooLarge, wire.CodeBatchTooLarge, "%d events in one request; at most %d", len(arr), maxBatch)
			}
			for _, a := range arr {
				raws = append(raws, a)
			}
		default:
			raws = append(raws, trimmed)
		}
	}
	if len(raws) == 0 {
		return nil, errorf(http.StatusBadRequest, wire.CodeInvalidBody, "no events in the body")
	}
	events := make([]bus.Event, len(raws))
	for i, raw := range raws {
		if int64(len(raw)) > maxEventBytes {
			return nil, errorf(http.StatusRequestEntityTooLarge, wire.CodeEventTooLarge, "event %d is %d bytes; at most %d", i, len(raw), maxEventBytes)
		}
		ev, err := decodeEvent(raw)
		if err != nil {
			return nil, eventError(err, "event", i)
		}
		events[i] = ev
	}
	return events, nil
}

// eventError names the event (or line) an error of decodeEvent is about.
func eventError(err error, what string, n int) error {
	e := asError(err)
	return errorf(e.Status, e.Code, "%s %d: %s", what, n, e.Message)
}

// decodeEvent decodes one event object with encoding/json.
func decodeEvent(raw []byte) (bus.Event, error) {
	var pe publishedEvent
	if err := decodeStrict(raw, &pe); errors.Is(err, errTrailing) {
		return bus.Event{}, errorf(http.StatusBadRequest, wire.CodeInvalidEvent, "trailing data after the object")
	} else if err != nil {
		return bus.Event{}, errorf(http.StatusBadRequest, wire.CodeInvalidEvent, "want {\"type\":\"family:name\",\"data\":…}: %v", err)
	}
	typ, err := bus.ParseType(pe.Type)
	if err != nil {
		var ie *bus.InputError
		errors.As(err, &ie)
		return bus.Event{}, errorf(http.StatusBadRequest, wire.CodeInvalidType, "%s", ie.Message())
	}
	return bus.Event{Type: typ, Data: pe.Data}, nil
}

// isNDJSON reports whether a Content-Type names NDJSON: its media type,
// before any parameter, is application/x-ndjson in any case.
func isNDJSON(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mt), wire.ContentTypeNDJSON)
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
	id, err := bus.ParseSessionID(r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	originator := r.Header.Get(wire.HeaderClientID)
	if _, ok := r.Header[http.CanonicalHeaderKey(wire.HeaderClientID)]; ok && !validClientID(originator) {
		writeError(w, errorf(http.StatusBadRequest, wire.CodeInvalidClientID, "%s must be 1 to 128 printable ASCII characters", wire.HeaderClientID))
		return
	}
	key, keyed, err := idempotencyKey(r)
	if err != nil {
		writeError(w, err)
		return
	}
	ndjson := isNDJSON(r.Header.Get("Content-Type"))
	ack, err := parseAck(r.URL.RawQuery)
	if err != nil {
		writeError(w, err)
		return
	}
	if ack != "" && !ndjson {
		writeError(w, errorf(http.StatusBadRequest, wire.CodeInvalidAck, "ack applies to a streaming publish: send Content-Type: %s", wire.ContentTypeNDJSON))
		return
	}
	streaming := ndjson && (r.ContentLength < 0 || ack != "")
	if keyed {
		h.publishOnce(w, r, c, publishReq{id: id, originator: originator, ndjson: ndjson, streaming: streaming, ack: ack}, key)
		return
	}
	if streaming {
		h.publishStream(w, r, r.Body, c, id, originator, ack == wire.AckLine)
		return
	}
	body, err := h.readBody(w, r, c, o.MaxBodyBytes)
	if err != nil {
		writeError(w, err)
		return
	}
	// The events' data point into the body until the bus has copied them.
	defer body.done()
	h.publishBody(w, r, c, id, originator, ndjson, body.b)
}

// publishBody publishes a whole body (one event, a batch, or NDJSON as one
// batch) and answers; it reports whether the events were published.
func (h *Handler) publishBody(w http.ResponseWriter, r *http.Request, c Caller, id bus.SessionID, originator string, ndjson bool, body []byte) bool {
	o := h.options()
	events, err := decodePublish(body, ndjson, o.MaxEventBytes, DefaultMaxBatch)
	if err != nil {
		writeError(w, err)
		return false
	}
	for i := range events {
		if fam := events[i].Type.Family().String(); !c.Scopes.CanPublish(fam) {
			h.refuse(w, r, c, errorf(http.StatusForbidden, wire.CodeForbidden, "event %d: this caller may not publish family %s; nothing was published", i, fam))
			return false
		}
		events[i].Originator = originator
	}
	first, last, err := h.publish(c, id, events)
	if err != nil {
		writeError(w, err)
		return false
	}
	var digits [20]byte
	idLen := len(strconv.AppendUint(digits[:0], last, 10))
	b := make([]byte, 0, 32+int(last-first+1)*(idLen+1))
	b = append(b, `{"ids":[`...)
	for n := first; n <= last; n++ {
		if n > first {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, n, 10)
	}
	b = append(b, `],"lastId":`...)
	b = strconv.AppendUint(b, last, 10)
	b = append(b, "}\n"...)
	setJSONHeaders(w)
	w.WriteHeader(http.StatusOK)
	w.Write(b)
	return true
}

// publish publishes a batch of caller c's, on c's share of the sessions
// a publish creates, and records its latency.
func (h *Handler) publish(c Caller, id bus.SessionID, events []bus.Event) (first, last uint64, err error) {
	start := time.Now()
	first, last, err = h.options().Hub.PublishAs(c.Share, id, events)
	h.metrics.publishSeconds.Observe(time.Since(start).Seconds())
	return first, last, err
}

// parseAck reads ?ack= of a publish: "" when absent.
func parseAck(rawQuery string) (string, error) {
	if rawQuery == "" {
		return "", nil
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", errorf(http.StatusBadRequest, wire.CodeInvalidQuery, "malformed query string")
	}
	vs, ok := q[wire.ParamAck]
	if !ok {
		return "", nil
	}
	if len(vs) != 1 || (vs[0] != wire.AckEnd && vs[0] != wire.AckLine) {
		return "", errorf(http.StatusBadRequest, wire.CodeInvalidAck, "ack must be %q or %q", wire.AckEnd, wire.AckLine)
	}
	return vs[0], nil
}
