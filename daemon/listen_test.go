package daemon

import (
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestNonLoopbackNamesWildcardAndInterfaceListeners(t *testing.T) {
	var ls []net.Listener
	listen := func(network, addr string) net.Listener {
		t.Helper()
		l, err := net.Listen(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		ls = append(ls, l)
		return l
	}
	listen("tcp", "127.0.0.1:0")
	listen("unix", filepath.Join(t.TempDir(), "s"))
	wild := listen("tcp4", "0.0.0.0:0")
	want := []string{wild.Addr().String()}
	if l, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		ls = append(ls, l)
		t.Cleanup(func() { l.Close() })
	}
	if l, err := net.Listen("tcp6", "[::]:0"); err == nil {
		ls = append(ls, l)
		t.Cleanup(func() { l.Close() })
		want = append(want, l.Addr().String())
	}
	if got := nonLoopback(ls); !slices.Equal(got, want) {
		t.Errorf("nonLoopback = %q, want %q", got, want)
	}
}

// needRoot skips a test that gives files to another uid or group.
func needRoot(t *testing.T, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: " + why)
	}
}

// withUmask runs f with the process umask set to mask. Tests that use it
// must not be parallel: the umask is process-wide.
func withUmask(mask int, f func()) {
	old := unix.Umask(mask)
	defer unix.Umask(old)
	f()
}

// The tests below change the umask or depend on it, so none is parallel.

func TestBindUnixCreatesTheSocketWithItsModeWhateverTheUmask(t *testing.T) {
	for _, tt := range []struct {
		umask int
		mode  os.FileMode
	}{
		{0, 0o600}, {0, 0o660}, {0o077, 0o660}, {0o077, 0o666}, {0o022, 0o600},
	} {
		path := filepath.Join(t.TempDir(), "s.sock")
		var ln *net.UnixListener
		var err error
		after := -1
		withUmask(tt.umask, func() {
			ln, err = bindUnix(path, tt.mode)
			after = unix.Umask(tt.umask)
		})
		if err != nil {
			t.Fatal(err)
		}
		// What bind made, before anything else could touch it: bindUnix
		// changes nothing by path afterwards.
		fi, serr := os.Lstat(path)
		ln.Close()
		if serr != nil {
			t.Fatal(serr)
		}
		if fi.Mode() != fs.ModeSocket|tt.mode {
			t.Errorf("umask %04o, mode %04o: the socket was created %v, want %v", tt.umask, tt.mode, fi.Mode(), fs.ModeSocket|tt.mode)
		}
		if after != tt.umask {
			t.Errorf("umask after bindUnix = %04o, want %04o restored", after, tt.umask)
		}
	}
}

func TestListenUnixMakesTheSocketDirectoryForSocketGroup(t *testing.T) {
	needRoot(t, "giving a directory to group 65534")
	const group = 65534
	base := t.TempDir()
	path := filepath.Join(base, "run", "localbus", "lb.sock")
	var ln *net.UnixListener
	var err error
	// A narrow umask must not narrow what the daemon makes.
	withUmask(0o077, func() { ln, _, err = listenUnix(path, 0o660, strconv.Itoa(group)) })
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, dir := range []string{filepath.Join(base, "run"), filepath.Dir(path)} {
		checkOwner(t, dir, fs.ModeDir|0o750, group)
	}
	checkOwner(t, path, fs.ModeSocket|0o660, group)
}

func TestListenUnixMakesTheSocketDirectoryWithTheDaemonsGroupByDefault(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "lb.sock")
	var ln *net.UnixListener
	var err error
	withUmask(0o077, func() { ln, _, err = listenUnix(path, 0o600, "") })
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	checkOwner(t, filepath.Dir(path), fs.ModeDir|0o750, os.Getegid())
	checkOwner(t, path, fs.ModeSocket|0o600, os.Getegid())
}

func TestListenUnixLeavesAnExistingDirectoryAsItIs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	ln, _, err := listenUnix(filepath.Join(dir, "lb.sock"), 0o660, strconv.Itoa(os.Getegid()))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	checkOwner(t, dir, fs.ModeDir|0o711, os.Getegid())
}

// checkOwner fails unless path has mode and group gid (not following a
// link).
func checkOwner(t *testing.T, path string, mode fs.FileMode, gid int) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != mode {
		t.Errorf("%s has mode %v, want %v", path, fi.Mode(), mode)
	}
	if got := int(fi.Sys().(*syscall.Stat_t).Gid); got != gid {
		t.Errorf("%s has group %d, want %d", path, got, gid)
	}
}

func TestChownSocketNeverFollowsALink(t *testing.T) {
	needRoot(t, "changing a file's group to 65534")
	dir := t.TempDir()
	target := filepath.Join(dir, "precious")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "lb.sock")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	err := chownSocket(path, 65534)
	if err == nil || !strings.Contains(err.Error(), "no longer the socket") {
		t.Errorf("chownSocket(a link) = %v, want it refused", err)
	}
	checkOwner(t, target, 0o600, 0)
}

func TestChownSocketRefusesADirectoryOthersCanWrite(t *testing.T) {
	for _, mode := range []fs.FileMode{0o777, 0o770, fs.ModeSticky | 0o777} {
		dir := filepath.Join(t.TempDir(), "run")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		ln, err := bindUnix(filepath.Join(dir, "lb.sock"), 0o660)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		err = chownSocket(filepath.Join(dir, "lb.sock"), os.Getegid())
		ln.Close()
		if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "only its owner can write") {
			t.Errorf("chownSocket in a directory of mode %v = %v, want a refusal naming it", mode, err)
		}
	}
}

func TestChownSocketRefusesADirectoryAnotherUserOwns(t *testing.T) {
	needRoot(t, "giving a directory to uid 65534")
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := bindUnix(filepath.Join(dir, "lb.sock"), 0o660)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	err = chownSocket(filepath.Join(dir, "lb.sock"), 0)
	if err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("chownSocket in a directory of uid 65534 = %v, want a refusal naming the owner", err)
	}
}
