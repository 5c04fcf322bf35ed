package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Consumers (SPEC §2.4), from format 2 on: bucket consumers of the
// database, bus number → a bucket of consumer name → consumerRecord as
// JSON. A session's consumers are kept under its bus number, so deleting
// the session deletes them in the same transaction, and a session created
// later under the same id starts with none.
var bucketConsumers = []byte("consumers")

// AckMode is how a consumer's position moves (SPEC §2.4).
type AckMode string

const (
	// AckAuto: the position follows what the stream wrote.
	AckAuto AckMode = "auto"
	// AckExplicit: the position moves only when the reader acknowledges.
	AckExplicit AckMode = "explicit"
)

// A Consumer is the record of a named cursor on one session.
type Consumer struct {
	Name    string
	Ack     AckMode
	AckedID uint64 // the last id acknowledged, 0 for none
	// Epoch is the session's epoch AckedID belongs to: a session on
	// another epoch makes the consumer's next stream start with
	// epoch_reset.
	Epoch   string
	Created time.Time
	// LastActive is when a stream of the consumer last ended or stored
	// its position (consumer_ttl counts from it).
	LastActive time.Time
}

// consumerRecord is a Consumer as stored, without its name (the key).
type consumerRecord struct {
	Ack        AckMode   `json:"ack"`
	AckedID    uint64    `json:"ackedId"`
	Epoch      string    `json:"epoch"`
	Created    time.Time `json:"created"`
	LastActive time.Time `json:"lastActive"`
}

// ErrNoSession is the error of a consumer call on a session the journal
// does not hold.
var ErrNoSession = errors.New("journal: no such session")

// parseConsumer is the one reading of a stored consumer: a value that does
// not parse, or names an ack mode the journal does not know, is damage.
func parseConsumer(k, v []byte) (Consumer, error) {
	var r consumerRecord
	if err := json.Unmarshal(v, &r); err != nil || (r.Ack != AckAuto && r.Ack != AckExplicit) || len(k) == 0 {
		return Consumer{}, fmt.Errorf("journal: %w: consumer %q: %q", errDamaged, k, v)
	}
	return Consumer{Name: string(k), Ack: r.Ack, AckedID: r.AckedID, Epoch: r.Epoch,
		Created: r.Created, LastActive: r.LastActive}, nil
}

// sessionNum returns session's bus number; the global bus has no
// consumers.
func (j *Journal) sessionNum(session string) (uint64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return 0, ErrClosed
	}
	num, ok := j.names[session]
	if !ok || session == "" {
		return 0, fmt.Errorf("%w: %q", ErrNoSession, session)
	}
	return num, nil
}

// Consumers returns the consumers stored for session, sorted by name.
func (j *Journal) Consumers(session string) ([]Consumer, error) {
	num, err := j.sessionNum(session)
	if err != nil {
		return nil, err
	}
	var out []Consumer
	err = j.db.View(func(tx *bolt.Tx) error {
		b := consumersBucket(tx, num)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			c, err := parseConsumer(k, v)
			out = append(out, c)
			return err
		})
	})
	if err != nil {
		return nil, cursorErr(err)
	}
	slices.SortFunc(out, func(a, b Consumer) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// PutConsumer stores c for session, replacing the record of that name. It
// is durable when PutConsumer returns nil: the database's transaction is
// synced whatever the log's sync mode, so an acknowledgement that was
// answered is never lost. A journal read-only for lack of space refuses it
// with ErrDiskFull.
func (j *Journal) PutConsumer(session string, c Consumer) error {
	if c.Name == "" || (c.Ack != AckAuto && c.Ack != AckExplicit) {
		return fmt.Errorf("journal: a consumer needs a name and an ack mode: %+v", c)
	}
	if j.readOnly.Load() {
		return fmt.Errorf("%w: the journal is read-only until space returns", ErrDiskFull)
	}
	num, err := j.sessionNum(session)
	if err != nil {
		return err
	}
	v, err := json.Marshal(consumerRecord{Ack: c.Ack, AckedID: c.AckedID, Epoch: c.Epoch,
		Created: c.Created.UTC(), LastActive: c.LastActive.UTC()})
	if err != nil {
		return err
	}
	return cursorErr(j.db.Update(func(tx *bolt.Tx) error {
		root, err := tx.CreateBucketIfNotExists(bucketConsumers)
		if err != nil {
			return err
		}
		b, err := root.CreateBucketIfNotExists(idKey(num))
		if err != nil {
			return err
		}
		return b.Put([]byte(c.Name), v)
	}))
}

// DeleteConsumer forgets session's consumer name; one the journal does not
// hold is no error.
func (j *Journal) DeleteConsumer(session, name string) error {
	if j.readOnly.Load() {
		return fmt.Errorf("%w: the journal is read-only until space returns", ErrDiskFull)
	}
	num, err := j.sessionNum(session)
	if err != nil {
		return err
	}
	return cursorErr(j.db.Update(func(tx *bolt.Tx) error {
		if b := consumersBucket(tx, num); b != nil {
			return b.Delete([]byte(name))
		}
		return nil
	}))
}

// consumersBucket returns bus num's bucket of consumers, nil if none.
func consumersBucket(tx *bolt.Tx, num uint64) *bolt.Bucket {
	if root := tx.Bucket(bucketConsumers); root != nil {
		return root.Bucket(idKey(num))
	}
	return nil
}

// deleteConsumersOf deletes bus num's consumers, within the transaction
// that deletes the bus.
func deleteConsumersOf(tx *bolt.Tx, num uint64) error {
	root := tx.Bucket(bucketConsumers)
	if root == nil {
		return nil
	}
	err := root.DeleteBucket(idKey(num))
	if errors.Is(err, bolt.ErrBucketNotFound) {
		return nil
	}
	return err
}

// upgradeTo2 is the upgrade from format 1: it adds the bucket of
// consumers. A daemon of format 1 would not delete a session's consumers
// with it, so a session created again under that id would find them: the
// reason this is a format of its own.
func upgradeTo2(tx *bolt.Tx) error {
	_, err := tx.CreateBucketIfNotExists(bucketConsumers)
	return err
}
