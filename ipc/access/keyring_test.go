package access

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestGenerateKeyShape(t *testing.T) {
	t.Parallel()
	seen := make(map[string]bool)
	for range 100 {
		k, err := Generate()
		if err != nil {
			t.Fatal(err)
		}
		rest, ok := strings.CutPrefix(k, KeyPrefix)
		if !ok {
			t.Fatalf("Generate() = %q, want prefix %q", k, KeyPrefix)
		}
		raw, err := base64.RawURLEncoding.DecodeString(rest)
		if err != nil || len(raw) != KeyBytes {
			t.Fatalf("Generate() body %q decodes to %d bytes, %v; want %d", rest, len(raw), err, KeyBytes)
		}
		if !isToken68(k) || !isSubprotocolKey(k) {
			t.Fatalf("Generate() = %q is not usable as a bearer token and subprotocol", k)
		}
		if seen[k] {
			t.Fatalf("Generate() repeated %q", k)
		}
		seen[k] = true
	}
}

func TestHashKey(t *testing.T) {
	t.Parallel()
	// sha256("abc")
	const want = "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
	if got := HashKey("abc"); got != want {
		t.Errorf("HashKey(\"abc\") = %q, want %q", got, want)
	}
}

func TestKeyringAddLookupRevoke(t *testing.T) {
	t.Parallel()
	var kr Keyring
	kci, err := kr.Add("ci", []Scope{Read, "publish:build"})
	if err != nil {
		t.Fatal(err)
	}
	kadm, err := kr.Add("ops.admin", []Scope{Admin})
	if err != nil {
		t.Fatal(err)
	}
	info, ok := kr.Lookup(kci)
	if !ok || info.Name != "ci" || info.Scopes.String() != "read,publish:build" {
		t.Errorf("Lookup(ci key) = %+v, %v; want ci with read,publish:build", info, ok)
	}
	if info, ok := kr.Lookup(kadm); !ok || info.Name != "ops.admin" || !info.Scopes.CanAdmin() {
		t.Errorf("Lookup(admin key) = %+v, %v; want ops.admin with admin", info, ok)
	}
	for _, wrong := range []string{"", "x", kci[:len(kci)-1], kci + "A", strings.ToUpper(kci), HashKey(kci)} {
		if info, ok := kr.Lookup(wrong); ok {
			t.Errorf("Lookup(wrong key) = %+v, true; want no match", info)
		}
	}
	if err := kr.Revoke("ci"); err != nil {
		t.Fatal(err)
	}
	if _, ok := kr.Lookup(kci); ok {
		t.Error("Lookup of a revoked key matched")
	}
	if _, ok := kr.Lookup(kadm); !ok {
		t.Error("Revoke of one key broke another")
	}
	if got := kr.Len(); got != 1 {
		t.Errorf("Len() = %d, want 1", got)
	}
}

func TestKeyringAddErrors(t *testing.T) {
	t.Parallel()
	var kr Keyring
	if _, err := kr.Add("taken", []Scope{Read}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		scopes []Scope
		want   error
	}{
		{"taken", []Scope{Read}, ErrKeyExists},
		{"", []Scope{Read}, ErrInvalidName},
		{"-lead", []Scope{Read}, ErrInvalidName},
		{".lead", []Scope{Read}, ErrInvalidName},
		{"a b", []Scope{Read}, ErrInvalidName},
		{"a/b", []Scope{Read}, ErrInvalidName},
		{strings.Repeat("a", 65), []Scope{Read}, ErrInvalidName},
		{"ok", nil, ErrNoScopes},
		{"ok", []Scope{}, ErrNoScopes},
		{"ok", []Scope{"root"}, ErrInvalidScope},
		{"ok", []Scope{"publish:localbus"}, ErrInvalidScope},
	}
	for _, tt := range tests {
		key, err := kr.Add(tt.name, tt.scopes)
		if !errors.Is(err, tt.want) || key != "" {
			t.Errorf("Add(%q, %q) = %q, %v; want \"\", %v", tt.name, tt.scopes, key, err, tt.want)
		}
	}
	var ne *KeyNameError
	if _, err := kr.Add("taken", []Scope{Read}); !errors.As(err, &ne) || ne.Name != "taken" {
		t.Errorf("Add(duplicate) error = %v, want *KeyNameError naming it", err)
	}
	if _, err := kr.Add(strings.Repeat("a", 64), []Scope{Read}); err != nil {
		t.Errorf("Add(64-byte name) = %v, want success", err)
	}
	if kr.Len() != 2 {
		t.Errorf("Len() = %d after failed adds, want 2", kr.Len())
	}
}

func TestKeyringRevokeUnknownIsTyped(t *testing.T) {
	t.Parallel()
	var kr Keyring
	err := kr.Revoke("ghost")
	var ne *KeyNameError
	if !errors.Is(err, ErrUnknownKey) || !errors.As(err, &ne) || ne.Name != "ghost" {
		t.Errorf("Revoke(unknown) = %v, want *KeyNameError wrapping ErrUnknownKey", err)
	}
}

func TestKeyringSaveLoadRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "conf", "keys.json") // parent does not exist yet
	var kr Keyring
	before := time.Now().UTC().Truncate(time.Second)
	k1, err := kr.Add("ci", []Scope{"read:build", Publish})
	if err != nil {
		t.Fatal(err)
	}
	k2, err := kr.Add("dash", []Scope{Read})
	if err != nil {
		t.Fatal(err)
	}
	if err := kr.Save(path); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o600 {
		t.Errorf("keys file mode = %04o, want 0600", got)
	}
	dst, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if got := dst.Mode().Perm(); got&0o077 != 0 {
		t.Errorf("created keys directory mode = %04o, want 0700", got)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{k1, k2, strings.TrimPrefix(k1, KeyPrefix), strings.TrimPrefix(k2, KeyPrefix)} {
		if strings.Contains(string(data), k) {
			t.Fatalf("keys file contains a key:\n%s", data)
		}
	}
	if !strings.Contains(string(data), HashKey(k1)) {
		t.Errorf("keys file lacks the hash of the first key:\n%s", data)
	}

	loaded, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	list := loaded.List()
	if len(list) != 2 || list[0].Name != "ci" || list[1].Name != "dash" {
		t.Fatalf("List() after Load = %+v, want ci, dash", list)
	}
	if got := list[0].Scopes.String(); got != "read:build,publish" {
		t.Errorf("ci scopes after Load = %q, want read:build,publish", got)
	}
	if c := list[0].Created; c.Before(before) || c.After(time.Now()) || c.Location() != time.UTC {
		t.Errorf("ci created = %v, want UTC between %v and now", c, before)
	}
	for _, k := range []string{k1, k2} {
		if _, ok := loaded.Lookup(k); !ok {
			t.Errorf("Lookup after Load failed for key %d", len(k))
		}
	}
	if _, ok := loaded.Lookup(k1 + "x"); ok {
		t.Error("Lookup after Load matched a wrong key")
	}

	// Revoke, save over the old file, load again.
	if err := loaded.Revoke("ci"); err != nil {
		t.Fatal(err)
	}
	if err := loaded.Save(path); err != nil {
		t.Fatal(err)
	}
	again, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := again.Lookup(k1); ok {
		t.Error("revoked key still matches after Save and Load")
	}
	if _, ok := again.Lookup(k2); !ok {
		t.Error("kept key no longer matches after Save and Load")
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries after saves, want only the keys file", len(entries))
	}
}

func TestKeyringListNeverShowsSecrets(t *testing.T) {
	t.Parallel()
	var kr Keyring
	key, err := kr.Add("ci", []Scope{Read})
	if err != nil {
		t.Fatal(err)
	}
	out := fmt.Sprintf("%+v %#v", kr.List(), kr.List())
	hash := strings.TrimPrefix(HashKey(key), hashPrefix)
	if strings.Contains(out, strings.TrimPrefix(key, KeyPrefix)) || strings.Contains(out, hash) {
		t.Errorf("List output shows a key or hash: %s", out)
	}
}

func TestLoadMissingFileIsEmpty(t *testing.T) {
	t.Parallel()
	kr, err := Load(filepath.Join(t.TempDir(), "absent.json"))
	if err != nil || kr.Len() != 0 {
		t.Errorf("Load(absent) = %d keys, %v; want empty, nil", kr.Len(), err)
	}
}

func TestLoadRefusesWideMode(t *testing.T) {
	t.Parallel()
	for _, mode := range []fs.FileMode{0o640, 0o604, 0o644, 0o660, 0o666} {
		path := filepath.Join(t.TempDir(), "keys.json")
		if err := os.WriteFile(path, []byte("[]"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), fmt.Sprintf("%04o", mode)) {
			t.Errorf("Load(mode %04o) error = %v, want one naming the path and mode", mode, err)
		}
	}
	for _, mode := range []fs.FileMode{0o600, 0o400} {
		path := filepath.Join(t.TempDir(), "keys.json")
		if err := os.WriteFile(path, []byte("[]"), mode); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(path); err != nil {
			t.Errorf("Load(mode %04o) = %v, want success", mode, err)
		}
	}
}

func TestLoadRefusesDirectory(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "keys.json")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil {
		t.Error("Load(directory) succeeded")
	}
}

