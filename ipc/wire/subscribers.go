package wire

import (
	"encoding/json"
	"time"
)

// PathSubscribers lists every stream of every bus (GET, admin): a
// SubscriberList whose entries carry their Bus.
const PathSubscribers = "/api/v1/subscribers"

// PatternSessionSubscribers lists the streams reading one session (GET,
// read).
const PatternSessionSubscribers = PatternSession + "/subscribers"

// SessionSubscribersPath is the path of the streams reading session id.
func SessionSubscribersPath(id string) string { return SessionPath(id) + "/subscribers" }

// SubscriberList is the body of GET /api/v1/sessions/{id}/subscribers and
// GET /api/v1/subscribers: one entry per live stream, oldest first.
type SubscriberList struct {
	Subscribers []Subscriber `json:"subscribers"`
}

// Subscriber is one live stream (SPEC §6): who reads it and how far its
// writer got.
type Subscriber struct {
	// ID names the stream, unique for the daemon's run.
	ID string `json:"id"`
	// Transport is "sse" or "ws".
	Transport string `json:"transport"`
	// Since is when the stream opened.
	Since time.Time `json:"since"`
	// Types is the stream's type filter, nil when it takes every type.
	Types []string `json:"types"`
	// Consumer names the consumer the stream reads through, nil for none.
	Consumer *string `json:"consumer"`
	// LastDeliveredID is the id of the last event the stream's writer
	// wrote to the connection (0 before any), and Delivered how many
	// events it wrote; both as of its last flush.
	LastDeliveredID uint64 `json:"lastDeliveredId"`
	Delivered       uint64 `json:"delivered"`
	// Queued and QueuedBytes are the live frames waiting for the writer.
	Queued      int   `json:"queued"`
	QueuedBytes int64 `json:"queuedBytes"`
	// Slow reports whether the stream was sent stream:slow and has not
	// drained since.
	Slow bool `json:"slow"`
	// Peer is who opened the stream; nil when the caller may not see it
	// (a stream of another identity, for a caller that is not admin).
	Peer *SubscriberPeer `json:"peer"`
	// Bus names the bus the stream reads, on GET /api/v1/subscribers
	// only.
	Bus *SubscriberBus `json:"bus,omitempty"`
}

// SubscriberPeer is the process or client at the other end of a stream:
// {"uid","gid","pid","comm"} on the Unix socket, from the kernel's peer
// credentials and the process's name at accept; {"addr","key"} on TCP,
// with the key's name (null without one), never the key.
type SubscriberPeer struct {
	// Unix reports whether the peer came over the Unix socket: UID, GID,
	// PID and Comm are set; else Addr and Key.
	Unix bool
	UID  uint32
	GID  uint32
	PID  int32
	Comm string
	Addr string
	Key  string
}

type unixPeerJSON struct {
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	PID  int32  `json:"pid"`
	Comm string `json:"comm"`
}

type tcpPeerJSON struct {
	Addr string  `json:"addr"`
	Key  *string `json:"key"`
}

// MarshalJSON writes the shape of the peer's transport.
func (p SubscriberPeer) MarshalJSON() ([]byte, error) {
	if p.Unix {
		return json.Marshal(unixPeerJSON{UID: p.UID, GID: p.GID, PID: p.PID, Comm: p.Comm})
	}
	t := tcpPeerJSON{Addr: p.Addr}
	if p.Key != "" {
		t.Key = &p.Key
	}
	return json.Marshal(t)
}

// UnmarshalJSON reads either shape: one with a uid is a Unix peer.
func (p *SubscriberPeer) UnmarshalJSON(b []byte) error {
	var v struct {
		UID  *uint32 `json:"uid"`
		GID  uint32  `json:"gid"`
		PID  int32   `json:"pid"`
		Comm string  `json:"comm"`
		Addr string  `json:"addr"`
		Key  *string `json:"key"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*p = SubscriberPeer{Addr: v.Addr, GID: v.GID, PID: v.PID, Comm: v.Comm}
	if v.UID != nil {
		p.Unix, p.UID = true, *v.UID
	}
	if v.Key != nil {
		p.Key = *v.Key
	}
	return nil
}

// SubscriberBus names the bus a stream reads: one of {"session":ID},
// {"family":F} or {"global":true}.
type SubscriberBus struct {
	Session string `json:"session,omitempty"`
	Family  string `json:"family,omitempty"`
	Global  bool   `json:"global,omitempty"`
}
