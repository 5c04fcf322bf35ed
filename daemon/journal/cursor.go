package journal

import (
	"errors"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// bucketCursors holds the named cursors of bridges to other systems (the
// upstream bridge's export and import positions, SPEC §12): name → value,
// both opaque to the journal. It is created by the first PutCursor.
var bucketCursors = []byte("cursors")

// Cursor returns the value last stored under name by PutCursor, nil when
// there is none. The slice is the caller's.
//
// Cursors are kept in the database beside the buses, so they survive a
// restart and a crash (each PutCursor is one committed transaction), and
// are lost with it when a damaged database is moved aside: a bridge must
// then start over from what the buses still hold.
func (j *Journal) Cursor(name string) ([]byte, error) {
	if j.noDB.Load() {
		return nil, nil
	}
	var v []byte
	err := j.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketCursors); b != nil {
			if got := b.Get([]byte(name)); got != nil {
				v = append([]byte{}, got...)
			}
		}
		return nil
	})
	return v, cursorErr(err)
}

// PutCursor stores value under name, durably, replacing any earlier one;
// a nil value deletes it. It returns ErrClosed after Close, and ErrDiskFull
// when the disk is full.
func (j *Journal) PutCursor(name string, value []byte) error {
	j.mu.Lock()
	closed := j.closed
	j.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if j.noDB.Load() {
		return errNoDB
	}
	err := j.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketCursors)
		if err != nil {
			return err
		}
		if value == nil {
			return b.Delete([]byte(name))
		}
		return b.Put([]byte(name), value)
	})
	return cursorErr(err)
}

// cursorErr is classify, with a database closed under a cursor call (Close
// ran meanwhile) reported as ErrClosed.
func cursorErr(err error) error {
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return ErrClosed
	}
	return classify(err)
}
