package ipc

import (
	"net/http"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/ipc/wire"
)

// Features lists the capabilities /api/v1/caps announces.
var Features = []string{
	"session_events", "global_events", "family_events", "slow_client_warning",
	"typed_event_schema", "resume", "epoch", "ws_control", "ndjson_publish", "ndjson_stream_publish", "consumers",
}

func (h *Handler) serveCaps(w http.ResponseWriter, r *http.Request, c Caller) {
	o := h.options()
	caps := wire.Caps{
		Version: o.Version, SchemaVersion: bus.SchemaVersion, Features: Features, Limits: o.Caps,
		Durability: o.Durability, Fsync: o.Fsync,
	}
	if c.Authenticated && c.Scopes.CanAdmin() && o.KeysFile != "" {
		caps.Admin = &wire.AdminCaps{KeysFile: o.KeysFile}
	}
	writeJSON(w, http.StatusOK, caps)
}

func (h *Handler) serveHealthz(w http.ResponseWriter, r *http.Request, c Caller) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (h *Handler) serveReadyz(w http.ResponseWriter, r *http.Request, c Caller) {
	if !h.ready.Load() {
		writeError(w, errorf(http.StatusServiceUnavailable, wire.CodeNotReady, "the daemon is not ready"))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func (h *Handler) serveReload(w http.ResponseWriter, r *http.Request, c Caller) {
	o := h.options()
	if o.Reload == nil {
		writeError(w, errorf(http.StatusServiceUnavailable, wire.CodeReloadUnavailable, "this daemon cannot reload"))
		return
	}
	restart, err := o.Reload(r.Context())
	if err != nil {
		writeError(w, errorf(http.StatusBadRequest, wire.CodeReloadRefused, "%v", err))
		return
	}
	if restart == nil {
		restart = []string{}
	}
	writeJSON(w, http.StatusOK, wire.ReloadReply{Reloaded: true, RestartNeeded: restart})
}

func (h *Handler) serveMetrics(w http.ResponseWriter, r *http.Request, c Caller) {
	h.metrics.handler.ServeHTTP(w, r)
}

// serveUpstream is GET /api/v1/upstream: the NATS bridge's state (SPEC §12).
func (h *Handler) serveUpstream(w http.ResponseWriter, r *http.Request, c Caller) {
	f := h.options().Upstream
	if f == nil {
		writeError(w, errorf(http.StatusNotFound, wire.CodeNoUpstream, "this daemon has no [upstream] table"))
		return
	}
	writeJSON(w, http.StatusOK, f())
}

// serveStatus is GET /api/v1/status: the daemon at a glance (SPEC §6); an
// admin caller also gets memory, journal and upstream figures.
func (h *Handler) serveStatus(w http.ResponseWriter, r *http.Request, c Caller) {
	o := h.options()
	st := wire.Status{
		Version: o.Version, StartedAt: h.started, Sessions: o.Hub.Len(), Streams: h.presence.count(),
		Consumers: o.Hub.ConsumerCount(),
	}
	st.PublishRate, st.DeliverRate = o.Hub.Rates()
	if c.Scopes.CanAdmin() && o.AdminStatus != nil {
		a := o.AdminStatus()
		st.RSSBytes, st.JournalBytes, st.Upstream = a.RSSBytes, a.JournalBytes, a.Upstream
	}
	writeJSON(w, http.StatusOK, st)
}
