package ipc

import (
	"crypto/sha256"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/ipc/wire"
)

// Idempotent publishes (SPEC §6): a publish with an Idempotency-Key runs
// through hub.Hub.PublishOnce, which remembers its result per session and
// key, as a value. The body is read whole first (a streaming NDJSON body
// too, up to max_body_bytes) and published as one batch, so its ids are
// contiguous and its key is stored with its events; its digest decides
// between "the same request again" (the first reply, rendered again from
// the result, with Idempotent-Replayed: true, nothing published) and
// "another request with the same key" (409). Only a publish that
// published something is remembered: a refused one may be sent again with
// its key.

// publishReq is what a publish asked for, besides its body.
type publishReq struct {
	id         bus.SessionID
	originator string
	ndjson     bool
	streaming  bool
	ack        string
}

// idempotencyKey reads the Idempotency-Key header: keyed false when absent,
// a 400 when it is repeated, empty, too long or not printable ASCII.
func idempotencyKey(r *http.Request) (key string, keyed bool, err error) {
	vs, ok := r.Header[http.CanonicalHeaderKey(wire.HeaderIdempotencyKey)]
	if !ok {
		return "", false, nil
	}
	if len(vs) != 1 || len(vs[0]) < 1 || len(vs[0]) > wire.MaxIdempotencyKey || !printable(vs[0]) {
		return "", false, errorf(http.StatusBadRequest, wire.CodeInvalidIdemKey, "%s must be one header of 1 to %d printable ASCII characters", wire.HeaderIdempotencyKey, wire.MaxIdempotencyKey)
	}
	return vs[0], true, nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// publishOnce serves a publish with an Idempotency-Key.
func (h *Handler) publishOnce(w http.ResponseWriter, r *http.Request, c Caller, p publishReq, key string) {
	o := h.options()
	bd, err := h.readBody(w, r, c, o.MaxBodyBytes)
	if err != nil {
		writeError(w, err)
		return
	}
	defer bd.done()
	body := bd.b
	d := sha256.New()
	d.Write([]byte(strconv.FormatBool(p.ndjson) + "," + strconv.FormatBool(p.streaming) + "," + p.ack + "\n"))
	d.Write(body)
	var digest [32]byte
	d.Sum(digest[:0])
	// A keyed NDJSON body is one unit, however many lines: max_body_bytes
	// bounds it.
	maxBatch := DefaultMaxBatch
	if p.ndjson {
		maxBatch = math.MaxInt
	}
	events, err := decodePublish(body, p.ndjson, o.MaxEventBytes, maxBatch)
	if err != nil {
		writeError(w, err)
		return
	}
	for i := range events {
		if fam := events[i].Type.Family().String(); !c.Scopes.CanPublish(fam) {
			h.refuse(w, r, c, errorf(http.StatusForbidden, wire.CodeForbidden, "event %d: this caller may not publish family %s; nothing was published", i, fam))
			return
		}
		events[i].Originator = p.originator
	}
	start := time.Now()
	res, replayed, err := o.Hub.PublishOnce(c.Share, p.id, key, digest, events)
	if !replayed {
		h.metrics.publishSeconds.Observe(time.Since(start).Seconds())
	}
	if err != nil {
		writeError(w, err)
		return
	}
	if replayed {
		w.Header().Set(wire.HeaderIdempotentReplayed, "true")
	}
	writePublishResult(w, res, p)
}

// writePublishResult renders the reply of a keyed publish from its
// result, in the form the request asked for: {"ids","lastId"} for a
// body, a wire.StreamReply for a streaming one, preceded by {"id":N}
// lines with ?ack=line. The hub remembers only publishes that published,
// so the reply is a 200, the first time and for every repeat.
func writePublishResult(w http.ResponseWriter, res hub.Result, p publishReq) {
	w.Header().Set("Cache-Control", "no-store")
	ids := make([]uint64, 0, min(res.Count, wire.MaxStreamAckIDs+1))
	for n := range res.Count {
		if !p.streaming || n < wire.MaxStreamAckIDs {
			ids = append(ids, res.First+uint64(n))
		}
	}
	if !p.streaming {
		writeJSON(w, http.StatusOK, wire.PublishReply{IDs: ids, LastID: res.LastID})
		return
	}
	sr := wire.StreamReply{Count: res.Count, FirstID: res.First, LastID: res.LastID, IDs: ids}
	if res.Count > wire.MaxStreamAckIDs {
		sr.IDs = nil
	}
	if p.ack != wire.AckLine {
		writeJSON(w, http.StatusOK, &sr)
		return
	}
	w.Header().Set("Content-Type", wire.ContentTypeNDJSON)
	w.WriteHeader(http.StatusOK)
	var b []byte
	for n := range res.Count {
		b = append(b, `{"id":`...)
		b = strconv.AppendUint(b, res.First+uint64(n), 10)
		b = append(b, "}\n"...)
		if len(b) > 32<<10 {
			w.Write(b)
			b = b[:0]
		}
	}
	last, _ := jsonLine(&sr)
	w.Write(append(b, last...))
}
