package hub

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/share"
)

// announce publishes a localbus:* event about a session on the global bus.
func (h *Hub) announce(typ bus.Type, id string) { h.announceReason(typ, id, "") }

// announceReason is announce with a reason, left out when "".
func (h *Hub) announceReason(typ bus.Type, id, reason string) {
	data, _ := json.Marshal(struct {
		Session string `json:"session"`
		Reason  string `json:"reason,omitempty"`
	}{id, reason})
	h.Announce(bus.Event{Type: typ, Data: data})
}

// Announce publishes the daemon's own event ev, of the reserved family
// localbus, on the global bus. The global bus is closed only by Close;
// nothing is reported then.
func (h *Hub) Announce(ev bus.Event) {
	st, err := h.global.Stage(bus.Batch{Events: []bus.Event{ev}, Daemon: true})
	if err == nil {
		h.global.Finish(st)
	}
}

// Publish is PublishAs for the daemon itself (share.Privileged): for
// in-process publishers, never for a request's.
func (h *Hub) Publish(id bus.SessionID, events []bus.Event) (first, last uint64, err error) {
	return h.PublishAs(share.Privileged, id, events)
}

// PublishAs appends events, published by peer, to session id as one
// all-or-nothing batch, then their copies to the global bus (see the
// package doc). It sets the Time of events that have none, one time for
// the batch. It creates the session first when it is missing and
// AutoCreate is on, on peer's share of MaxAutoSessions; otherwise a
// missing session is ErrNotFound. It returns the session ids assigned.
func (h *Hub) PublishAs(peer share.Peer, id bus.SessionID, events []bus.Event) (first, last uint64, err error) {
	if h.ReadOnly(id.String()) {
		return 0, 0, ErrReadOnly
	}
	return h.publish(id, events, publishOptions{peer: peer})
}

// PublishMirror is Publish for the upstream bridge, which alone writes to
// mirrors: it ignores SetReadOnly and creates a missing session whatever
// AutoCreate says (within the session limit). Each event's Origin should
// be set.
func (h *Hub) PublishMirror(id bus.SessionID, events []bus.Event) (first, last uint64, err error) {
	return h.publish(id, events, publishOptions{peer: share.Privileged, mirror: true})
}

// publishAttempts bounds how often a publish that may create its session
// finds it deleted (or expired) between lookup and stage, and tries again
// in the session made anew, before it gives up with ErrRetry.
const publishAttempts = 4

// publishOptions are the variants of publish.
type publishOptions struct {
	// peer is the publisher, whose share a session the publish creates
	// counts against.
	peer share.Peer
	// mirror is the upstream bridge's publish: it creates a missing
	// session whatever AutoCreate says.
	mirror bool
	// key and keyValue, when set, go with the batch to its store
	// (bus.Batch.Key).
	key      string
	keyValue func(first, last uint64) []byte
}

// publish publishes events to session id, creating it when it may.
func (h *Hub) publish(id bus.SessionID, events []bus.Event, o publishOptions) (first, last uint64, err error) {
	now := time.Now()
	for i := range events {
		if events[i].Time.IsZero() {
			events[i].Time = now
		}
	}
	for range publishAttempts {
		s, err := h.open(id, events, o)
		if err != nil {
			return 0, 0, err
		}
		first, last, err = h.publishTo(s, events, o)
		if err != errDeleted {
			return first, last, err
		}
		// Deleted between lookup and publish. Without auto-create: as if
		// it never existed. With it, the publish lands in the session
		// made anew (on a new epoch), as if it came just after the delete.
		h.mu.Lock()
		auto := h.opts.AutoCreate || o.mirror
		h.mu.Unlock()
		if !auto {
			return 0, 0, ErrNotFound
		}
	}
	return 0, 0, ErrRetry
}

// errDeleted is publishTo's error for a session deleted since it was
// looked up: nothing was published.
var errDeleted = errors.New("hub: session deleted")

// publishTo publishes events to session s, with o's key.
func (h *Hub) publishTo(s *Session, events []bus.Event, o publishOptions) (first, last uint64, err error) {
	// publishMu orders the session's batches onto the global bus; it is
	// held while they are written, not while they are made durable, so
	// concurrent publishers to one session share a sync (group commit).
	s.publishMu.Lock()
	st, err := s.Bus.Stage(bus.Batch{Events: events, KeepFrames: true, Frames: s.frames[:0], Key: o.key, KeyValue: o.keyValue})
	if err != nil {
		s.publishMu.Unlock()
		if errors.Is(err, bus.ErrClosed) {
			return 0, 0, errDeleted
		}
		return 0, 0, err
	}
	// The frames are the session bus's own events, so the copies fail only
	// when the global bus is closed (by Close) or its journal refuses the
	// append: the session keeps the events, the global bus goes without
	// them (they get no global id, so no client misses them).
	frames := st.Frames
	s.copies[0] = bus.Copies{From: s.Bus, Frames: frames}
	gst, gerr := h.global.Stage(bus.Batch{Copies: s.copies[:]})
	s.copies[0] = bus.Copies{}
	first, last = st.First, st.Last
	s.active = h.opts.Now()
	// Kept for the next publish, but not the frames (the ring decides how
	// long they live) nor a large batch's array.
	clear(frames)
	if cap(frames) <= 64 {
		s.frames = frames[:0]
	}
	s.publishMu.Unlock()
	// The session's record was written before the global bus's, so the
	// sync that makes it durable usually covers both.
	if err := s.Bus.Finish(st); err != nil {
		if gerr == nil {
			h.global.Finish(gst)
		}
		return 0, 0, err
	}
	if gerr == nil {
		h.global.Finish(gst)
	}
	h.TrimRings()
	return first, last, nil
}
