package hub

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/localbus/localbus/bus/share"
)

// Idempotent publishes (SPEC §6, Idempotency-Key): the router runs a
// publish that carries a key through Hub.Once, which remembers its reply
// per session and key for the idempotency window, so that a client that
// lost the reply (a dropped connection) can send the request again and get
// the first reply without publishing twice. With a journal that implements
// KeyJournal the replies survive a restart.

// DefaultIdempotencyWindow is how long a key is remembered (SPEC §10).
const DefaultIdempotencyWindow = 10 * time.Minute

// maxKeys bounds the keys remembered at once, a pool with fair shares
// (PoolIdempotencyKeys): past its share a peer's oldest keys are forgotten
// before their window ends, and past the pool's limit the oldest keys of
// peers other than privileged ones, so that no peer can grow the table
// without bound nor push another's keys out. (The privileged account
// draws on its own maxKeys.)
const maxKeys = 1 << 16

// ErrKeyReused is returned by Once for a key already used on the session
// with a different request; the router answers 409.
var ErrKeyReused = errors.New("hub: idempotency key already used with a different request")

// A Result is what a publish achieved, as the caller of Once encoded it:
// one JSON value, which the hub keeps for the idempotency window, stores
// with a KeyJournal and hands back unchanged to a request that repeats the
// key. The hub never reads it; the router encodes and renders it.
type Result = json.RawMessage

// A KeyJournal keeps the replies of idempotent publishes on stable storage:
// an optional capability of a Journal (*journal.Journal implements it).
type KeyJournal interface {
	// PutKey stores rec for key of session; it is durable when PutKey
	// returns nil.
	PutKey(session, key string, rec []byte) error
	// DropKeys forgets keys of session, every key of it when keys is nil.
	DropKeys(session string, keys []string) error
	// Keys calls fn with every key stored.
	Keys(fn func(session, key string, rec []byte)) error
}

// keyRecord is a remembered result, as a KeyJournal stores it (under
// "reply", the name it has always had on disk).
type keyRecord struct {
	At     int64    `json:"at"` // Unix nanoseconds of the first reply
	Digest [32]byte `json:"digest"`
	Reply  Result   `json:"reply"`
	// Peer is whose publish it was (share.Peer's text); absent in a key
	// stored before peers were, which counts as share.Unknown's.
	Peer string `json:"peer,omitempty"`
}

// keyEntry is a key of a session: being published (done open) or
// remembered.
type keyEntry struct {
	session, key string
	digest       [32]byte
	at           time.Time
	reply        Result
	kept         bool
	acct         *share.Account // the key's unit of keyTable.pool, once kept
	done         chan struct{}  // closed once the first request has its reply
}

// keyTable is the hub's remembered keys.
type keyTable struct {
	mu      sync.Mutex // guards the fields below; taken alone
	window  time.Duration
	pool    *share.Pool // every kept entry holds one unit on its peer's account
	entries map[string]*keyEntry
	order   []*keyEntry // kept entries, oldest first
	// forgotten counts the keys forgotten before their window ended to
	// make room, by share.Kind: past their peer's share, or the pool's.
	forgotten [share.ByPool + 1]uint64
}

// setShare sets the pool's share (and makes the pool, the first time).
func (t *keyTable) setShare(f float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pool == nil {
		t.pool = share.NewPool(share.Options{Name: PoolIdempotencyKeys, Limit: maxKeys, Share: f})
		return
	}
	t.pool.SetLimit(maxKeys, f)
}

