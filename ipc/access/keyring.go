package access

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Errors about key names. The errors [Keyring.Add] and [Keyring.Revoke]
// return are *[KeyNameError] values that wrap one of these.
var (
	ErrKeyExists   = errors.New("access: key name already exists")
	ErrUnknownKey  = errors.New("access: no key with that name")
	ErrInvalidName = errors.New("access: invalid key name, want [A-Za-z0-9][A-Za-z0-9._-]{0,63}")
)

// ErrNoScopes is returned by [Keyring.Add] when no scope is given.
var ErrNoScopes = errors.New("access: a key needs at least one scope")

// KeyNameError reports a key name that cannot be added or revoked. Err is
// [ErrKeyExists], [ErrUnknownKey] or [ErrInvalidName].
type KeyNameError struct {
	Name string
	Err  error
}

func (e *KeyNameError) Error() string { return fmt.Sprintf("%v: %q", e.Err, shorten(e.Name)) }

// Unwrap returns e.Err, for errors.Is.
func (e *KeyNameError) Unwrap() error { return e.Err }

// KeyInfo describes one key without any secret: neither the key nor its
// hash.
type KeyInfo struct {
	Name    string    `json:"name"`
	Scopes  Scopes    `json:"scopes"`
	Created time.Time `json:"created"`
}

// record is one entry of the keys file.
type record struct {
	Name    string    `json:"name"`
	Hash    string    `json:"hash"` // "sha256:<hex>"
	Scopes  []Scope   `json:"scopes"`
	Created time.Time `json:"created"` // RFC 3339, UTC, whole seconds

	digest [sha256.Size]byte // Hash decoded
	scopes Scopes            // Scopes parsed
}

func (r *record) info() KeyInfo {
	return KeyInfo{Name: r.Name, Scopes: r.scopes, Created: r.Created}
}

// Keyring holds the hashed keys of a keys file (SPEC §7). The file is a JSON
// array of records, each
//
//	{"name": "ci", "hash": "sha256:<hex>", "scopes": ["read"], "created": "2026-08-22T10:00:00Z"}
//
// and only ever holds SHA-256 digests: a key is shown once, by [Keyring.Add],
// and cannot be recovered from the file.
//
// The zero value is an empty keyring. A Keyring is safe for concurrent use:
// [Keyring.Lookup] and [Keyring.List] may run alongside each other and
// alongside [Keyring.Add], [Keyring.Revoke] and [Keyring.Save]. Changes live
// in memory until Save. Two processes that each Load, change and Save the
// same file race: the last Save wins.
type Keyring struct {
	mu   sync.RWMutex
	recs []record // guarded by mu; file order, names unique, digests unique
}

// maxKeysFileBytes bounds what Load reads: far more than any real keys
// file (a record is about 200 bytes).
const maxKeysFileBytes = 16 << 20

// Load reads the keys file at path (SPEC §7). A file that does not exist, or
// holds only white space, gives an empty keyring. The file is opened
// without following a symbolic link and without blocking, and must be a
// regular file (a FIFO, device or directory is an error, never a hang),
// owned by this process's uid or by root, with no permission bits for group
// or others (like ssh's private keys), and at most 16 MiB. Every error names
// the path and the reason. Every record is checked: a valid unique name, a
// well-formed unique hash, at least one valid scope; unknown fields are
// errors.
func Load(path string) (*Keyring, error) { return load(path, true) }

// LoadForEdit is Load for a tool that edits the keys file of a daemon,
// such as "localbus keys": run as root, it accepts a file of any owner,
// since a daemon running as its own user needs its keys file to be its
// own, and that daemon checks the owner itself when it loads the file.
// Otherwise it is Load.
func LoadForEdit(path string) (*Keyring, error) { return load(path, os.Geteuid() != 0) }

