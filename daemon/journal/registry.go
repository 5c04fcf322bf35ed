package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/localbus/localbus/bus"
	bolt "go.etcd.io/bbolt"
)

// busMeta is a bus's settings in the database.
type busMeta struct {
	Session  string `json:"session,omitempty"`
	Global   bool   `json:"global,omitempty"`
	Epoch    string `json:"epoch"`
	RingSize int    `json:"ringSize,omitempty"`
	LastID   uint64 `json:"lastId"`
	Auto     bool   `json:"auto,omitempty"` // created by a publish (hub.AutoJournal)
	// Peer is whose publish created an Auto bus (share.Peer's text);
	// absent in a state dir written before it was stored: unknown.
	Peer string `json:"peer,omitempty"`
}

// parseMeta is the one reading of a bus's settings, k → v in bucket
// buses: a value that does not parse, a key that is not a bus number, or
// settings that are neither a session's nor the global bus's are damage.
func parseMeta(k, v []byte) (*busMeta, error) {
	m := new(busMeta)
	if err := json.Unmarshal(v, m); err != nil || len(k) != 8 || (m.Session == "") != m.Global {
		return nil, fmt.Errorf("journal: %w: the settings of bus %x: %q", errDamaged, k, v)
	}
	return m, nil
}

func getMeta(tx *bolt.Tx, num uint64) (*busMeta, error) {
	b := tx.Bucket(bucketBuses)
	if b == nil {
		return nil, nil
	}
	v := b.Get(idKey(num))
	if v == nil {
		return nil, nil
	}
	return parseMeta(idKey(num), v)
}

func putMeta(tx *bolt.Tx, num uint64, m *busMeta) error {
	v, err := json.Marshal(m)
	if err != nil {
		return err
	}
	b, err := tx.CreateBucketIfNotExists(bucketBuses)
	if err != nil {
		return err
	}
	return b.Put(idKey(num), v)
}

// eventsBucket returns the bucket of bus num's events, nil if there is none.
func eventsBucket(tx *bolt.Tx, num uint64) *bolt.Bucket {
	if evs := tx.Bucket(bucketEvents); evs != nil {
		return evs.Bucket(idKey(num))
	}
	return nil
}

// Sessions returns the ids of the sessions the journal holds, sorted.
func (j *Journal) Sessions() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var ids []string
	for name := range j.names {
		if name != "" {
			ids = append(ids, name)
		}
	}
	slices.Sort(ids)
	return ids
}

// OpenBus returns the store of session ("" for the global bus), its epoch
// and the ring size it was created with (0: the daemon's default). A
// session the journal does not hold is created, on a new epoch, with
// ringSize; for one it holds, ringSize is ignored.
func (j *Journal) OpenBus(session string, ringSize int) (bus.Store, string, int, error) {
	return j.openBus(session, ringSize, false, "")
}

// OpenAutoBus is OpenBus of a session a publish by peer creates, with the
// default ring size: the journal remembers it as such, and peer with it
// (see Auto).
func (j *Journal) OpenAutoBus(session, peer string) (bus.Store, string, int, error) {
	return j.openBus(session, 0, true, peer)
}

// Auto reports whether session was created by OpenAutoBus, and the peer
// stored with it: "" when the state dir was written before peers were
// stored.
func (j *Journal) Auto(session string) (peer string, auto bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	num, ok := j.names[session]
	if !ok || !j.metas[num].Auto {
		return "", false
	}
	return j.metas[num].Peer, true
}

func (j *Journal) openBus(session string, ringSize int, auto bool, peer string) (bus.Store, string, int, error) {
	if session != "" && j.noDB.Load() {
		j.tryWritable() // taken before j.mu
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return nil, "", 0, ErrClosed
	}
	if num, ok := j.names[session]; ok {
		m := j.metas[num]
		return j.stores[num], m.Epoch, m.RingSize, nil
	}
	num := j.nextNum
	m := &busMeta{Session: session, Global: session == "", Epoch: bus.NewEpoch(), RingSize: ringSize, Auto: auto, Peer: peer}
	if j.noDB.Load() {
		// No database yet (readonly_empty.go): the global bus is kept in
		// memory until there is one; a session would be a promise the
		// journal cannot keep.
		if session != "" {
			return nil, "", 0, errNoDB
		}
		j.nextNum++
		return j.addStoreLocked(num, m), m.Epoch, ringSize, nil
	}
	err := j.db.Update(func(tx *bolt.Tx) error {
		if err := putMeta(tx, num, m); err != nil {
			return err
		}
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		return meta.Put(keyNextNum, idKey(num+1))
	})
	if err != nil {
		return nil, "", 0, classify(err)
	}
	j.nextNum++
	s := j.addStoreLocked(num, m)
	return s, m.Epoch, ringSize, nil
}

func (j *Journal) addStoreLocked(num uint64, m *busMeta) *Store {
	// What the bus held at Open is in the database, not the log: logFloor
	// keeps references away from it.
	s := &Store{j: j, num: num, session: m.Session, epoch: m.Epoch, lastID: m.LastID, ckptID: m.LastID,
		syncedID: m.LastID, logFloor: m.LastID, maxLen: bus.DefaultRingSize, maxBytes: bus.DefaultRingMaxBytes}
	j.stores[num], j.names[m.Session], j.metas[num] = s, num, m
	if m.Session != "" && j.exported != nil && j.exported(m.Session) {
		s.hold()
	}
	return s
}

// Delete forgets session and deletes its events, settings and consumers. A session
// the journal does not hold is no error. A journal read-only for lack of
// space refuses it with ErrDiskFull.
func (j *Journal) Delete(session string) error {
	if j.readOnly.Load() {
		return fmt.Errorf("%w: the journal is read-only until space returns", ErrDiskFull)
	}
	j.mu.Lock()
	num, ok := j.names[session]
	if !ok || session == "" || j.closed {
		j.mu.Unlock()
		return nil
	}
	s := j.stores[num]
	delete(j.names, session)
	delete(j.stores, num)
	delete(j.metas, num)
	j.mu.Unlock()
	s.mu.Lock()
	s.deleted = true
	s.pend = nil // no longer to be copied, nor read
	s.releaseBacklog()
	s.mu.Unlock()
	err := j.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketBuses).Delete(idKey(num)); err != nil {
			return err
		}
		if err := deleteConsumersOf(tx, num); err != nil {
			return err
		}
		err := tx.Bucket(bucketEvents).DeleteBucket(idKey(num))
		if errors.Is(err, bolt.ErrBucketNotFound) {
			err = nil
		}
		return err
	})
	return classify(err)
}

func (j *Journal) storeList() []*Store {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]*Store, 0, len(j.stores))
	for _, s := range j.stores {
		out = append(out, s)
	}
	return out
}