// makeRoomLocked takes acct's unit for a key about to be kept, forgetting
// first what the pool's rule asks (see maxKeys), and returns the entries
// forgotten. It reports false when no key may go to make room (the
// privileged account fills the pool alone): the new key is not kept.
// t.mu must be held.
func (t *keyTable) makeRoomLocked(acct *share.Account) (gone []*keyEntry, ok bool) {
	for {
		err := acct.Acquire(1)
		if err == nil {
			return gone, true
		}
		r, _ := err.(*share.Refusal)
		if r == nil {
			return gone, false
		}
		// Past its own share, or the privileged account past its own
		// limit: the peer's own oldest key. Past the pool's limit: the
		// oldest key of a peer that is not privileged.
		own := r.Kind == share.ByShare || acct.Peer().IsPrivileged()
		i := slices.IndexFunc(t.order, func(e *keyEntry) bool {
			if own {
				return e.acct == acct
			}
			return !e.acct.Peer().IsPrivileged()
		})
		if i < 0 {
			return gone, false
		}
		e := t.order[i]
		t.order = slices.Delete(t.order, i, i+1)
		t.forgetLocked(e)
		t.forgotten[r.Kind]++
		gone = append(gone, e)
	}
}

// forgetLocked drops kept entry e, already out of t.order, and gives its
// unit back. t.mu must be held.
func (t *keyTable) forgetLocked(e *keyEntry) {
	if k := tableKey(e.session, e.key); t.entries[k] == e {
		delete(t.entries, k)
	}
	if e.acct != nil {
		e.acct.Release(1)
		e.acct = nil
	}
}

// KeysForgotten returns how many idempotency keys were forgotten before
// their window ended to make room: past their peer's share (byShare), or
// past the pool's limit (byPool).
func (h *Hub) KeysForgotten() (byShare, byPool uint64) {
	t := &h.keys
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.forgotten[share.ByShare], t.forgotten[share.ByPool]
}

func tableKey(session, key string) string { return session + "\x00" + key }

// keyJournal returns the hub's journal as a KeyJournal, or nil.
func (h *Hub) keyJournal() KeyJournal {
	kj, _ := h.opts.Journal.(KeyJournal) // set by New, never changed
	return kj
}

// Once is OnceAs for the daemon itself (share.Privileged): for in-process
// publishers, never for a request's.
func (h *Hub) Once(session, key string, digest [32]byte, publish func() (r Result, published bool)) (r Result, replayed bool, err error) {
	return h.OnceAs(share.Privileged, session, key, digest, publish)
}

// OnceAs runs publish for the first request with key on session, and
// remembers its result for the idempotency window when publish reports it
// published something, on peer's share of the remembered keys (past it,
// peer's oldest key is forgotten): a later request with the same key and digest (of
// its body and kind) gets that result with replayed true and publishes
// nothing; one with another digest gets ErrKeyReused. A request that
// arrives while the first is still being published waits for it. The
// result of a publish that published nothing is not remembered: the client
// may try again. With a KeyJournal the result is durable before Once
// returns it.
func (h *Hub) OnceAs(peer share.Peer, session, key string, digest [32]byte, publish func() (r Result, published bool)) (r Result, replayed bool, err error) {
	k := tableKey(session, key)
	t := &h.keys
	acct := t.pool.Account(peer)
	h.pruneKeys(time.Now())
	for {
		t.mu.Lock()
		e, ok := t.entries[k]
		if !ok {
			break // t.mu held
		}
		if e.digest != digest {
			t.mu.Unlock()
			return nil, false, ErrKeyReused
		}
		t.mu.Unlock()
		<-e.done
		t.mu.Lock()
		kept := e.kept && t.entries[k] == e
		t.mu.Unlock()
		if kept {
			return e.reply, true, nil
		}
		// The first request published nothing: this one tries.
	}
	e := &keyEntry{session: session, key: key, digest: digest, done: make(chan struct{})}
	t.entries[k] = e
	t.mu.Unlock()

	r, published := publish()
	kj := h.keyJournal()
	var rec []byte
	var gone []*keyEntry
	t.mu.Lock()
	switch {
	case t.entries[k] != e:
		// Forgotten meanwhile: the session was deleted.
	case published:
		var room bool
		if gone, room = t.makeRoomLocked(acct); !room {
			delete(t.entries, k) // the reply stands, but is not remembered
			break
		}
		e.reply, e.at, e.kept, e.acct = r, time.Now(), true, acct
		t.order = append(t.order, e)
		if kj != nil {
			rec, _ = json.Marshal(keyRecord{At: e.at.UnixNano(), Digest: digest, Reply: r, Peer: peer.String()})
		}
	default:
		delete(t.entries, k)
	}
	close(e.done)
	t.mu.Unlock()
	h.dropKeys(gone)
	if rec != nil {
		// The events are published: failing to store the key costs only
		// a retry's safety across a restart, so the reply stands.
		if err := kj.PutKey(session, key, rec); err != nil {
			h.logKeyError(err)
		}
	}
	return r, false, nil
}

