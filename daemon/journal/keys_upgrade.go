package journal

import (
	"bytes"
	"encoding/json"

	bolt "go.etcd.io/bbolt"
)

// Format 3: a keyed publish's key is in the log record of its events
// (kindKeyed), and a key's record in the database is the reply as a value,
// never its bytes (SPEC §6):
//
//	{"at":UNIX_NANOS,"digest":[32 bytes],"peer":"…","status":200,
//	 "first":FIRST_ID,"count":N,"lastId":LAST_ID}
//
// Before, it held the reply the router had written, as bytes:
// {"at","digest","peer","reply":{"status","contentType","body"}}. The
// upgrade converts every key whose reply was a publish's (status 200 and a
// body that names contiguous ids: {"ids":[…],"lastId"}, a streaming
// publish's {"count","firstId","lastId"}, or line acknowledgements ending
// with one) and drops the rest, which a retry then publishes again as a
// new request would: a reply that was not a publish's was never one to
// repeat, and one with ids not contiguous (a streaming publish that others
// interleaved with) cannot be told as a first id and a count.

// keyValue is format 3's record of a key.
type keyValue struct {
	At     int64    `json:"at"`
	Digest [32]byte `json:"digest"`
	Peer   string   `json:"peer,omitempty"`
	Status int      `json:"status"`
	First  uint64   `json:"first"`
	Count  int      `json:"count"`
	LastID uint64   `json:"lastId"`
}

// oldKeyRecord is a key's record before format 3.
type oldKeyRecord struct {
	At     int64    `json:"at"`
	Digest [32]byte `json:"digest"`
	Peer   string   `json:"peer,omitempty"`
	Reply  struct {
		Status int    `json:"status"`
		Body   []byte `json:"body"`
	} `json:"reply"`
}

func upgradeTo3(tx *bolt.Tx) error {
	b := tx.Bucket(bucketKeys)
	if b == nil {
		return nil
	}
	type put struct{ k, v []byte }
	var puts []put
	var dels [][]byte
	err := b.ForEach(func(k, v []byte) error {
		nv, ok := convertKey(v)
		if ok {
			puts = append(puts, put{bytes.Clone(k), nv})
		} else {
			dels = append(dels, bytes.Clone(k))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, p := range puts {
		if err := b.Put(p.k, p.v); err != nil {
			return err
		}
	}
	for _, k := range dels {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// convertKey converts a key's record of format 2 or earlier to format 3's,
// reporting false for one that names no contiguous ids.
func convertKey(v []byte) ([]byte, bool) {
	var old oldKeyRecord
	if json.Unmarshal(v, &old) != nil || old.Reply.Status != 200 {
		return nil, false
	}
	body := bytes.TrimSpace(old.Reply.Body)
	if i := bytes.LastIndexByte(body, '\n'); i >= 0 {
		body = body[i+1:] // line acks: the final reply
	}
	var r struct {
		IDs     []uint64 `json:"ids"`
		Count   *int     `json:"count"`
		FirstID uint64   `json:"firstId"`
		LastID  uint64   `json:"lastId"`
	}
	if json.Unmarshal(body, &r) != nil {
		return nil, false
	}
	kv := keyValue{At: old.At, Digest: old.Digest, Peer: old.Peer, Status: 200, LastID: r.LastID}
	switch {
	case r.Count != nil:
		kv.First, kv.Count = r.FirstID, *r.Count
	case len(r.IDs) > 0:
		kv.First, kv.Count = r.IDs[0], len(r.IDs)
		for i, id := range r.IDs {
			if id != kv.First+uint64(i) {
				return nil, false
			}
		}
	default:
		return nil, false
	}
	if kv.Count < 1 || kv.First == 0 || kv.LastID != kv.First+uint64(kv.Count)-1 {
		return nil, false
	}
	nv, err := json.Marshal(kv)
	return nv, err == nil
}
