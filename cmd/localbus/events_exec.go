package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
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
	exited, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		stopGroup(ctx, cmd.Process.Pid, exited)
	}()
	cmd.Wait()
	close(exited)
	<-stopped
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

// stopGroup sends the process group pgid SIGTERM once ctx is done, and
// SIGKILL execGrace later, until exited is closed (the group's leader,
// CMD's shell, was waited for: its id may be reused from then on).
func stopGroup(ctx context.Context, pgid int, exited <-chan struct{}) {
	select {
	case <-exited:
		return
	case <-ctx.Done():
	}
	select {
	case <-exited:
		return // both were ready: the group may be gone
	default:
	}
	syscall.Kill(-pgid, syscall.SIGTERM)
	t := time.NewTimer(execGrace)
	defer t.Stop()
	select {
	case <-exited:
	case <-t.C:
		syscall.Kill(-pgid, syscall.SIGKILL)
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
