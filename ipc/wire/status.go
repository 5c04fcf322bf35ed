package wire

import "time"

// PathStatus answers Status, the daemon at a glance (GET, read).
const PathStatus = "/api/v1/status"

// Status is the body of GET /api/v1/status: what `localbus status` and
// `localbus top` show (SPEC §6).
type Status struct {
	Version   string    `json:"version"`
	StartedAt time.Time `json:"startedAt"`
	Sessions  int       `json:"sessions"`
	// Streams counts the live streams on every bus.
	Streams   int `json:"streams"`
	Consumers int `json:"consumers"`
	// PublishRate and DeliverRate are the daemon's events/s published to
	// every session and delivered to every stream, over the last 10 s.
	PublishRate float64 `json:"publishRate"`
	DeliverRate float64 `json:"deliverRate"`
	// For admin callers only: the daemon's resident memory, the bytes its
	// journal takes on disk (absent with durability "memory"), and the
	// NATS bridge (absent without one).
	RSSBytes     *int64          `json:"rssBytes,omitempty"`
	JournalBytes *int64          `json:"journalBytes,omitempty"`
	Upstream     *StatusUpstream `json:"upstream,omitempty"`
}

// StatusUpstream is the NATS bridge as Status shows it; GET
// /api/v1/upstream has the rest.
type StatusUpstream struct {
	Connected bool `json:"connected"`
	// Lag is the events of exported sessions not yet acknowledged.
	Lag uint64 `json:"lag"`
}

// AdminStatus is what the daemon adds to Status for an admin caller.
type AdminStatus struct {
	RSSBytes     *int64
	JournalBytes *int64
	Upstream     *StatusUpstream
}

// Paging of GET /api/v1/sessions (SPEC §6).
const (
	// ParamLimit is the largest page wanted, 1 to MaxPageLimit.
	ParamLimit = "limit"
	// ParamAfter starts the page after this session id.
	ParamAfter = "after"
	// DefaultPageLimit is a page's size without ?limit=.
	DefaultPageLimit = 1000
	// MaxPageLimit is the largest ?limit=.
	MaxPageLimit = 10000
)
