package journal

import (
	"errors"
	"fmt"
	"slices"

	"github.com/localbus/localbus/bus"
	bolt "go.etcd.io/bbolt"
)

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
	err := j.db.Update(func(tx *bolt.Tx) error {
		if err := putMeta(tx, num, m); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keyNextNum, idKey(num+1))
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
	return s
}

// Delete forgets session and deletes its events and settings. A session
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
	s.mu.Unlock()
	err := j.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketBuses).Delete(idKey(num)); err != nil {
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
