package hub

import (
	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/share"
)

// Fair shares (SPEC §2): the hub's pools are the sessions a publish
// created (Hub.autos, one unit per session, on the account of the peer
// whose publish created it, stored with the session by an AutoJournal) and
// the remembered idempotency keys (keyTable.pool, see idempotency.go);
// each bus shares its own subscribers (bus.Options.PeerShare). Options.
// PeerShare is the share of every one of them.

// Names of the hub's pools, in refusals and metrics.
const (
	PoolAutoSessions    = "auto_sessions"
	PoolIdempotencyKeys = "idempotency_keys"
)

// AutoSessionLimit returns how many sessions a publish may create under
// max_sessions and max_auto_sessions (0: their defaults): maxAuto, but
// never more than half of maxSessions, so that publishers always leave an
// admin room to create sessions. lowered reports that the half applied.
func AutoSessionLimit(maxSessions, maxAuto int) (limit int, lowered bool) {
	o := Options{MaxSessions: maxSessions, MaxAutoSessions: maxAuto}
	o.fill()
	if half := o.MaxSessions / 2; o.MaxAutoSessions > half {
		return half, true
	}
	return o.MaxAutoSessions, false
}

// setShares applies opts's limits and share, filled, to the hub's pools.
// h.mu must be held, or h not yet shared.
func (h *Hub) setShares(opts Options) {
	limit, _ := AutoSessionLimit(opts.MaxSessions, opts.MaxAutoSessions)
	h.autos.SetLimit(int64(limit), opts.PeerShare)
	h.keys.setShare(opts.IdempotencyMaxBytes, opts.PeerShare)
}

// busLimits returns the limits of a new bus. h.mu must be held, or h not
// yet shared.
func (h *Hub) busLimits() bus.Limits {
	l := h.opts.Limits
	l.PeerShare = h.opts.PeerShare
	return l
}

// restoredPeer reads the peer an AutoJournal stored with a session; text
// it cannot read counts as share.Unknown's, like an absent one.
func restoredPeer(stored string) share.Peer {
	p, _ := share.Parse(stored)
	return p
}
