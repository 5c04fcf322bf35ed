package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/localbus/localbus/ipc/client"
)

// localbus events --exec CMD (SPEC §9): CMD runs once per event, in
// order, and again for the same event until it exits 0; only then is the
// event handled (and, for an explicit consumer, acknowledged). A CMD that
// fails forever holds the stream there: at least once and in order rule
// out skipping it, and the retries say so on stderr.

// Retries of a failed CMD: the first after execRetryMin, doubling up to
// execRetryMax.
const (
	execRetryMin = 500 * time.Millisecond
	execRetryMax = 30 * time.Second
)

// execGrace is how long a CMD may take to exit after SIGTERM, once the
// command is stopped, before it gets SIGKILL.
const execGrace = 10 * time.Second

// run hands the event to --exec's CMD until CMD exits 0, and returns nil
// then. It returns ctx's error once ctx is done and CMD has not succeeded,
// and an exitError when CMD cannot be started at all.
func (f *follower) run(ctx context.Context, fr client.Frame) error {
	wait := execRetryMin
	for attempt := 1; ; attempt++ {
		ok, why, err := f.runOnce(ctx, fr, attempt)
		switch {
		case err != nil:
			return err
		case ok:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		}
		fmt.Fprintf(f.errw, "localbus: --exec %s for event %d; running it again in %v (attempt %d)\n", why, fr.ID, wait, attempt+1)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		wait = min(2*wait, execRetryMax)
	}
}

// runOnce runs CMD once for the event and reports whether it exited 0,
// and if not, why, in words. err is set when CMD cannot be started.
func (f *follower) runOnce(ctx context.Context, fr client.Frame, attempt int) (ok bool, why string, err error) {
	cmd := exec.Command("/bin/sh", "-c", f.exec)
	// Its own process group, so that stopping it reaches what the shell
	// started too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Output a process CMD left running keeps open delays Wait at most
	// this long.
	cmd.WaitDelay = execGrace
	cmd.Stdin = bytes.NewReader(append(fr.Raw[:len(fr.Raw):len(fr.Raw)], '\n'))
	cmd.Stdout, cmd.Stderr = f.out, f.errw
	cmd.Env = append(os.Environ(),
		"LOCALBUS_SESSION="+f.session,
		"LOCALBUS_CONSUMER="+f.consumer,
		"LOCALBUS_EVENT_ID="+strconv.FormatUint(fr.ID, 10),
		"LOCALBUS_EVENT_TYPE="+fr.Type,
		"LOCALBUS_ATTEMPT="+strconv.Itoa(attempt),
	)
	if err := cmd.Start(); err != nil {
		return false, "", exitError{exitUsage, fmt.Errorf("--exec: cannot run /bin/sh: %v", err)}
	}
	// The shell's exit is seen without reaping it: until cmd.Wait, its
	// id stays the group's, so stopGroup may still signal the group.
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		waitExitedUnreaped(cmd.Process.Pid)
	}()
	stopGroup(ctx, cmd.Process.Pid, exited)
	cmd.Wait()
	st := cmd.ProcessState
	if st.Success() {
		return true, "", nil
	}
	if ws, isWait := st.Sys().(syscall.WaitStatus); isWait && ws.Signaled() {
		return false, fmt.Sprintf("was killed by %s", unix.SignalName(ws.Signal())), nil
	}
	code := st.ExitCode()
	switch code {
	case 126:
		return false, "exited 126 (the shell could not run the command)", nil
	case 127:
		return false, "exited 127 (the shell found no such command)", nil
	}
	if code > 128 && code < 128+65 {
		// A shell reports a command a signal killed as 128+N.
		return false, fmt.Sprintf("exited %d (a process it ran was killed by %s)", code, unix.SignalName(syscall.Signal(code-128))), nil
	}
	return false, fmt.Sprintf("exited %d", code), nil
}

// stopGroup returns once exited is closed: CMD's shell, the group's
// leader, has exited and is not reaped yet, so pgid is still this group's.
// If ctx is done first, it sends the group SIGTERM, and SIGKILL execGrace
// later to whatever of the group is left by then: CMD's shell may exit
// first, and what it started (a process forked after the SIGTERM, or one
// that ignores it) must not outlive the stop.
func stopGroup(ctx context.Context, pgid int, exited <-chan struct{}) {
	select {
	case <-exited:
		return
	case <-ctx.Done():
	}
	syscall.Kill(-pgid, syscall.SIGTERM)
	grace := time.NewTimer(execGrace)
	defer grace.Stop()
	select {
	case <-exited:
	case <-grace.C:
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-exited
		return
	}
	// The shell has exited; what it started has the rest of the grace.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for groupHasOthers(pgid) {
		select {
		case <-tick.C:
		case <-grace.C:
			syscall.Kill(-pgid, syscall.SIGKILL)
			return
		}
	}
}

// groupHasOthers reports whether a process other than the group's leader
// may still be in the process group pgid, from /proc (false when /proc
// cannot be read). It answers true for a member that has exited but is not
// reaped, and for a process that went away while /proc was read: either may
// have forked, after the listing, a child the listing does not show.
func groupHasOthers(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	group := strconv.Itoa(pgid)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pgid {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			return true
		}
		// "pid (comm) state ppid pgrp …": comm may hold spaces and ")".
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		if f := strings.Fields(string(stat[i+1:])); len(f) >= 3 && f[2] == group {
			return true
		}
	}
	return false
}

// waitExitedUnreaped returns once the child pid has exited, leaving it to
// be reaped (by cmd.Wait).
func waitExitedUnreaped(pid int) {
	var info unix.Siginfo
	for unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil) == unix.EINTR {
	}
}

// A syncWriter serializes the writes of the command's goroutines (the
// follower, the acker, --exec's output) to one writer.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// shareWriter returns w made safe for several goroutines: w itself when
// it is a file (each write is one system call, and a child process then
// writes to it directly).
func shareWriter(w io.Writer) io.Writer {
	if f, ok := w.(*os.File); ok {
		return f
	}
	return &syncWriter{w: w}
}
