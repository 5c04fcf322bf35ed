package systemd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// The helper process: the test binary run again with helperEnv set, as the
// activated daemon. It calls Listeners, serves one connection on every
// listener (writing the listener's key), and prints a helperResult line.
const (
	helperEnv   = "LOCALBUS_SYSTEMD_HELPER"
	fixPIDEnv   = "LOCALBUS_SYSTEMD_FIX_LISTEN_PID" // set LISTEN_PID to the helper's own pid first
	resultLabel = "HELPER-RESULT "
	// noRaceSleep spares the race detector's one-second pause at exit.
	noRaceSleep = "GORACE=atexit_sleep_ms=0"
)

// helperResult is what the helper process reports on stdout.
type helperResult struct {
	Activated bool                // Listeners' flag
	Networks  map[string][]string // key -> network of each listener
	Err       string              // Listeners' error, if any
	LeftEnv   []string            // LISTEN_* variables still set afterwards
}

func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		return
	}
	if os.Getenv(fixPIDEnv) == "1" {
		os.Setenv("LISTEN_PID", strconv.Itoa(os.Getpid()))
	}
	ls, activated, err := Listeners()
	res := helperResult{Activated: activated, Networks: map[string][]string{}}
	if err != nil {
		res.Err = err.Error()
	}
	for _, k := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
		if _, ok := os.LookupEnv(k); ok {
			res.LeftEnv = append(res.LeftEnv, k)
		}
	}
	for key, list := range ls {
		for _, l := range list {
			res.Networks[key] = append(res.Networks[key], l.Addr().Network())
			if err := serveOne(l, key); err != nil {
				t.Errorf("serving %s: %v", key, err)
			}
			l.Close()
		}
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("\n%s%s\n", resultLabel, b)
}

// serveOne accepts one connection on l and writes key to it.
func serveOne(l net.Listener, key string) error {
	if d, ok := l.(interface{ SetDeadline(time.Time) error }); ok {
		if err := d.SetDeadline(time.Now().Add(20 * time.Second)); err != nil {
			return err
		}
	}
	c, err := l.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte(key + "\n"))
	return err
}

// startHelper starts cmd and makes sure the test stops it: the returned
// function waits for it to exit (killing it after a deadline) and returns
// its result.
func startHelper(t *testing.T, name string, args []string, setup func(*exec.Cmd)) (wait func() helperResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	setup(cmd)
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	waited := false
	var werr error
	waitOnce := func() error {
		if !waited {
			waited = true
			werr = cmd.Wait()
			cancel()
		}
		return werr
	}
	t.Cleanup(func() {
		if !waited {
			cancel() // kills it
			waitOnce()
		}
	})
	return func() helperResult {
		t.Helper()
		if err := waitOnce(); err != nil {
			t.Fatalf("helper process: %v\nstdout:\n%s\nstderr:\n%s", err, &stdout, &stderr)
		}
		for _, line := range strings.Split(stdout.String(), "\n") {
			if rest, ok := strings.CutPrefix(line, resultLabel); ok {
				var res helperResult
				if err := json.Unmarshal([]byte(rest), &res); err != nil {
					t.Fatalf("helper result %q: %v", rest, err)
				}
				return res
			}
		}
		t.Fatalf("helper process printed no result\nstdout:\n%s\nstderr:\n%s", &stdout, &stderr)
		return helperResult{}
	}
}

// readKey reads the line a helper writes on a connection it accepted.
func readKey(t *testing.T, c net.Conn) string {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("reading from the helper's listener: %v", err)
	}
	return strings.TrimSuffix(line, "\n")
}

// The kinds of descriptor a test passes to the helper.
const (
	unixStream = "unix"
	tcpStream  = "tcp"
	unixgram   = "unixgram"
	unixConn   = "unixconn" // a connected Unix stream socket
	pipeEnd    = "pipe"
)

