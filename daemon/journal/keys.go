package journal

import (
	"bytes"
	"maps"
	"strings"

	"github.com/localbus/localbus/bus"
	bolt "go.etcd.io/bbolt"
)

// Idempotency keys (hub.KeyJournal): bucket keys of the database, session
// id, a zero byte and the key → the record the hub encoded. The bucket is
// created by the first key stored.
//
// A keyed publish (Store.AppendKeyed, format 3) writes its key in the log
// record of its events, so that after a crash both are there or neither:
// the journal holds the key in memory (logKeys) from the append on, and
// the checkpoint that removes the record's segment copies it into the
// bucket in the same transaction as the events; the replay of a record
// still in the log holds its key again. PutKey, a key stored apart from
// its events, remains for a journal's other users.
var bucketKeys = []byte("keys")

// maxKeyLen bounds a key's length in a log record.
const maxKeyLen = 1 << 10

// logKey is a key whose log record is in segment seq, not yet copied into
// the database.
type logKey struct {
	val []byte
	seq uint64
}

func keyOf(session, key string) []byte {
	b := make([]byte, 0, len(session)+1+len(key))
	return append(append(append(b, session...), 0), key...)
}

// logKeyed logs frames of bus num, a session's, with key in one record,
// and holds the key until a checkpoint copies it. keysMu is held across
// both, so that a checkpoint that rotated the log before taking it finds
// every key whose record is in the segments it removes.
func (j *Journal) logKeyed(num uint64, session string, frames []*bus.Frame, key string, val []byte) (lsn, seq uint64, err error) {
	j.keysMu.Lock()
	defer j.keysMu.Unlock()
	if lsn, seq, err = j.log(num, frames, nil, key, val); err != nil {
		return 0, 0, err
	}
	j.holdKeyLocked(session, key, val, seq)
	return lsn, seq, nil
}

// holdKeyLocked holds key of session, logged in segment seq. j.keysMu
// must be held.
func (j *Journal) holdKeyLocked(session, key string, val []byte, seq uint64) {
	if j.logKeys == nil {
		j.logKeys = map[string]logKey{}
	}
	k := string(keyOf(session, key))
	j.logKeys[k] = logKey{val: bytes.Clone(val), seq: seq}
	delete(j.droppedKeys, k)
}

// anyDropped reports whether keys were dropped since the last checkpoint.
func (j *Journal) anyDropped() bool {
	j.keysMu.Lock()
	defer j.keysMu.Unlock()
	return len(j.droppedKeys) > 0
}

// takeDropped returns the keys dropped since the last checkpoint, for it
// to delete from the database (putKeys); a failed checkpoint gives them
// back with undrop.
func (j *Journal) takeDropped() map[string]bool {
	j.keysMu.Lock()
	defer j.keysMu.Unlock()
	d := j.droppedKeys
	j.droppedKeys = nil
	return d
}

func (j *Journal) undrop(d map[string]bool) {
	j.keysMu.Lock()
	defer j.keysMu.Unlock()
	for k := range d {
		if _, held := j.logKeys[k]; !held {
			j.dropLocked(k)
		}
	}
}

// dropLocked notes key k (keyOf) as dropped. j.keysMu must be held.
func (j *Journal) dropLocked(k string) {
	if j.droppedKeys == nil {
		j.droppedKeys = map[string]bool{}
	}
	j.droppedKeys[k] = true
}

// keysThrough returns the held keys logged in segments up to seq, for a
// checkpoint to copy (putKeys) and then forget (forgetKeys).
func (j *Journal) keysThrough(seq uint64) map[string]logKey {
	j.keysMu.Lock()
	defer j.keysMu.Unlock()
	var out map[string]logKey
	for k, lk := range j.logKeys {
		if lk.seq <= seq {
			if out == nil {
				out = map[string]logKey{}
			}
			out[k] = lk
		}
	}
	return out
}