func load(path string, checkOwner bool) (*Keyring, error) {
	f, err := openKeysFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &Keyring{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("access: keys file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("access: keys file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("access: keys file %s is not a regular file but a %s", path, fileKind(st.Mode()))
	}
	if checkOwner {
		if err := checkKeysOwner(path, st); err != nil {
			return nil, err
		}
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("access: keys file %s has mode %04o, which lets others read it; want 0600 (chmod 600 %s)", path, perm, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeysFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("access: keys file: %w", err)
	}
	if len(data) > maxKeysFileBytes {
		return nil, fmt.Errorf("access: keys file %s is larger than %d bytes", path, maxKeysFileBytes)
	}
	recs, err := parseKeys(data)
	if err != nil {
		return nil, fmt.Errorf("access: keys file %s: %w", path, err)
	}
	return &Keyring{recs: recs}, nil
}

// fileKind names the type of a file that is not a regular one.
func fileKind(m fs.FileMode) string {
	switch m.Type() {
	case fs.ModeDir:
		return "directory"
	case fs.ModeNamedPipe:
		return "FIFO"
	case fs.ModeSocket:
		return "socket"
	case fs.ModeDevice:
		return "block device"
	case fs.ModeDevice | fs.ModeCharDevice:
		return "character device"
	case fs.ModeSymlink:
		return "symbolic link"
	}
	return "special file"
}

// parseKeys decodes and checks the keys file contents.
func parseKeys(data []byte) ([]record, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var recs []record
	if err := dec.Decode(&recs); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("unexpected data after the array of keys")
	}
	names := make(map[string]bool, len(recs))
	digests := make(map[[sha256.Size]byte]bool, len(recs))
	for i := range recs {
		r := &recs[i]
		if !validKeyName(r.Name) {
			return nil, fmt.Errorf("key %d: %w: %q", i, ErrInvalidName, shorten(r.Name))
		}
		if names[r.Name] {
			return nil, fmt.Errorf("key %q: %w", r.Name, ErrKeyExists)
		}
		names[r.Name] = true
		d, ok := parseHash(r.Hash)
		if !ok {
			return nil, fmt.Errorf("key %q: hash must be \"sha256:\" and 64 lowercase hex digits", r.Name)
		}
		if digests[d] {
			return nil, fmt.Errorf("key %q: same hash as an earlier key", r.Name)
		}
		digests[d] = true
		r.digest = d
		if len(r.Scopes) == 0 {
			return nil, fmt.Errorf("key %q: %w", r.Name, ErrNoScopes)
		}
		for _, sc := range r.Scopes {
			if _, err := ParseScope(string(sc)); err != nil {
				return nil, fmt.Errorf("key %q: %w", r.Name, err)
			}
		}
		r.scopes = NewScopes(r.Scopes...)
		r.Scopes = r.scopes.List()
	}
	return recs, nil
}

// Save writes the keyring to path atomically: it writes a temporary file
// with mode 0600 in the same directory, syncs it, and renames it over path,
// so a reader sees the old file or the new one, never a mix. A missing
// parent directory is created with mode 0700. Run as root, Save keeps the
// owner of the file it replaces (or gives a new file the owner of its
// directory), so a daemon running as its own user can still read it.
func (k *Keyring) Save(path string) error {
	k.mu.RLock()
	recs := k.recs
	if recs == nil {
		recs = []record{}
	}
	data, err := json.MarshalIndent(recs, "", "  ")
	k.mu.RUnlock()
	if err != nil {
		return fmt.Errorf("access: encode keys: %w", err)
	}
	data = append(data, '\n')

	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("access: keys file: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("access: keys file: %w", err)
	}
	tmpName := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmpName)
		}
	}()
	// CreateTemp already uses 0600; Chmod makes it independent of that detail.
	if err := tmp.Chmod(0o600); err != nil {
		return fmt.Errorf("access: keys file: %w", err)
	}
	if err := keepOwner(tmp, path, dir); err != nil {
		return fmt.Errorf("access: keys file: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("access: keys file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("access: keys file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("access: keys file: %w", err)
	}
	if err := os.Rename(tmpName, path); err != nil {
		return fmt.Errorf("access: keys file: %w", err)
	}
	ok = true
	// Make the rename itself durable. Not every file system supports
	// syncing a directory; the file is already in place either way.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// Add creates a key named name with the given scopes and returns it. This
// is the only time the key exists outside its holder: the keyring keeps its
// hash alone. The name must match [A-Za-z0-9][A-Za-z0-9._-]{0,63} and be
// unused ([KeyNameError] otherwise); at least one scope is needed
// ([ErrNoScopes]) and each must be valid ([ErrInvalidScope]). The change is
// in memory until [Keyring.Save].
func (k *Keyring) Add(name string, scopes []Scope) (string, error) {
	if !validKeyName(name) {
		return "", &KeyNameError{Name: name, Err: ErrInvalidName}
	}
	if len(scopes) == 0 {
		return "", ErrNoScopes
	}
	for _, sc := range scopes {
		if _, err := ParseScope(string(sc)); err != nil {
			return "", err
		}
	}
	key, err := Generate()
	if err != nil {
		return "", err
	}
	set := NewScopes(scopes...)
	r := record{
		Name:    name,
		Hash:    HashKey(key),
		Scopes:  set.List(),
		Created: time.Now().UTC().Truncate(time.Second),
		digest:  sha256.Sum256([]byte(key)),
		scopes:  set,
	}

	k.mu.Lock()
	defer k.mu.Unlock()
	for i := range k.recs {
		if k.recs[i].Name == name {
			return "", &KeyNameError{Name: name, Err: ErrKeyExists}
		}
	}
	// Copy on write: Save may still be encoding the old slice.
	k.recs = append(k.recs[:len(k.recs):len(k.recs)], r)
	return key, nil
}

// Revoke removes the key named name. An unknown name is a [KeyNameError]
// wrapping [ErrUnknownKey]. Streams already opened with the key are not
// affected (SPEC §7). The change is in memory until [Keyring.Save].
func (k *Keyring) Revoke(name string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := range k.recs {
		if k.recs[i].Name == name {
			recs := make([]record, 0, len(k.recs)-1)
			recs = append(recs, k.recs[:i]...)
			k.recs = append(recs, k.recs[i+1:]...)
			return nil
		}
	}
	return &KeyNameError{Name: name, Err: ErrUnknownKey}
}

// List returns every key's name, scopes and creation time, in file order
// (the order they were added). It never returns a key or a hash.
func (k *Keyring) List() []KeyInfo {
	k.mu.RLock()
	defer k.mu.RUnlock()
	out := make([]KeyInfo, len(k.recs))
	for i := range k.recs {
		out[i] = k.recs[i].info()
	}
	return out
}

// Len returns the number of keys.
func (k *Keyring) Len() int {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return len(k.recs)
}

// Lookup returns the key whose hash matches key. It compares the SHA-256
// digest of key with every record's digest in constant time and does not
// stop at a match, so its timing tells nothing about which record, if any,
// matched or how much of a digest did. The empty key matches nothing.
func (k *Keyring) Lookup(key string) (KeyInfo, bool) {
	if key == "" {
		return KeyInfo{}, false
	}
	d := sha256.Sum256([]byte(key))
	k.mu.RLock()
	defer k.mu.RUnlock()
	found := -1
	for i := range k.recs {
		eq := subtle.ConstantTimeCompare(d[:], k.recs[i].digest[:])
		// Digests are unique, so at most one record is equal; selecting
		// without a branch keeps the loop's timing independent of it.
		found = subtle.ConstantTimeSelect(eq, i, found)
	}
	if found < 0 {
		return KeyInfo{}, false
	}
	return k.recs[found].info(), true
}

// validKeyName reports whether n matches [A-Za-z0-9][A-Za-z0-9._-]{0,63}.
func validKeyName(n string) bool {
	if len(n) < 1 || len(n) > 64 || !isAlnum(n[0]) {
		return false
	}
	for i := 1; i < len(n); i++ {
		c := n[i]
		if !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
}
