package hub

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"
)

// Idempotent publishes (SPEC §6, Idempotency-Key): the router runs a
// publish that carries a key through Hub.Once, which remembers its reply
// per session and key for the idempotency window, so that a client that
// lost the reply (a dropped connection) can send the request again and get
// the first reply without publishing twice. With a journal that implements
// KeyJournal the replies survive a restart.

// DefaultIdempotencyWindow is how long a key is remembered (SPEC §10).
const DefaultIdempotencyWindow = 10 * time.Minute

// maxKeys bounds the keys remembered at once; past it the oldest are
// forgotten before their window ends, so no peer can grow the table
// without bound.
const maxKeys = 1 << 16

// ErrKeyReused is returned by Once for a key already used on the session
// with a different request; the router answers 409.
var ErrKeyReused = errors.New("hub: idempotency key already used with a different request")

// A Reply is a publish's answer as the router sent it: what Once hands back
// to a request that repeats a key.
type Reply struct {
	Status      int    `json:"status"`
	ContentType string `json:"contentType,omitempty"`
	Body        []byte `json:"body"`
}

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

// keyRecord is a remembered reply, as a KeyJournal stores it.
type keyRecord struct {
	At     int64    `json:"at"` // Unix nanoseconds of the first reply
	Digest [32]byte `json:"digest"`
	Reply  Reply    `json:"reply"`
}

// keyEntry is a key of a session: being published (done open) or
// remembered.
type keyEntry struct {
	session, key string
	digest       [32]byte
	at           time.Time
	reply        Reply
	kept         bool
	done         chan struct{} // closed once the first request has its reply
}

// keyTable is the hub's remembered keys.
type keyTable struct {
	mu      sync.Mutex // guards the fields below; taken alone
	window  time.Duration
	entries map[string]*keyEntry
	order   []*keyEntry // kept entries, oldest first
}

func tableKey(session, key string) string { return session + "\x00" + key }

// keyJournal returns the hub's journal as a KeyJournal, or nil.
func (h *Hub) keyJournal() KeyJournal {
	kj, _ := h.opts.Journal.(KeyJournal) // set by New, never changed
	return kj
}

// Once runs publish for the first request with key on session, and
// remembers its reply for the idempotency window when publish reports it
// published something: a later request with the same key and digest (of
// its body and kind) gets that reply with replayed true and publishes
// nothing; one with another digest gets ErrKeyReused. A request that
// arrives while the first is still being published waits for it. A reply
// of a publish that published nothing is not remembered: the client may
// try again. With a KeyJournal the reply is durable before Once returns it.
func (h *Hub) Once(session, key string, digest [32]byte, publish func() (r Reply, published bool)) (r Reply, replayed bool, err error) {
	k := tableKey(session, key)
	t := &h.keys
	h.pruneKeys(time.Now())
	for {
		t.mu.Lock()
		e, ok := t.entries[k]
		if !ok {
			break // t.mu held
		}
		if e.digest != digest {
			t.mu.Unlock()
			return Reply{}, false, ErrKeyReused
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
	t.mu.Lock()
	switch {
	case t.entries[k] != e:
		// Forgotten meanwhile: the session was deleted.
	case published:
		e.reply, e.at, e.kept = r, time.Now(), true
		t.order = append(t.order, e)
		if kj != nil {
			rec, _ = json.Marshal(keyRecord{At: e.at.UnixNano(), Digest: digest, Reply: r})
		}
	default:
		delete(t.entries, k)
	}
	close(e.done)
	t.mu.Unlock()
	if rec != nil {
		// The events are published: failing to store the key costs only
		// a retry's safety across a restart, so the reply stands.
		if err := kj.PutKey(session, key, rec); err != nil {
			h.logKeyError(err)
		}
	}
	return r, false, nil
}

// pruneKeys forgets the keys older than the window, and the oldest past
// maxKeys.
func (h *Hub) pruneKeys(now time.Time) {
	t := &h.keys
	t.mu.Lock()
	var gone []*keyEntry
	n := 0
	for n < len(t.order) && (now.Sub(t.order[n].at) >= t.window || len(t.order)-n > maxKeys) {
		e := t.order[n]
		if k := tableKey(e.session, e.key); t.entries[k] == e {
			delete(t.entries, k)
		}
		gone = append(gone, e)
		n++
	}
	if n > 0 {
		clear(t.order[:n])
		t.order = t.order[n:]
	}
	t.mu.Unlock()
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
	t.order = slices.DeleteFunc(t.order, func(e *keyEntry) bool { return e.session == session })
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
		e := &keyEntry{session: session, key: key, digest: rec.Digest, at: at, reply: rec.Reply, kept: true, done: done}
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