func TestLoadRejectsBadFiles(t *testing.T) {
	t.Parallel()
	h1 := HashKey("one")
	h2 := HashKey("two")
	tests := []struct {
		name, body string
	}{
		{"not json", `nope`},
		{"object", `{"keys":[]}`},
		{"trailing data", `[] []`},
		{"unknown field", `[{"name":"a","hash":"` + h1 + `","scopes":["read"],"created":"2026-01-01T00:00:00Z","key":"x"}]`},
		{"bad name", `[{"name":"-a","hash":"` + h1 + `","scopes":["read"]}]`},
		{"duplicate name", `[{"name":"a","hash":"` + h1 + `","scopes":["read"]},{"name":"a","hash":"` + h2 + `","scopes":["read"]}]`},
		{"duplicate hash", `[{"name":"a","hash":"` + h1 + `","scopes":["read"]},{"name":"b","hash":"` + h1 + `","scopes":["read"]}]`},
		{"no algorithm", `[{"name":"a","hash":"` + strings.TrimPrefix(h1, hashPrefix) + `","scopes":["read"]}]`},
		{"short hash", `[{"name":"a","hash":"sha256:abcd","scopes":["read"]}]`},
		{"uppercase hash", `[{"name":"a","hash":"` + strings.ToUpper(h1) + `","scopes":["read"]}]`},
		{"no scopes", `[{"name":"a","hash":"` + h1 + `","scopes":[]}]`},
		{"bad scope", `[{"name":"a","hash":"` + h1 + `","scopes":["root"]}]`},
		{"bad created", `[{"name":"a","hash":"` + h1 + `","scopes":["read"],"created":"yesterday"}]`},
	}
	for _, tt := range tests {
		path := filepath.Join(t.TempDir(), "keys.json")
		if err := os.WriteFile(path, []byte(tt.body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(path); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: Load error = %v, want one naming the file", tt.name, err)
		}
	}
}

func TestLoadAcceptsEmptyAndHandWritten(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(path, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if kr, err := Load(path); err != nil || kr.Len() != 0 {
		t.Errorf("Load(blank file) = %v; want empty keyring", err)
	}
	body := `[{"name":"hand","hash":"` + HashKey("secret-token") + `","scopes":["read:ci","read"],"created":"2026-08-22T10:00:00+02:00"}]`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	kr, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	info, ok := kr.Lookup("secret-token")
	if !ok || info.Name != "hand" || info.Scopes.String() != "read,read:ci" {
		t.Errorf("Lookup = %+v, %v; want hand with read,read:ci", info, ok)
	}
	if want := time.Date(2026, 8, 22, 8, 0, 0, 0, time.UTC); !info.Created.Equal(want) {
		t.Errorf("created = %v, want %v", info.Created, want)
	}
}

func TestKeyringConcurrentUse(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys.json")
	var kr Keyring
	key, err := kr.Add("base", []Scope{Read})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for range 200 {
				if _, ok := kr.Lookup(key); !ok {
					t.Error("concurrent Lookup lost a key")
					return
				}
				kr.List()
			}
		})
		wg.Go(func() {
			for j := range 20 {
				name := fmt.Sprintf("k%d-%d", i, j)
				if _, err := kr.Add(name, []Scope{Publish}); err != nil {
					t.Error(err)
					return
				}
				if j%2 == 0 {
					if err := kr.Revoke(name); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Go(func() {
		for range 5 {
			if err := kr.Save(path); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
	if got, want := kr.Len(), 1+4*10; got != want {
		t.Errorf("Len() = %d, want %d", got, want)
	}
}

func TestSaveAsRootKeepsTheOwnerOfTheFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to own files as another user")
	}
	const daemonUID = 65534
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.json")
	ring, err := LoadForEdit(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ring.Add("first", []Scope{Read}); err != nil {
		t.Fatal(err)
	}
	if err := ring.Save(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, daemonUID, daemonUID); err != nil {
		t.Fatal(err)
	}
	// The daemon's own file: Load refuses it to root, LoadForEdit takes it.
	if _, err := Load(path); err == nil {
		t.Errorf("Load as root of a keys file owned by uid %d succeeded", daemonUID)
	}
	if ring, err = LoadForEdit(path); err != nil {
		t.Fatalf("LoadForEdit as root of the daemon's keys file: %v", err)
	}
	if _, err := ring.Add("second", []Scope{Read}); err != nil {
		t.Fatal(err)
	}
	if err := ring.Save(path); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != daemonUID || fi.Mode().Perm() != 0o600 {
		t.Errorf("after Save the keys file is uid %d mode %v, want uid %d mode 0600", st.Uid, fi.Mode().Perm(), daemonUID)
	}

	// A new file in a directory that belongs to the daemon belongs to it too.
	own := filepath.Join(dir, "state")
	if err := os.Mkdir(own, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(own, daemonUID, daemonUID); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(own, "keys.json")
	if err := ring.Save(fresh); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(fresh); err != nil || fi.Sys().(*syscall.Stat_t).Uid != daemonUID {
		t.Errorf("a new keys file in the daemon's directory: %v, %v; want it owned by uid %d", fi, err, daemonUID)
	}
}
