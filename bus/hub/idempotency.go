package hub

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/share"
)

// Idempotent publishes (SPEC §6, Idempotency-Key): the router publishes
// a batch that carries a key with Hub.PublishOnce, which remembers its
// Result per session and key for the idempotency window, so that a client
// that lost the reply (a dropped connection) can send the request again
// and get the first reply without publishing twice. With a journal whose
// stores are bus.KeyStores the key is written in the same record as the
// events, so after a crash both are there or neither; with a KeyJournal
// the keys survive a restart.

// DefaultIdempotencyWindow is how long a key is remembered (SPEC §10).
const DefaultIdempotencyWindow = 10 * time.Minute

// DefaultIdempotencyMaxBytes bounds the remembered keys, in bytes
// (idempotency_max_bytes, SPEC §10): a pool with fair shares
// (PoolIdempotencyKeys): past its share a peer's oldest keys are forgotten
// before their window ends, and past the pool's limit the oldest keys of
// peers other than privileged ones, so that no peer can grow the table
// without bound nor push another's keys out. (The privileged account
// draws on the whole pool.)
const DefaultIdempotencyMaxBytes = 16 << 20

// keyOverhead is what a remembered key costs besides its session id and
// key, measured, in the larger of the two places it takes: its entry (with
// the channel its repeats wait on), its place in the table and the order
// cost about 400 bytes of heap; its record in journal.db (status, ids,
// digest, peer, time, in a page bbolt splits half full) about 460. 256,
// as it was, let the default 16 MiB hold twice that in both.
const keyOverhead = 512

// KeyCost returns what a key of session counts in the pool of
// remembered keys, in bytes.
func KeyCost(session, key string) int64 { return int64(keyOverhead + 2*(len(session)+len(key))) }

// ErrKeyReused is returned by PublishOnce for a key already used on the
// session with a different request; the router answers 409.
var ErrKeyReused = errors.New("hub: idempotency key already used with a different request")

// A Result is what a keyed publish achieved, as a value the hub keeps for
// the idempotency window (never the reply's bytes): the router renders the
// reply from it, the first time and for every repeat. Only a publish that
// published is remembered, so a Result always says which ids it was given.
type Result struct {
	// First, Count and LastID are the publish's ids: Count contiguous ids
	// from First to LastID.
	First  uint64
	Count  int
	LastID uint64
}

// A KeyJournal keeps idempotency keys on stable storage: an optional
// capability of a Journal (*journal.Journal implements it). Keys of
// batches its stores took with bus.KeyStore are its own to keep; PutKey
// stores the others.
type KeyJournal interface {
	// PutKey stores rec for key of session; it is durable when PutKey
	// returns nil.
	PutKey(session, key string, rec []byte) error
	// DropKeys forgets keys of session, every key of it when keys is nil.
	DropKeys(session string, keys []string) error
	// Keys calls fn with every key stored.
	Keys(fn func(session, key string, rec []byte)) error
}

// keyRecord is a remembered result, as a KeyJournal stores it (the
// journal's format 3).
type keyRecord struct {
	At     int64    `json:"at"` // Unix nanoseconds of the first reply
	Digest [32]byte `json:"digest"`
	// Peer is whose publish it was (share.Peer's text); absent in a key
	// stored before peers were, which counts as share.Unknown's.
	Peer string `json:"peer,omitempty"`
	// Status is recordStatus in every record: read by nothing, written so
	// that a daemon of format 3 before this one reads the record as it
	// always has.
	Status int    `json:"status"`
	First  uint64 `json:"first"`
	Count  int    `json:"count"`
	LastID uint64 `json:"lastId"`
}

// recordStatus is what format 3 stores in a record's "status": it held
// the reply's HTTP status, and every remembered publish was answered 200.
const recordStatus = 200

// keyEntry is a key of a session: being published (done open) or
// remembered.
type keyEntry struct {
	session, key string
	digest       [32]byte
	at           time.Time
	result       Result
	kept         bool
	cost         int64          // KeyCost, held on acct once kept
	acct         *share.Account // the key's account in keyTable.pool, once kept
	done         chan struct{}  // closed once the first request has its result
}

// keyTable is the hub's remembered keys.
type keyTable struct {
	mu       sync.Mutex // guards the fields below; taken alone
	window   time.Duration
	maxBytes int64
	pool     *share.Pool // every kept entry holds its cost on its peer's account
	entries  map[string]*keyEntry
	order    []*keyEntry // kept entries, oldest first
	// forgotten counts the keys forgotten before their window ended to
	// make room, by share.Kind: past their peer's share, or the pool's.
	forgotten [share.ByPool + 1]uint64
}

// setShare sets the pool's limit (Options.IdempotencyMaxBytes, filled)
// and share, and makes the pool the first time.
func (t *keyTable) setShare(maxBytes int64, f float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.maxBytes = maxBytes
	if t.pool == nil {
		t.pool = share.NewPool(share.Options{Name: PoolIdempotencyKeys, Limit: maxBytes, Share: f})
		return
	}
	t.pool.SetLimit(maxBytes, f)
}

