package journaltest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// DBName is the journal's database file.
const DBName = "journal.db"

// Files returns the paths of the journal files in dir: the database, if
// any, then the log segments in order.
func Files(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var db, segs []string
	for _, e := range ents {
		switch name := e.Name(); {
		case name == DBName:
			db = append(db, filepath.Join(dir, name))
		case strings.HasPrefix(name, "wal-") && strings.HasSuffix(name, ".log"):
			segs = append(segs, filepath.Join(dir, name))
		}
	}
	slices.Sort(segs)
	return append(db, segs...)
}

// Segments returns the paths of the log segments in dir, in order.
func Segments(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	for _, p := range Files(t, dir) {
		if filepath.Base(p) != DBName {
			out = append(out, p)
		}
	}
	return out
}

// A Damage is one change to a file: Kind "flip" XORs the byte at Off with
// Xor, "zero" zeroes N bytes from Off, "truncate" cuts the file to Off
// bytes.
type Damage struct {
	Path string
	Kind string
	Off  int64
	Xor  byte
	N    int64
}

func (d Damage) String() string {
	switch d.Kind {
	case "flip":
		return fmt.Sprintf("%s: byte %d ^= %#02x", filepath.Base(d.Path), d.Off, d.Xor)
	case "zero":
		return fmt.Sprintf("%s: %d bytes zeroed at %d", filepath.Base(d.Path), d.N, d.Off)
	default:
		return fmt.Sprintf("%s: truncated to %d bytes", filepath.Base(d.Path), d.Off)
	}
}

// Apply does the damage.
func (d Damage) Apply(t testing.TB) {
	t.Helper()
	if err := d.apply(); err != nil {
		t.Fatalf("damage %v: %v", d, err)
	}
}

func (d Damage) apply() error {
	switch d.Kind {
	case "truncate":
		return os.Truncate(d.Path, d.Off)
	case "flip", "zero":
	default:
		return fmt.Errorf("unknown damage %q", d.Kind)
	}
	f, err := os.OpenFile(d.Path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	n := d.N
	if d.Kind == "flip" {
		n = 1
	}
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, d.Off); err != nil {
		return err
	}
	for i := range buf {
		if d.Kind == "flip" {
			buf[i] ^= d.Xor
		} else {
			buf[i] = 0
		}
	}
	_, err = f.WriteAt(buf, d.Off)
	return err
}

// Flip XORs the byte at off of path with xor.
func Flip(t testing.TB, path string, off int64, xor byte) {
	t.Helper()
	Damage{Path: path, Kind: "flip", Off: off, Xor: xor}.Apply(t)
}

// Zero zeroes n bytes of path from off.
func Zero(t testing.TB, path string, off, n int64) {
	t.Helper()
	Damage{Path: path, Kind: "zero", Off: off, N: n}.Apply(t)
}

// Truncate cuts path to size bytes.
func Truncate(t testing.TB, path string, size int64) {
	t.Helper()
	Damage{Path: path, Kind: "truncate", Off: size}.Apply(t)
}

// Used returns the offset past the last byte of path that is not zero: a
// log segment is allocated whole and is zero past the end of the log.
func Used(t testing.TB, path string) int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	end := len(data)
	for end > 0 && data[end-1] == 0 {
		end--
	}
	return int64(end)
}

// RandomFlip returns a flip of one random byte of one of files, chosen
// at random: within the database, anywhere; within a log segment, in
// what it holds (see Used) or just past it. The byte is XORed with a
// random value that is not zero, so it always changes.
func RandomFlip(t testing.TB, rng *rand.Rand, files []string) Damage {
	t.Helper()
	if len(files) == 0 {
		t.Fatal("no journal files to damage")
	}
	path := files[rng.IntN(len(files))]
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	limit := fi.Size()
	if filepath.Base(path) != DBName {
		limit = min(limit, Used(t, path)+64)
	}
	if limit == 0 {
		limit = 1
	}
	return Damage{Path: path, Kind: "flip", Off: rng.Int64N(limit), Xor: byte(1 + rng.IntN(255))}
}

// PlantSymlink replaces path by a symlink to target.
func PlantSymlink(t testing.TB, path, target string) {
	t.Helper()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}

// PlantFIFO replaces path by a named pipe, which blocks a reader that
// opens it without O_NONBLOCK until a writer comes.
func PlantFIFO(t testing.TB, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
}

// SmallDisk mounts a tmpfs of size bytes at dir, which must exist, and
// unmounts it when the test ends (register it before anything that must
// stop using dir first, such as a daemon). It skips the test when not run
// as root, or when mounting fails.
func SmallDisk(t testing.TB, dir string, size int64) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small filesystem needs root")
	}
	opts := fmt.Sprintf("size=%d,mode=0700", size)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
}

// Fill writes a ballast file in dir until its filesystem is full and
// returns a function that removes it.
func Fill(t testing.TB, dir string) (release func()) {
	t.Helper()
	path := filepath.Join(dir, "ballast")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	release = func() {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Error(err)
		}
	}
	buf := make([]byte, 64<<10)
	for i := range buf {
		buf[i] = 0xa5 // not zero, so no filesystem keeps it sparse
	}
	for len(buf) > 0 {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				f.Close()
				release()
				t.Fatal(err)
			}
			buf = buf[:len(buf)/2]
		}
	}
	f.Close()
	return release
}
