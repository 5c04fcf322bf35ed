package wire

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
	// counts events of exported sessions dropped before NATS confirmed
	// them (past backlog_bytes, or on a full disk).
	Exported uint64 `json:"exported"`
	Imported uint64 `json:"imported"`
	Lost     uint64 `json:"lost"`
	// Lag is the events of exported sessions not yet acknowledged, and
	// BacklogBytes what the journal keeps of them beyond the rings.
	Lag          uint64 `json:"lag"`
	BacklogBytes int64  `json:"backlogBytes"`
	// ImportLost counts the origin ids mirrors found missing, and
	// ImportGaps the jumps that skipped them (each a stream:gap,
	// upstream_lost, for the mirror's readers), since the daemon started.
	ImportLost uint64           `json:"importLost"`
	ImportGaps uint64           `json:"importGaps"`
	Sessions   []UpstreamExport `json:"sessions"`
	Mirrors    []UpstreamMirror `json:"mirrors"`
}

// UpstreamExport is one exported session.
type UpstreamExport struct {
	Session    string `json:"session"`
	LastID     uint64 `json:"lastId"`
	ExportedID uint64 `json:"exportedId"`
	Epoch      string `json:"epoch,omitempty"`
	Lag        uint64 `json:"lag"`
	// BacklogBytes is what the journal keeps of the session beyond its
	// ring for export; Lost counts its events dropped before export.
	BacklogBytes int64  `json:"backlogBytes"`
	Lost         uint64 `json:"lost"`
}

// UpstreamMirror is one mirror: the local Session that mirrors
// Source of Node; Epoch and ID are the source's of the last event applied.
type UpstreamMirror struct {
	Session  string `json:"session"`
	Node     string `json:"node"`
	Source   string `json:"source"`
	Epoch    string `json:"epoch,omitempty"`
	ID       uint64 `json:"id"`
	LastID   uint64 `json:"lastId"`
	Imported uint64 `json:"imported"`
	// Lost counts the origin ids found missing, Gaps the jumps that
	// skipped them.
	Lost uint64 `json:"lost"`
	Gaps uint64 `json:"gaps"`
}