// makeRoomLocked takes cost on acct for a key about to be kept, forgetting
// first what the pool's rule asks (see DefaultIdempotencyMaxBytes), and
// returns the entries forgotten. It reports false when no key may go to
// make room (the privileged account fills the pool alone): the new key is
// not kept. t.mu must be held.
func (t *keyTable) makeRoomLocked(acct *share.Account, cost int64) (gone []*keyEntry, ok bool) {
	for {
		err := acct.Acquire(cost)
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
// cost back. t.mu must be held.
func (t *keyTable) forgetLocked(e *keyEntry) {
	if k := tableKey(e.session, e.key); t.entries[k] == e {
		delete(t.entries, k)
	}
	if e.acct != nil {
		e.acct.Release(e.cost)
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

// KeysHeld returns how many idempotency keys are remembered and the bytes
// they count in their pool.
func (h *Hub) KeysHeld() (n int, bytes int64) {
	t := &h.keys
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.order {
		bytes += e.cost
	}
	return len(t.order), bytes
}

func tableKey(session, key string) string { return session + "\x00" + key }

// keyJournal returns the hub's journal as a KeyJournal, or nil.
func (h *Hub) keyJournal() KeyJournal {
	kj, _ := h.opts.Journal.(KeyJournal) // set by New, never changed
	return kj
}

// PublishOnce publishes events, by peer, to session as PublishAs does,
// for the first request with key on session, and remembers its Result
// for the idempotency window, on peer's share of the remembered keys
// (past it, peer's oldest key is forgotten): a later request with the
// same key and digest (of its body and kind) gets that result with
// replayed true and publishes nothing; one with another digest gets
// ErrKeyReused. A request that arrives while the first is still being
// published waits for it. A publish that fails is not remembered: the
// client may try again.
//
// The events are one batch, so their ids are contiguous. When the
// session's store is a bus.KeyStore the key is stored in the same write as
// the events (a crash keeps both or neither); otherwise, with a
// KeyJournal, it is stored once the events are published.
func (h *Hub) PublishOnce(peer share.Peer, sid bus.SessionID, key string, digest [32]byte, events []bus.Event) (r Result, replayed bool, err error) {
	session := sid.String()
	if h.ReadOnly(session) {
		return Result{}, false, ErrReadOnly
	}
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
			return Result{}, false, ErrKeyReused
		}
		t.mu.Unlock()
		<-e.done
		t.mu.Lock()
		kept := e.kept && t.entries[k] == e
		t.mu.Unlock()
		if kept {
			return e.result, true, nil
		}
		// The first request published nothing: this one tries.
	}
	e := &keyEntry{session: session, key: key, digest: digest, cost: KeyCost(session, key), done: make(chan struct{})}
	t.entries[k] = e
	t.mu.Unlock()

	at := time.Now()
	stored := false // by the session's KeyStore, with the events
	value := func(first, last uint64) []byte {
		stored = true
		rec, _ := json.Marshal(keyRecord{At: at.UnixNano(), Digest: digest, Peer: peer.String(),
			Status: recordStatus, First: first, Count: int(last - first + 1), LastID: last})
		return rec
	}
	first, last, perr := h.publish(sid, events, publishOptions{peer: peer, key: key, keyValue: value})
	r = Result{First: first, Count: int(last - first + 1), LastID: last}
	kj := h.keyJournal()
	var gone []*keyEntry
	var rec []byte
	t.mu.Lock()
	switch {
	case perr != nil:
		delete(t.entries, k)
	case t.entries[k] != e:
		// Forgotten meanwhile: the session was deleted.
	default:
		var room bool
		if gone, room = t.makeRoomLocked(acct, e.cost); !room {
			delete(t.entries, k) // the reply stands, but is not remembered
			if stored {
				gone = append(gone, e) // nor kept by the journal
			}
			break
		}
		e.result, e.at, e.kept, e.acct = r, at, true, acct
		t.order = append(t.order, e)
		if kj != nil && !stored {
			rec = value(first, last)
		}
	}
	close(e.done)
	t.mu.Unlock()
	h.dropKeys(gone)
	if perr != nil {
		return Result{}, false, perr
	}
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
		if json.Unmarshal(b, &rec) == nil && rec.Count > 0 {
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
		cost := KeyCost(session, key)
		acct.Force(cost)
		e := &keyEntry{session: session, key: key, digest: rec.Digest, at: at, kept: true, cost: cost, acct: acct, done: done,
			result: Result{First: rec.First, Count: rec.Count, LastID: rec.LastID}}
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

// setKeyWindow sets the idempotency window (Options.IdempotencyWindow,
// filled).
func (h *Hub) setKeyWindow(d time.Duration) {
	h.keys.mu.Lock()
	h.keys.window = d
	h.keys.mu.Unlock()
}