// putKeys writes keys into the database within tx, and deletes the keys
// dropped.
func putKeys(tx *bolt.Tx, keys map[string]logKey, dropped map[string]bool) error {
	if len(keys) == 0 && len(dropped) == 0 {
		return nil
	}
	b, err := tx.CreateBucketIfNotExists(bucketKeys)
	if err != nil {
		return err
	}
	for k := range dropped {
		if err := b.Delete([]byte(k)); err != nil {
			return err
		}
	}
	for k, lk := range keys {
		if err := b.Put([]byte(k), lk.val); err != nil {
			return err
		}
	}
	return nil
}

// forgetKeys stops holding keys, copied into the database, unless they
// were logged again since.
func (j *Journal) forgetKeys(keys map[string]logKey) {
	j.keysMu.Lock()
	defer j.keysMu.Unlock()
	for k, lk := range keys {
		if cur, ok := j.logKeys[k]; ok && cur.seq == lk.seq && bytes.Equal(cur.val, lk.val) {
			delete(j.logKeys, k)
		}
	}
}

// PutKey stores the record of an idempotency key of session; it is durable
// when PutKey returns nil.
func (j *Journal) PutKey(session, key string, rec []byte) error {
	if err := j.usable(); err != nil {
		return err
	}
	if j.noDB.Load() {
		return errNoDB
	}
	return classify(j.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketKeys)
		if err != nil {
			return err
		}
		return b.Put(keyOf(session, key), rec)
	}))
}

// DropKeys forgets keys of session, or every key of it when keys is nil.
// Named keys are deleted from the database by the next checkpoint, so
// that forgetting the oldest keys to make room costs a publish no write
// (a crash before it brings them back, within their window); every key
// of a deleted session goes at once.
func (j *Journal) DropKeys(session string, keys []string) error {
	if err := j.usable(); err != nil {
		return err
	}
	j.keysMu.Lock()
	if keys != nil {
		for _, k := range keys {
			kk := string(keyOf(session, k))
			delete(j.logKeys, kk)
			j.dropLocked(kk)
		}
		j.keysMu.Unlock()
		return nil
	}
	prefix := session + "\x00"
	for k := range j.logKeys {
		if strings.HasPrefix(k, prefix) {
			delete(j.logKeys, k)
		}
	}
	j.keysMu.Unlock()
	if j.noDB.Load() {
		return nil
	}
	return classify(j.db.Batch(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketKeys)
		if b == nil {
			return nil
		}
		prefix := append([]byte(session), 0)
		var dels [][]byte
		c := b.Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			dels = append(dels, bytes.Clone(k))
		}
		for _, k := range dels {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	}))
}

// Keys calls fn with every idempotency key the journal holds, and its
// record: those of the database and those only the log holds yet.
func (j *Journal) Keys(fn func(session, key string, rec []byte)) error {
	if err := j.usable(); err != nil {
		return err
	}
	j.keysMu.Lock()
	held := make(map[string][]byte, len(j.logKeys))
	for k, lk := range j.logKeys {
		held[k] = lk.val
	}
	dropped := maps.Clone(j.droppedKeys)
	j.keysMu.Unlock()
	split := func(k []byte, v []byte) {
		if i := bytes.IndexByte(k, 0); i >= 0 {
			fn(string(k[:i]), string(k[i+1:]), bytes.Clone(v))
		} // else not a key of ours: ignored
	}
	if !j.noDB.Load() {
		err := j.db.View(func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketKeys)
			if b == nil {
				return nil
			}
			return b.ForEach(func(k, v []byte) error {
				if _, ok := held[string(k)]; !ok && !dropped[string(k)] {
					split(k, v)
				}
				return nil
			})
		})
		if err != nil {
			return classify(err)
		}
	}
	for k, v := range held {
		split([]byte(k), v)
	}
	return nil
}

// usable returns ErrClosed once the journal is closed.
func (j *Journal) usable() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return ErrClosed
	}
	return nil
}
