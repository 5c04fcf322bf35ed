package access

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
)

// KeyPrefix starts every key [Generate] makes. It lets people and secret
// scanners recognise a localbus key; it adds nothing to the key's strength,
// which comes from the [KeyBytes] random bytes after it.
const KeyPrefix = "lb_"

// KeyBytes is the number of random bytes in a key.
const KeyBytes = 32

// hashPrefix names the digest algorithm in the keys file.
const hashPrefix = "sha256:"

// Generate returns a new key: [KeyPrefix] followed by [KeyBytes] bytes from
// crypto/rand in unpadded base64url, 46 characters in all. Every character
// is in [A-Za-z0-9_-], so the key is valid as a bearer token (RFC 6750), in
// a WebSocket subprotocol name and on a command line without quoting.
func Generate() (string, error) {
	var b [KeyBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("access: generate key: %w", err)
	}
	return KeyPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// HashKey returns the form in which a key is stored: "sha256:" followed by
// the lowercase hex SHA-256 digest of the key's bytes.
func HashKey(key string) string {
	d := sha256.Sum256([]byte(key))
	return hashPrefix + hex.EncodeToString(d[:])
}

// parseHash decodes a stored "sha256:<64 lowercase hex>" digest.
func parseHash(h string) ([sha256.Size]byte, bool) {
	var d [sha256.Size]byte
	hx, ok := strings.CutPrefix(h, hashPrefix)
	if !ok || len(hx) != 2*sha256.Size || strings.ToLower(hx) != hx {
		return d, false
	}
	if _, err := hex.Decode(d[:], []byte(hx)); err != nil {
		return d, false
	}
	return d, true
}

// looksLikeKey reports whether s contains something shaped like a generated
// key: KeyPrefix followed by at least 40 base64url characters.
func looksLikeKey(s string) bool {
	for {
		i := strings.Index(s, KeyPrefix)
		if i < 0 {
			return false
		}
		s = s[i+len(KeyPrefix):]
		n := 0
		for n < len(s) && isBase64URL(s[n]) {
			n++
		}
		if n >= 40 {
			return true
		}
	}
}

func isBase64URL(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}
