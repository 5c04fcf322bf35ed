package ipc

import (
	"net/http"

	"github.com/localbus/localbus/bus"
)

// Caps is the body of GET /api/v1/caps: what this daemon speaks.
type Caps struct {
	Version       string   `json:"version"`
	SchemaVersion int      `json:"schemaVersion"`
	Features      []string `json:"features"`
	Limits        Limits   `json:"limits"`
}

// Features lists the capabilities /api/v1/caps announces.
var Features = []string{
	"session_events", "global_events", "family_events", "slow_client_warning",
	"typed_event_schema", "resume", "epoch", "ws_control", "ndjson_publish", "ndjson_stream_publish",
}

func (h *Handler) serveCaps(w http.ResponseWriter, r *http.Request, c Caller) {
	o := h.options()
	writeJSON(w, http.StatusOK, Caps{Version: o.Version, SchemaVersion: bus.SchemaVersion, Features: Features, Limits: o.Caps})
}

func (h *Handler) serveHealthz(w http.ResponseWriter, r *http.Request, c Caller) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (h *Handler) serveReadyz(w http.ResponseWriter, r *http.Request, c Caller) {
	if !h.ready.Load() {
		writeError(w, errorf(http.StatusServiceUnavailable, "not_ready", "the daemon is not ready"))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func (h *Handler) serveReload(w http.ResponseWriter, r *http.Request, c Caller) {
	o := h.options()
	if o.Reload == nil {
		writeError(w, errorf(http.StatusServiceUnavailable, "reload_unavailable", "this daemon cannot reload"))
		return
	}
	if err := o.Reload(r.Context()); err != nil {
		writeError(w, errorf(http.StatusBadRequest, "reload_refused", "%v", err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "reloaded"})
}

func (h *Handler) serveMetrics(w http.ResponseWriter, r *http.Request, c Caller) {
	h.metrics.handler.ServeHTTP(w, r)
}