// inherit makes a descriptor of the given kind for the helper to inherit.
// For a listening socket it also dials it, so a connection waits in the
// backlog for the helper to accept; conn is nil for the others.
func inherit(t *testing.T, kind string) (f *os.File, conn net.Conn, path string) {
	t.Helper()
	var err error
	switch kind {
	case unixStream, tcpStream:
		var l net.Listener
		if kind == unixStream {
			path = filepath.Join(t.TempDir(), "s.sock")
			l, err = net.Listen("unix", path)
		} else {
			l, err = net.Listen("tcp", "127.0.0.1:0")
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		f, err = l.(interface{ File() (*os.File, error) }).File()
		if err != nil {
			t.Fatal(err)
		}
		conn, err = net.Dial(l.Addr().Network(), l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
	case unixgram:
		pc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(t.TempDir(), "d.sock"), Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		if f, err = pc.File(); err != nil {
			t.Fatal(err)
		}
	case unixConn:
		a, b, err := socketPair()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		f = a
	case pipeEnd:
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		f = r
	default:
		t.Fatalf("unknown descriptor kind %q", kind)
	}
	t.Cleanup(func() { f.Close() })
	return f, conn, path
}

// TestListenersTakesInheritedDescriptors passes descriptors to a helper
// process the way systemd does (fd 3 on, LISTEN_FDS, LISTEN_FDNAMES,
// LISTEN_PID naming the helper) and checks what Listeners makes of them.
func TestListenersTakesInheritedDescriptors(t *testing.T) {
	tests := []struct {
		name     string
		fds      []string            // descriptor kinds, from fd 3
		listenFD string              // LISTEN_FDS; default len(fds)
		fdNames  *string             // LISTEN_FDNAMES; nil leaves it unset
		want     map[string][]string // key -> networks, on success
		wantKeys []string            // what each connection reads back, on success
		wantErr  string              // prefix of Listeners' error
	}{
		{
			name: "named unix and tcp", fds: []string{unixStream, tcpStream}, fdNames: ptr("unix:tcp"),
			want: map[string][]string{"unix": {"unix"}, "tcp": {"tcp"}}, wantKeys: []string{"unix", "tcp"},
		},
		{
			name: "unnamed sockets are keyed by kind", fds: []string{tcpStream, unixStream},
			want: map[string][]string{"unix": {"unix"}, "tcp": {"tcp"}}, wantKeys: []string{"tcp", "unix"},
		},
		{
			name: "empty names are keyed by kind", fds: []string{unixStream, tcpStream}, fdNames: ptr(":"),
			want: map[string][]string{"unix": {"unix"}, "tcp": {"tcp"}}, wantKeys: []string{"unix", "tcp"},
		},
		{
			name: "systemd default names are keyed by kind", fds: []string{unixStream, tcpStream}, fdNames: ptr("localbus.socket:unknown"),
			want: map[string][]string{"unix": {"unix"}, "tcp": {"tcp"}}, wantKeys: []string{"unix", "tcp"},
		},
		{
			name: "sockets can share a name", fds: []string{tcpStream, tcpStream}, fdNames: ptr("tcp:tcp"),
			want: map[string][]string{"tcp": {"tcp", "tcp"}}, wantKeys: []string{"tcp", "tcp"},
		},
		{
			name: "other names are kept", fds: []string{unixStream}, fdNames: ptr("admin"),
			want: map[string][]string{"admin": {"unix"}}, wantKeys: []string{"admin"},
		},
		{
			name: "unix name on a tcp socket", fds: []string{tcpStream}, fdNames: ptr("unix"),
			wantErr: "systemd: activated socket unix is a tcp socket",
		},
		{
			name: "datagram socket", fds: []string{unixStream, unixgram}, fdNames: ptr("unix:unix"),
			wantErr: "systemd: LISTEN_FDS=2 but descriptor 4 is not a listening stream socket",
		},
		{
			name: "connected stream socket", fds: []string{unixConn}, fdNames: ptr("unix"),
			wantErr: "systemd: LISTEN_FDS=1 but descriptor 3 is not a listening stream socket",
		},
		{
			name: "pipe", fds: []string{pipeEnd},
			wantErr: "systemd: LISTEN_FDS=1 but descriptor 3 is not a socket",
		},
		{
			name: "fewer descriptors than LISTEN_FDS", fds: []string{unixStream}, listenFD: "2",
			wantErr: "systemd: LISTEN_FDS=2 but descriptor 4 ",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var files []*os.File
			var conns []net.Conn
			var paths []string
			for _, kind := range tt.fds {
				f, c, p := inherit(t, kind)
				files = append(files, f)
				if c != nil {
					conns = append(conns, c)
				}
				if p != "" {
					paths = append(paths, p)
				}
			}
			listenFDs := tt.listenFD
			if listenFDs == "" {
				listenFDs = strconv.Itoa(len(tt.fds))
			}

			wait := startHelper(t, os.Args[0], []string{"-test.run=^TestHelperProcess$"}, func(cmd *exec.Cmd) {
				cmd.ExtraFiles = files
				cmd.Env = append(withoutListenEnv(os.Environ()), helperEnv+"=1", fixPIDEnv+"=1", noRaceSleep, "LISTEN_FDS="+listenFDs)
				if tt.fdNames != nil {
					cmd.Env = append(cmd.Env, "LISTEN_FDNAMES="+*tt.fdNames)
				}
			})
			if tt.wantErr == "" {
				for i, c := range conns {
					if got := readKey(t, c); got != tt.wantKeys[i] {
						t.Errorf("connection %d served as %q, want %q", i, got, tt.wantKeys[i])
					}
				}
			}
			res := wait()

			if res.LeftEnv != nil {
				t.Errorf("LISTEN_* left set after Listeners: %v", res.LeftEnv)
			}
			if tt.wantErr != "" {
				if !strings.HasPrefix(res.Err, tt.wantErr) {
					t.Errorf("Listeners() error = %q, want it to start %q", res.Err, tt.wantErr)
				}
				if res.Activated || len(res.Networks) != 0 {
					t.Errorf("Listeners() = %v, %v with an error, want nothing", res.Networks, res.Activated)
				}
				return
			}
			if res.Err != "" || !res.Activated {
				t.Fatalf("Listeners() activated = %v, error = %q; want true, no error", res.Activated, res.Err)
			}
			for _, nets := range res.Networks {
				slices.Sort(nets)
			}
			if diff := cmp.Diff(tt.want, res.Networks); diff != "" {
				t.Errorf("Listeners() keys and networks (-want +got):\n%s", diff)
			}
			for _, p := range paths {
				if _, err := os.Lstat(p); err != nil {
					t.Errorf("socket file after the helper closed its listener: %v, want it left in place", err)
				}
			}
		})
	}
}

// TestListenersUnderSystemdSocketActivate runs the helper under the real
// systemd-socket-activate, which binds the socket, waits for a connection
// and then execs the helper with LISTEN_* set as systemd would.
func TestListenersUnderSystemdSocketActivate(t *testing.T) {
	activate, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		t.Skip("systemd-socket-activate is not in PATH (Debian package systemd); TestListenersTakesInheritedDescriptors covers the protocol without it")
	}
	tests := []struct {
		name   string
		fdName string // --fdname; "" passes none
	}{
		{"named unix", "unix"},
		{"unnamed", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "a.sock")
			args := []string{"-l", sock}
			if tt.fdName != "" {
				args = append(args, "--fdname="+tt.fdName)
			}
			// systemd-socket-activate passes on only PATH, HOME, TERM, LISTEN_*
			// and what -E names.
			args = append(args, "-E", helperEnv+"=1", "-E", noRaceSleep, os.Args[0], "-test.run=^TestHelperProcess$")
			wait := startHelper(t, activate, args, func(*exec.Cmd) {})

			var c net.Conn
			waitFor(t, 30*time.Second, "systemd-socket-activate to listen on "+sock, func() bool {
				var err error
				c, err = net.Dial("unix", sock)
				return err == nil
			})
			defer c.Close()
			if got := readKey(t, c); got != NameUnix {
				t.Errorf("connection served as %q, want %q", got, NameUnix)
			}
			res := wait()
			if res.Err != "" || !res.Activated {
				t.Fatalf("Listeners() activated = %v, error = %q; want true, no error", res.Activated, res.Err)
			}
			if diff := cmp.Diff(map[string][]string{NameUnix: {"unix"}}, res.Networks); diff != "" {
				t.Errorf("Listeners() keys and networks (-want +got):\n%s", diff)
			}
			if res.LeftEnv != nil {
				t.Errorf("LISTEN_* left set after Listeners: %v", res.LeftEnv)
			}
			if _, err := os.Lstat(sock); err != nil {
				t.Errorf("socket file after the helper closed its listener: %v, want it left in place", err)
			}
		})
	}
}

