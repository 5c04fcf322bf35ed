package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// baselineStart bounds how long the baseline server may take to start, and
// baselineStop how long it may take to exit once told to.
const (
	baselineStart = 10 * time.Second
	baselineStop  = 5 * time.Second
)

// baseline is the machine's limit for a fan-out: a bare server (see
// baseServer) in a process of its own, so that its processor time is
// measured from /proc as the daemon's is, apart from the clients'. The
// bench runs its own executable again as that process (see
// ServeBaselineIfAsked) and publishes through a pair of pipes, one small
// binary request and reply per publish: no HTTP.
type baseline struct {
	dir     string
	ep      endpoint
	session string

	cmd    *exec.Cmd
	stderr bytes.Buffer  // the server's, read once it has exited
	exited chan struct{} // closed when the server has exited and been reaped

	mu    sync.Mutex // one request at a time over the pipes
	ctl   *os.File   // the server's standard input
	reply *os.File   // the server's standard output
	req   [baseReqSize]byte
	out   [8]byte
}

// newBaseline starts the baseline server and waits until it listens. The
// server is killed when ctx ends; close stops it and waits for it.
func newBaseline(ctx context.Context) (*baseline, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("bench: baseline: %w", err)
	}
	dir, err := os.MkdirTemp("", "localbus-bench-")
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "baseline.sock")
	b := &baseline{dir: dir, session: "baseline", ep: endpoint{network: "unix", addr: sock, host: "localbus"}, exited: make(chan struct{})}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	b.cmd = exec.CommandContext(ctx, exe)
	b.cmd.Env = append(os.Environ(), baselineEnv+"="+sock)
	b.cmd.Stdin, b.cmd.Stdout, b.cmd.Stderr = ctlR, repW, &b.stderr
	err = b.cmd.Start()
	ctlR.Close()
	repW.Close()
	b.ctl, b.reply = ctlW, repR
	if err != nil {
		b.ctl.Close()
		b.reply.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("bench: starting the baseline server: %w", err)
	}
	go func() {
		b.cmd.Wait()
		close(b.exited)
	}()
	// A program that does not call ServeBaselineIfAsked never says it is
	// ready: it is killed after baselineStart.
	kill := time.AfterFunc(baselineStart, func() { b.cmd.Process.Kill() })
	var ready [len(baseReady)]byte
	_, err = io.ReadFull(b.reply, ready[:])
	kill.Stop()
	if err != nil || string(ready[:]) != baseReady {
		b.close(ctx)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		msg := strings.TrimSpace(b.stderr.String())
		if msg == "" {
			msg = "it did not start within " + baselineStart.String() + "; does the program call bench.ServeBaselineIfAsked first?"
		}
		return nil, fmt.Errorf("bench: starting the baseline server: %s", msg)
	}
	return b, nil
}

func (b *baseline) name() string { return "baseline" }
func (b *baseline) pid() int     { return b.cmd.Process.Pid }
func (b *baseline) limits() limits {
	return limits{RingSize: 0, MaxQueuedBytes: 1 << 30, MaxSubscribers: 1 << 20, MaxBatch: 1000}
}

func (b *baseline) newSession(context.Context, int) (string, error) {
	return "/api/v1/sessions/" + b.session, nil
}

func (b *baseline) open(ctx context.Context, o streamOptions) (stream, error) {
	return openStream(ctx, b.ep, o)
}

// close stops the server: the end of its standard input tells it to exit,
// and it is killed if it has not within baselineStop. It returns once the
// server has been reaped.
func (b *baseline) close(context.Context) {
	b.ctl.Close()
	t := time.NewTimer(baselineStop)
	select {
	case <-b.exited:
	case <-t.C:
		b.cmd.Process.Kill()
		<-b.exited
	}
	t.Stop()
	b.reply.Close()
	os.RemoveAll(b.dir)
}

// publish asks the server to publish n events of size bytes and returns
// the last id.
func (b *baseline) publish(ctx context.Context, n, size int, due int64) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	binary.LittleEndian.PutUint32(b.req[0:], uint32(n))
	binary.LittleEndian.PutUint32(b.req[4:], uint32(size))
	binary.LittleEndian.PutUint64(b.req[8:], uint64(due))
	_, err := b.ctl.Write(b.req[:])
	if err == nil {
		_, err = io.ReadFull(b.reply, b.out[:])
	}
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = errors.New("it exited")
		}
		return 0, fmt.Errorf("bench: the baseline server: %w", err)
	}
	return binary.LittleEndian.Uint64(b.out[:]), nil
}

// basePublisher publishes through the baseline server. Like the daemon's
// publishers, several may publish at once; the server keeps their events
// in id order.
type basePublisher struct {
	b    *baseline
	size int
}

func (b *baseline) publisher(_ context.Context, _ string, size int) (publisher, error) {
	return &basePublisher{b: b, size: size}, nil
}

func (p *basePublisher) Close() error { return nil }

func (p *basePublisher) batch(ctx context.Context, n int) (uint64, error) {
	return p.b.publish(ctx, n, p.size, 0)
}

func (p *basePublisher) one(ctx context.Context, due int64) (uint64, error) {
	return p.b.publish(ctx, 1, p.size, due)
}