// pruneKeys forgets the keys older than the window.
func (h *Hub) pruneKeys(now time.Time) {
	t := &h.keys
	t.mu.Lock()
	var gone []*keyEntry
	n := 0
	for n < len(t.order) && now.Sub(t.order[n].at) >= t.window {
		e := t.order[n]
		t.forgetLocked(e)
		gone = append(gone, e)
		n++
	}
	if n > 0 {
		clear(t.order[:n])
		t.order = t.order[n:]
	}
	t.mu.Unlock()
	h.dropKeys(gone)
}

// dropKeys forgets entries already out of the table in the KeyJournal.
func (h *Hub) dropKeys(gone []*keyEntry) {
	kj := h.keyJournal()
	if kj == nil || len(gone) == 0 {
		return
	}
	bySession := map[string][]string{}
	for _, e := range gone {
		bySession[e.session] = append(bySession[e.session], e.key)
	}
	for s, keys := range bySession {
		if err := kj.DropKeys(s, keys); err != nil {
			h.logKeyError(err)
		}
	}
}

// dropSessionKeys forgets every key of session (deleted).
func (h *Hub) dropSessionKeys(session string) {
	t := &h.keys
	t.mu.Lock()
	prefix := session + "\x00"
	for k := range t.entries {
		if strings.HasPrefix(k, prefix) {
			delete(t.entries, k)
		}
	}
	t.order = slices.DeleteFunc(t.order, func(e *keyEntry) bool {
		if e.session != session {
			return false
		}
		t.forgetLocked(e)
		return true
	})
	t.mu.Unlock()
	if kj := h.keyJournal(); kj != nil {
		if err := kj.DropKeys(session, nil); err != nil {
			h.logKeyError(err)
		}
	}
}

// loadKeys restores the keys a KeyJournal holds that are still within the
// window.
func (h *Hub) loadKeys(now time.Time) error {
	t := &h.keys
	t.entries = map[string]*keyEntry{}
	kj := h.keyJournal()
	if kj == nil {
		return nil
	}
	stale := map[string][]string{}
	err := kj.Keys(func(session, key string, b []byte) {
		var rec keyRecord
		at := time.Unix(0, 0)
		if json.Unmarshal(b, &rec) == nil {
			at = time.Unix(0, rec.At)
		}
		if now.Sub(at) >= t.window || now.Before(at.Add(-time.Minute)) {
			stale[session] = append(stale[session], key)
			return
		}
		done := make(chan struct{})
		close(done)
		// Granted before the restart: it counts on its peer's share even
		// past it.
		acct := t.pool.Account(restoredPeer(rec.Peer))
		acct.Force(1)
		e := &keyEntry{session: session, key: key, digest: rec.Digest, at: at, reply: rec.Reply, kept: true, acct: acct, done: done}
		t.entries[tableKey(session, key)] = e
		t.order = append(t.order, e)
	})
	if err != nil {
		return err
	}
	slices.SortFunc(t.order, func(a, b *keyEntry) int { return a.at.Compare(b.at) })
	for s, keys := range stale {
		if err := kj.DropKeys(s, keys); err != nil {
			return err
		}
	}
	return nil
}

// setKeyWindow sets the idempotency window; 0 means the default.
func (h *Hub) setKeyWindow(d time.Duration) {
	if d <= 0 {
		d = DefaultIdempotencyWindow
	}
	h.keys.mu.Lock()
	h.keys.window = d
	h.keys.mu.Unlock()
}