// TestListenersWithoutActivation covers the environments in which Listeners
// takes no descriptor at all, so they can run in the test process.
func TestListenersWithoutActivation(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	tests := []struct {
		name    string
		env     map[string]string // LISTEN_* to set; the others are unset
		wantErr string
	}{
		{name: "no variables"},
		{name: "another process", env: map[string]string{"LISTEN_PID": "1", "LISTEN_FDS": "1"}},
		{name: "no pid", env: map[string]string{"LISTEN_FDS": "1", "LISTEN_FDNAMES": "unix"}},
		{name: "malformed pid", env: map[string]string{"LISTEN_PID": "me", "LISTEN_FDS": "1"}},
		{name: "no fds", env: map[string]string{"LISTEN_PID": self}},
		{name: "zero fds", env: map[string]string{"LISTEN_PID": self, "LISTEN_FDS": "0"}},
		{name: "malformed fds", env: map[string]string{"LISTEN_PID": self, "LISTEN_FDS": "two"}, wantErr: `systemd: invalid LISTEN_FDS "two"`},
		{name: "negative fds", env: map[string]string{"LISTEN_PID": self, "LISTEN_FDS": "-1"}, wantErr: `systemd: invalid LISTEN_FDS "-1"`},
		{
			name:    "names do not match the count",
			env:     map[string]string{"LISTEN_PID": self, "LISTEN_FDS": "1", "LISTEN_FDNAMES": "unix:tcp"},
			wantErr: "systemd: LISTEN_FDNAMES has 2 names for 1 sockets",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
				setOrUnset(t, k, tt.env[k])
			}
			ls, activated, err := Listeners()
			if tt.wantErr == "" && err != nil {
				t.Errorf("Listeners() error = %v, want nil", err)
			}
			if tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr) {
				t.Errorf("Listeners() error = %v, want %q", err, tt.wantErr)
			}
			if ls != nil || activated {
				t.Errorf("Listeners() = %v, %v; want nil, false", ls, activated)
			}
			for _, k := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
				if v, ok := os.LookupEnv(k); ok {
					t.Errorf("%s=%q left set after Listeners", k, v)
				}
			}
		})
	}
}

func withoutListenEnv(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		return strings.HasPrefix(kv, "LISTEN_") || strings.HasPrefix(kv, helperEnv+"=") || strings.HasPrefix(kv, fixPIDEnv+"=")
	})
}

// socketPair returns the two ends of a connected Unix stream socket pair.
func socketPair() (*os.File, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	return os.NewFile(uintptr(fds[0]), "a"), os.NewFile(uintptr(fds[1]), "b"), nil
}

func ptr[T any](v T) *T { return &v }
