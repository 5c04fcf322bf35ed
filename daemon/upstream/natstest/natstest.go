package natstest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/localbus/localbus/bus/bustest"
)

// A Server is one nats-server process that can be killed and started
// again on the same port and store.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int

	mu  sync.Mutex // guards the fields below
	cmd *exec.Cmd
	out *bytes.Buffer
}

// Binary returns the path of nats-server, or "" when it is not installed.
func Binary() string {
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/nats-server", "/usr/bin/nats-server"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// Start starts nats-server -js on a free loopback port with its store in
// a temporary directory, and waits until it accepts connections. It
// skips the test when the binary is missing.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		t.Skip("nats-server is not installed (Debian package nats-server)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &Server{t: t, bin: bin, dir: filepath.Join(t.TempDir(), "js"), port: port}
	s.Restart()
	t.Cleanup(s.Stop)
	return s
}

// URL is the server's client URL.
func (s *Server) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

// Restart starts the server again (after Kill or Stop) on the same port
// and store, and waits until it accepts connections.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	if s.cmd != nil {
		s.mu.Unlock()
		s.t.Fatal("natstest: Restart of a running server")
	}
	cmd := exec.Command(s.bin, "-js", "-sd", s.dir, "-a", "127.0.0.1", "-p", fmt.Sprint(s.port))
	out := new(bytes.Buffer)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		s.t.Fatal(err)
	}
	s.cmd, s.out = cmd, out
	s.mu.Unlock()
	var err error
	last := func() string { return fmt.Sprintf("%v\n%s", err, out) }
	bustest.Eventually(bustest.Showing(s.t, last), 20*time.Second, "nats-server to listen", func() bool {
		var c net.Conn
		if c, err = net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), time.Second); err != nil {
			return false
		}
		c.Close()
		return true
	})
}

// Kill stops the server with SIGKILL and waits for it to exit.
func (s *Server) Kill() { s.signal(syscall.SIGKILL) }

// Stop stops the server with SIGTERM (a clean shutdown) and waits for it
// to exit. It does nothing when the server is not running.
func (s *Server) Stop() { s.signal(syscall.SIGTERM) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// CPU returns the processor time (user and system) the running server has
// used so far, read from /proc; 0 where that is not available.
func (s *Server) CPU() time.Duration {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return 0
	}
	return ProcessCPU(cmd.Process.Pid)
}

// ProcessCPU returns the processor time (user and system) process pid has
// used so far, read from /proc; 0 where that is not available.
func ProcessCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

// PID returns the running server's process id, 0 when it is stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}
