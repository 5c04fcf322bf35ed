package journal

import (
	"bytes"

	bolt "go.etcd.io/bbolt"
)

// Idempotency keys (hub.KeyJournal): bucket keys of the database, session
// id, a zero byte and the key → the record the hub encoded. The bucket is
// created by the first key stored.
var bucketKeys = []byte("keys")

func keyOf(session, key string) []byte {
	b := make([]byte, 0, len(session)+1+len(key))
	return append(append(append(b, session...), 0), key...)
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
func (j *Journal) DropKeys(session string, keys []string) error {
	if err := j.usable(); err != nil || j.noDB.Load() {
		return err
	}
	return classify(j.db.Batch(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketKeys)
		if b == nil {
			return nil
		}
		if keys != nil {
			for _, k := range keys {
				if err := b.Delete(keyOf(session, k)); err != nil {
					return err
				}
			}
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

// Keys calls fn with every idempotency key stored, and its record.
func (j *Journal) Keys(fn func(session, key string, rec []byte)) error {
	if err := j.usable(); err != nil || j.noDB.Load() {
		return err
	}
	return classify(j.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketKeys)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			i := bytes.IndexByte(k, 0)
			if i < 0 {
				return nil // not a key of ours: ignored
			}
			fn(string(k[:i]), string(k[i+1:]), bytes.Clone(v))
			return nil
		})
	}))
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
