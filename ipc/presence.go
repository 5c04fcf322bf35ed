package ipc

import (
	"cmp"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/ipc/wire"
)

// presence is every live stream the handler serves, by the bus it reads:
// what GET …/subscribers lists (SPEC §6). A stream is added once it has
// subscribed and removed when it ends; nothing here is touched on the
// publish path, and the stream's writer alone updates its counters, once
// per flush.
type presence struct {
	seq atomic.Uint64
	mu  sync.Mutex
	// byBus holds the streams of each bus: the session id, "family:F" or
	// "*global" (neither a session id).
	byBus map[string]map[*liveStream]struct{}
	n     int
}

// liveStream is one stream, as presence lists it.
type liveStream struct {
	id        string
	seq       uint64
	transport string
	since     time.Time
	bus       wire.SubscriberBus
	sub       *bus.Subscription
	peer      wire.SubscriberPeer
	// owner is the identity whose caller sees peer when not admin: "u"
	// and the uid on the socket, "k" and the key's name on TCP, "" for
	// nobody's.
	owner    string
	consumer string

	// Counted by the stream's writer, stored once per flush.
	delivered     atomic.Uint64
	lastDelivered atomic.Uint64
}

func newPresence() *presence {
	return &presence{byBus: map[string]map[*liveStream]struct{}{}}
}

func busKey(b wire.SubscriberBus) string {
	switch {
	case b.Session != "":
		return b.Session
	case b.Family != "":
		return "family:" + b.Family
	}
	return "*global" // no session id has a '*'
}

// identity is who r's caller is for masking (SPEC §6): its uid on the
// socket, its key's name on TCP; "" when neither names it.
func identity(r *http.Request, c Caller) string {
	ci := connFrom(r.Context())
	if ci.unix {
		if ci.peer == nil {
			return ""
		}
		return "u" + strconv.FormatUint(uint64(ci.peer.UID), 10)
	}
	if c.KeyName == "" {
		return ""
	}
	return "k" + c.KeyName
}

// peerOf describes r's peer as a stream entry shows it.
func peerOf(r *http.Request, c Caller) wire.SubscriberPeer {
	ci := connFrom(r.Context())
	if ci.unix {
		p := wire.SubscriberPeer{Unix: true}
		if ci.peer != nil {
			p.UID, p.GID, p.PID, p.Comm = ci.peer.UID, ci.peer.GID, ci.peer.PID, ci.peer.Comm
		}
		return p
	}
	return wire.SubscriberPeer{Addr: r.RemoteAddr, Key: c.KeyName}
}

// add registers the stream that sub serves for r's caller c, through
// consumer ("" for none).
func (p *presence) add(r *http.Request, c Caller, kind streamKind, b wire.SubscriberBus, sub *bus.Subscription, consumer string) *liveStream {
	n := p.seq.Add(1)
	ls := &liveStream{
		id: "st-" + strconv.FormatUint(n, 10), seq: n, transport: kind.transport(), since: time.Now(),
		bus: b, sub: sub, peer: peerOf(r, c), owner: identity(r, c), consumer: consumer,
	}
	k := busKey(b)
	p.mu.Lock()
	m := p.byBus[k]
	if m == nil {
		m = map[*liveStream]struct{}{}
		p.byBus[k] = m
	}
	m[ls] = struct{}{}
	p.n++
	p.mu.Unlock()
	return ls
}

// remove forgets ls; a nil ls is a no-op.
func (p *presence) remove(ls *liveStream) {
	if ls == nil {
		return
	}
	k := busKey(ls.bus)
	p.mu.Lock()
	if m := p.byBus[k]; m != nil {
		if _, ok := m[ls]; ok {
			delete(m, ls)
			p.n--
		}
		if len(m) == 0 {
			delete(p.byBus, k)
		}
	}
	p.mu.Unlock()
}

// count returns how many streams are live.
func (p *presence) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// list returns the streams of the bus named key, or of every bus when key
// is "", oldest first.
func (p *presence) list(key string) []*liveStream {
	p.mu.Lock()
	var out []*liveStream
	for k, m := range p.byBus {
		if key != "" && k != key {
			continue
		}
		for ls := range m {
			out = append(out, ls)
		}
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(a, b *liveStream) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

// flushed records what the stream's writer just wrote: frames, of which
// the events count as delivered. Called by the writer alone, after each
// successful write.
func (ls *liveStream) flushed(frames []*bus.Frame) {
	if ls == nil {
		return
	}
	var n, last uint64
	for _, f := range frames {
		if !f.Reserved() {
			n++
			last = f.ID
		}
	}
	if n > 0 {
		ls.delivered.Add(n)
		ls.lastDelivered.Store(last)
	}
}

// entry is ls as a caller sees it: peer only for admin or the stream's own
// identity (who).
func (ls *liveStream) entry(admin bool, who string, withBus bool) wire.Subscriber {
	st := ls.sub.Stats()
	e := wire.Subscriber{
		ID: ls.id, Transport: ls.transport, Since: ls.since.UTC(),
		Types:           slices.Clone(ls.sub.Filter().Types()),
		LastDeliveredID: ls.lastDelivered.Load(), Delivered: ls.delivered.Load(),
		Queued: st.Live, QueuedBytes: st.LiveBytes, Slow: st.Warned,
	}
	if ls.consumer != "" {
		name := ls.consumer
		e.Consumer = &name
	}
	if admin || (who != "" && who == ls.owner) {
		p := ls.peer
		e.Peer = &p
	}
	if withBus {
		b := ls.bus
		e.Bus = &b
	}
	return e
}

// subscribers writes the list of the streams of the bus named key ("" for
// every bus) as r's caller c may see it.
func (h *Handler) writeSubscribers(w http.ResponseWriter, r *http.Request, c Caller, key string) {
	admin, who := c.Scopes.CanAdmin(), identity(r, c)
	list := wire.SubscriberList{Subscribers: []wire.Subscriber{}}
	for _, ls := range h.presence.list(key) {
		list.Subscribers = append(list.Subscribers, ls.entry(admin, who, key == ""))
	}
	writeJSON(w, http.StatusOK, list)
}

func (h *Handler) serveSessionSubscribers(w http.ResponseWriter, r *http.Request, c Caller) {
	s, err := h.lookupSession(r)
	if err != nil {
		writeError(w, err)
		return
	}
	h.writeSubscribers(w, r, c, s.ID)
}

func (h *Handler) serveSubscribers(w http.ResponseWriter, r *http.Request, c Caller) {
	h.writeSubscribers(w, r, c, "")
}
