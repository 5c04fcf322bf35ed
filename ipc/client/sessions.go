package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"

	"github.com/localbus/localbus/ipc/wire"
)

// SessionInfo describes a session: its epoch, last and earliest ids,
// subscribers and ring occupancy.
type SessionInfo = wire.SessionInfo

// Caps is what the daemon reports of itself: version, schema version,
// features and limits.
type Caps = wire.Caps

// ReloadReply is the daemon's answer to Reload: RestartNeeded names the
// changed keys that wait for a restart.
type ReloadReply = wire.ReloadReply

// CreateSession creates a session named id, with a ring of ringSize events
// (0: the daemon's ring_size). An empty id lets the daemon choose one; the
// answer names it. An existing id is an *APIError that unwraps to
// ErrConflict. It needs the admin scope.
func (c *Client) CreateSession(ctx context.Context, id string, ringSize int) (SessionInfo, error) {
	body, _ := json.Marshal(wire.CreateSessionRequest{ID: id, RingSize: ringSize})
	var s SessionInfo
	err := c.do(ctx, http.MethodPost, wire.PathSessions, nil, body, &s)
	return s, err
}

// Sessions lists every session of the daemon, in id order, following the
// pages of GET /api/v1/sessions to the end, in pages of the largest size
// the daemon gives (one request per 10,000 sessions).
func (c *Client) Sessions(ctx context.Context) ([]SessionInfo, error) {
	var all []SessionInfo
	after := ""
	for {
		page, next, err := c.SessionsPage(ctx, after, wire.MaxPageLimit)
		if err != nil {
			return nil, err
		}
		if all == nil {
			all = page
		} else {
			all = append(all, page...)
		}
		if next == "" || next <= after {
			return all, nil
		}
		after = next
	}
}

// SessionsPage lists at most limit sessions (0: the daemon's default,
// 1000) in id order after the id after ("" from the first); next is the
// after of the following page, "" on the last.
func (c *Client) SessionsPage(ctx context.Context, after string, limit int) (page []SessionInfo, next string, err error) {
	q := url.Values{}
	if after != "" {
		q.Set(wire.ParamAfter, after)
	}
	if limit > 0 {
		q.Set(wire.ParamLimit, strconv.Itoa(limit))
	}
	var l sessionListBody
	if err := c.doQuery(ctx, http.MethodGet, wire.PathSessions, q, nil, nil, &l); err != nil {
		return nil, "", err
	}
	return l.Sessions, l.Next, nil
}

// Status is the daemon at a glance (GET /api/v1/status).
type Status = wire.Status

// Subscriber is one live stream, as GET …/subscribers lists it.
type Subscriber = wire.Subscriber

// SubscriberBus names the bus a Subscriber reads.
type SubscriberBus = wire.SubscriberBus

// Status returns the daemon at a glance: version, start time, sessions,
// streams, consumers and rates; memory, journal and upstream figures for
// an admin caller.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	err := c.do(ctx, http.MethodGet, wire.PathStatus, nil, nil, &st)
	return st, err
}

// Subscribers lists the live streams of session id, oldest first. A
// caller that is not admin sees Peer only for its own streams.
func (c *Client) Subscribers(ctx context.Context, id string) ([]Subscriber, error) {
	var l wire.SubscriberList
	if err := c.do(ctx, http.MethodGet, wire.SessionSubscribersPath(id), nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Subscribers, nil
}

// AllSubscribers lists every live stream of every bus, each with its Bus.
// It needs the admin scope.
func (c *Client) AllSubscribers(ctx context.Context) ([]Subscriber, error) {
	var l wire.SubscriberList
	if err := c.do(ctx, http.MethodGet, wire.PathSubscribers, nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Subscribers, nil
}

// Session describes the session named id; an unknown one is an *APIError
// that unwraps to ErrNotFound.
func (c *Client) Session(ctx context.Context, id string) (SessionInfo, error) {
	var s SessionInfo
	err := c.do(ctx, http.MethodGet, wire.SessionPath(id), nil, nil, &s)
	return s, err
}

// DeleteSession deletes the session named id: its streams end with
// stream:closed (session_deleted). It needs the admin scope.
func (c *Client) DeleteSession(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, wire.SessionPath(id), nil, nil, nil)
}

// Caps returns what the daemon speaks. It needs no credentials.
func (c *Client) Caps(ctx context.Context) (Caps, error) {
	var caps Caps
	err := c.do(ctx, http.MethodGet, wire.PathCaps, nil, nil, &caps)
	return caps, err
}

// Reload makes the daemon re-read its configuration and keys, like SIGHUP.
// A configuration the daemon refuses is an *APIError whose Message says
// why; the daemon keeps running the old one. Open streams end with
// stream:closed (reload) and their Streams reconnect. RestartNeeded names
// the changed keys that wait for a restart. It needs the admin scope.
func (c *Client) Reload(ctx context.Context) (ReloadReply, error) {
	var r ReloadReply
	err := c.do(ctx, http.MethodPost, wire.PathReload, nil, []byte("{}"), &r)
	return r, err
}

// Ready returns nil when the daemon answers /readyz with 200, so callers
// can wait for a daemon they started.
func (c *Client) Ready(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, wire.PathReadyz, nil, nil, nil)
}
