package ipc

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/ipc/wire"
)

// Idempotent publishes (SPEC §6): a publish with an Idempotency-Key runs
// through hub.Hub.Once, which remembers its reply per session and key. The
// body is read whole first (a streaming NDJSON body too, up to
// max_body_bytes), so that its digest decides between "the same request
// again" (the first reply, with Idempotent-Replayed: true, nothing
// published) and "another request with the same key" (409). Only a publish
// that published something is remembered: a refused one may be sent again
// with its key.

// maxRememberedReply bounds the reply kept for a key: a streaming publish
// with ?ack=line that published more lines is remembered by its final
// wire.StreamReply alone.
const maxRememberedReply = 1 << 20

// publishReq is what a publish asked for, besides its body.
type publishReq struct {
	id, originator string
	ndjson         bool
	streaming      bool
	ack            string
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
	bd, err := h.readBody(w, r, c, h.options().MaxBodyBytes)
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
	result, replayed, err := h.options().Hub.OnceAs(c.Share, p.id, key, digest, func() (hub.Result, bool) {
		rec := &recorder{ResponseWriter: w}
		if p.streaming {
			sr := h.publishStream(rec, r, bytes.NewReader(body), c, p.id, p.originator, p.ack == wire.AckLine)
			if rec.over && sr.Count > 0 {
				b, _ := json.Marshal(&sr)
				return publishResult{Status: http.StatusOK, ContentType: wire.ContentTypeJSON, Body: append(b, '\n')}.encode(), true
			}
			return rec.result().encode(), sr.Count > 0
		}
		published := h.publishBody(rec, r, c, p.id, p.originator, p.ndjson, body)
		return rec.result().encode(), published
	})
	if err != nil {
		writeError(w, err)
		return
	}
	if !replayed {
		return // answered as it was published
	}
	reply, err := decodeResult(result)
	if err != nil {
		writeError(w, err)
		return
	}
	if reply.ContentType != "" {
		w.Header().Set("Content-Type", reply.ContentType)
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set(wire.HeaderIdempotentReplayed, "true")
	w.WriteHeader(reply.Status)
	w.Write(reply.Body)
}

// recorder passes a reply through to the client and keeps a copy, up to
// maxRememberedReply bytes.
type recorder struct {
	http.ResponseWriter
	status int
	buf    bytes.Buffer
	over   bool // the reply was longer than maxRememberedReply
}

func (rc *recorder) WriteHeader(status int) {
	if rc.status == 0 {
		rc.status = status
	}
	rc.ResponseWriter.WriteHeader(status)
}

func (rc *recorder) Write(p []byte) (int, error) {
	if rc.status == 0 {
		rc.status = http.StatusOK
	}
	if rc.buf.Len()+len(p) > maxRememberedReply {
		rc.over = true
	} else if !rc.over {
		rc.buf.Write(p)
	}
	return rc.ResponseWriter.Write(p)
}

// Flush passes a flush on, for streaming replies.
func (rc *recorder) Flush() { http.NewResponseController(rc.ResponseWriter).Flush() }

// Unwrap lets http.ResponseController reach the connection's deadlines.
func (rc *recorder) Unwrap() http.ResponseWriter { return rc.ResponseWriter }

func (rc *recorder) result() publishResult {
	return publishResult{Status: rc.status, ContentType: rc.Header().Get("Content-Type"), Body: bytes.Clone(rc.buf.Bytes())}
}

// A publishResult is the answer to a publish with a key, as the router
// sent it and renders it again for a request that repeats the key. The
// hub keeps it as a hub.Result, its JSON encoding, which is also the form
// the journal has always stored ("status", "contentType", "body"), so keys
// stored before still replay.
type publishResult struct {
	Status      int    `json:"status"`
	ContentType string `json:"contentType,omitempty"`
	Body        []byte `json:"body"`
}

// encode returns r as the hub keeps it.
func (r publishResult) encode() hub.Result {
	b, _ := json.Marshal(r) // a struct of an int, a string and bytes
	return b
}

// decodeResult reads a result the hub kept: one encode made, now or before
// a restart.
func decodeResult(b hub.Result) (publishResult, error) {
	var r publishResult
	if err := json.Unmarshal(b, &r); err != nil || r.Status == 0 {
		return r, fmt.Errorf("ipc: a remembered publish result does not read: %q", b)
	}
	return r, nil
}
