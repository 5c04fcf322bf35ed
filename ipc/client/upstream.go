package client

import (
	"context"
	"errors"
	"net/http"
)

// UpstreamStatus is the state of the daemon's bridge to NATS JetStream
// (GET /api/v1/upstream, SPEC §12).
type UpstreamStatus struct {
	Node      string   `json:"node"`
	Stream    string   `json:"stream"`
	URLs      []string `json:"urls"`
	Connected bool     `json:"connected"`
	Server    string   `json:"server,omitempty"`
	LastError string   `json:"lastError,omitempty"`
	Export    []string `json:"export"`
	Import    []string `json:"import"`
	// Exported and Imported count events since the daemon started; Lost
	// counts events the ring no longer held when they were due for export.
	Exported uint64 `json:"exported"`
	Imported uint64 `json:"imported"`
	Lost     uint64 `json:"lost"`
	// Lag is the events of exported sessions not yet acknowledged.
	Lag      uint64                 `json:"lag"`
	Sessions []UpstreamExportStatus `json:"sessions"`
	Mirrors  []UpstreamMirrorStatus `json:"mirrors"`
}

// UpstreamExportStatus is one exported session.
type UpstreamExportStatus struct {
	Session    string `json:"session"`
	LastID     uint64 `json:"lastId"`
	ExportedID uint64 `json:"exportedId"`
	Epoch      string `json:"epoch,omitempty"`
	Lag        uint64 `json:"lag"`
}

// UpstreamMirrorStatus is one mirror: the local Session that mirrors
// Source of Node; Epoch and ID are the source's of the last event applied.
type UpstreamMirrorStatus struct {
	Session  string `json:"session"`
	Node     string `json:"node"`
	Source   string `json:"source"`
	Epoch    string `json:"epoch,omitempty"`
	ID       uint64 `json:"id"`
	LastID   uint64 `json:"lastId"`
	Imported uint64 `json:"imported"`
}

// Upstream returns the state of the daemon's NATS bridge; ok is false when
// the daemon has none (no [upstream] table). It needs the read scope.
func (c *Client) Upstream(ctx context.Context) (st UpstreamStatus, ok bool, err error) {
	err = c.do(ctx, http.MethodGet, "/api/v1/upstream", nil, nil, &st)
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return UpstreamStatus{}, false, nil
	}
	return st, err == nil, err
}
