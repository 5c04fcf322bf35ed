package share

import (
	"errors"
	"strconv"
	"strings"
)

// A Peer is who draws on a pool. The zero value is [Unknown]. Peers are
// comparable: two values naming the same identity are equal.
type Peer struct {
	kind kind
	name string // the uid in decimal, or the key's name
}

type kind uint8

const (
	kindUnknown kind = iota
	kindPrivileged
	kindUID
	kindKey
)

var (
	// Unknown is a holder nobody named: it draws like any peer that is not
	// privileged, and every unnamed holder shares its one account.
	Unknown = Peer{}
	// Privileged is root, the daemon's own uid and the daemon itself: it
	// draws on the whole of every pool and is never refused because of
	// what other peers hold.
	Privileged = Peer{kind: kindPrivileged}
)

// UID returns the peer of a Unix socket caller with uid that is neither
// root nor the daemon's own uid (those are [Privileged]): a socket peer is
// its uid, also when it sends a bearer key.
func UID(uid uint32) Peer {
	return Peer{kind: kindUID, name: strconv.FormatUint(uint64(uid), 10)}
}

// Key returns the peer of a caller known by the bearer key named name (on
// TCP, where there is no uid).
func Key(name string) Peer { return Peer{kind: kindKey, name: name} }

// IsPrivileged reports whether p draws on the whole pool.
func (p Peer) IsPrivileged() bool { return p.kind == kindPrivileged }

// String returns p as [Parse] reads it: "privileged", "unknown",
// "uid:1000" or "key:NAME".
func (p Peer) String() string {
	switch p.kind {
	case kindPrivileged:
		return "privileged"
	case kindUID:
		return "uid:" + p.name
	case kindKey:
		return "key:" + p.name
	}
	return "unknown"
}

// ErrBadPeer is returned by Parse for text that names no peer.
var ErrBadPeer = errors.New("share: not a peer")

// maxKeyName is the longest key name a keys file allows.
const maxKeyName = 64

// Parse reads a Peer as String writes it. The empty string is [Unknown]:
// a holder stored before peers were, whose peer nobody knows.
func Parse(s string) (Peer, error) {
	switch s {
	case "", "unknown":
		return Unknown, nil
	case "privileged":
		return Privileged, nil
	}
	if v, ok := strings.CutPrefix(s, "uid:"); ok {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || strconv.FormatUint(n, 10) != v {
			return Unknown, ErrBadPeer
		}
		return UID(uint32(n)), nil
	}
	if v, ok := strings.CutPrefix(s, "key:"); ok && validKeyName(v) {
		return Key(v), nil
	}
	return Unknown, ErrBadPeer
}

// validKeyName reports whether s is a key name as keys files allow them:
// [A-Za-z0-9][A-Za-z0-9._-]{0,63}.
func validKeyName(s string) bool {
	if s == "" || len(s) > maxKeyName {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

// MarshalText implements encoding.TextMarshaler with String.
func (p Peer) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with Parse.
func (p *Peer) UnmarshalText(b []byte) error {
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}
