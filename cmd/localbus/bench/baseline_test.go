package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/localbus/localbus/cmd/localbus/bench/benchtest"
	"github.com/localbus/localbus/ipc"
)

// children lists the processes whose parent is this one, zombies included:
// a child that exited but was not reaped is still listed.
func children(t *testing.T) []int {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// After the command's closing parenthesis: state, then ppid.
		f := bytes.Fields(b[bytes.LastIndexByte(b, ')')+1:])
		if len(f) > 1 && string(f[1]) == strconv.Itoa(os.Getpid()) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func noChildren(t *testing.T) {
	t.Helper()
	if pids := children(t); len(pids) > 0 {
		t.Errorf("processes left behind by the run: %v", pids)
	}
}

// TestBaselineRunsInAProcessOfItsOwnAndReportsItsCPU: the baseline server
// is a child process whose processor time the report gives, as the
// daemon's, and which is reaped when the run ends.
func TestBaselineRunsInAProcessOfItsOwnAndReportsItsCPU(t *testing.T) {
	for _, tr := range []string{TransportSSE, TransportWS} {
		t.Run(tr, func(t *testing.T) {
			noChildren(t)
			rep, err := Run(testCtx(t), Config{
				Scenario: ScenarioFanout, Transport: tr, Subscribers: 4, Events: 50000,
				BaselineOnly: true, Settle: 2 * time.Second, Timeout: wait,
			})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Daemon != nil || rep.Server != "" {
				t.Errorf("a baseline-only run reports a daemon: %+v", rep.Daemon)
			}
			res := rep.Baseline
			if res == nil || !res.Check.OK() || res.Check.Received != 200000 {
				t.Fatalf("baseline result %+v, want 200000 deliveries checked ok", res)
			}
			c := res.CPU
			if c == nil || c.PID <= 0 || c.PID == os.Getpid() {
				t.Fatalf("baseline CPU %+v, want the figures of another process", c)
			}
			if c.Server <= 0 || c.ServerNsPerDelivery <= 0 {
				t.Errorf("baseline server CPU %v s, %v ns/delivery; want figures after writing 200000 deliveries", c.Server, c.ServerNsPerDelivery)
			}
			if got := c.Server * 1e9 / 200000; got != c.ServerNsPerDelivery {
				t.Errorf("ns/delivery %v, want the CPU over the deliveries, %v", c.ServerNsPerDelivery, got)
			}
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", c.PID)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the baseline server %d is still there after the run (%v)", c.PID, err)
			}
			noChildren(t)
			var b strings.Builder
			if err := rep.WriteTable(&b); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"server CPU s", "server CPU ns/delivery", "check baseline: ok"} {
				if !strings.Contains(b.String(), want) {
					t.Errorf("table does not say %q:\n%s", want, b.String())
				}
			}
		})
	}
}

// TestBaselineKeepsEveryScenarioAndRound: latency over both transports and
// several rounds, against a daemon, each round's baseline measured in its
// server's process, and no process left after.
func TestBaselineKeepsEveryScenarioAndRound(t *testing.T) {
	srv := benchtest.New(t, benchtest.Faults{}, ipc.Options{})
	for _, tr := range []string{TransportSSE, TransportWS} {
		t.Run(tr, func(t *testing.T) {
			rep, err := Run(testCtx(t), small(srv.Socket, Config{
				Scenario: ScenarioLatency, Transport: tr, Subscribers: 3, Rate: 200, Duration: 200 * time.Millisecond,
				Baseline: true, Rounds: 2,
			}))
			if err != nil {
				t.Fatal(err)
			}
			if !rep.OK() || len(rep.BaselineRounds) != 2 || len(rep.DaemonRounds) != 2 {
				t.Fatalf("OK %v (%s), %d baseline rounds, %d daemon rounds; want ok, 2 and 2", rep.OK(), rep.Problem(), len(rep.BaselineRounds), len(rep.DaemonRounds))
			}
			pid := rep.BaselineRounds[0].CPU.PID
			for _, r := range rep.BaselineRounds {
				if r.CPU == nil || r.CPU.PID != pid || pid == os.Getpid() || pid <= 0 {
					t.Errorf("baseline round CPU %+v, want the one server process of the run, not this one", r.CPU)
				}
				if r.Check.Received != 120 {
					t.Errorf("baseline round: %d deliveries, want 120", r.Check.Received)
				}
			}
			noChildren(t)
		})
	}
}

// cancelOn cancels when a progress line holds want, and notes the child
// processes at that moment.
type cancelOn struct {
	t      *testing.T
	want   string
	cancel context.CancelFunc

	mu   sync.Mutex
	seen []int
}

func (w *cancelOn) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.want) {
		w.mu.Lock()
		w.seen = children(w.t)
		w.mu.Unlock()
		w.cancel()
	}
	return len(p), nil
}

func TestBaselineServerIsStoppedWhenTheRunIsCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	w := &cancelOn{t: t, want: "baseline: publishing", cancel: cancel}
	_, err := Run(ctx, Config{
		Scenario: ScenarioLatency, Subscribers: 2, Rate: 100, Duration: time.Minute,
		BaselineOnly: true, Settle: 2 * time.Second, Timeout: wait, Progress: w,
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want it cancelled", err)
	}
	w.mu.Lock()
	seen := w.seen
	w.mu.Unlock()
	if len(seen) != 1 {
		t.Errorf("while publishing the run had %d child processes (%v), want its baseline server", len(seen), seen)
	}
	noChildren(t)
}

func TestBaselineServerIsStoppedWhenTheDaemonRoundFails(t *testing.T) {
	// The test server allows 1000 subscribers on a session.
	srv := benchtest.New(t, benchtest.Faults{}, ipc.Options{})
	_, err := Run(testCtx(t), small(srv.Socket, Config{Scenario: ScenarioFanout, Subscribers: 1001, Events: 10, Baseline: true}))
	if err == nil || !strings.Contains(err.Error(), "1001 subscribers on one session") {
		t.Errorf("Run = %v, want the daemon's subscriber limit refused", err)
	}
	noChildren(t)
}

// TestBaselineThatCannotStartIsReapedAndSaysWhy: a server that cannot
// listen (its socket's path is too long) exits; the run says why and
// leaves no process.
func TestBaselineThatCannotStartIsReapedAndSaysWhy(t *testing.T) {
	long := filepath.Join(t.TempDir(), strings.Repeat("d", 120))
	if err := os.Mkdir(long, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", long)
	_, err := Run(testCtx(t), Config{Scenario: ScenarioFanout, Subscribers: 1, Events: 10, BaselineOnly: true, Timeout: wait})
	if err == nil || !strings.Contains(err.Error(), "starting the baseline server") || !strings.Contains(err.Error(), "bench baseline:") {
		t.Errorf("Run = %v, want the server's own error", err)
	}
	noChildren(t)
	if left, _ := os.ReadDir(long); len(left) > 0 {
		t.Errorf("the run left %d entries in its temporary directory", len(left))
	}
}

func TestReportGivesTheServersCPUSideBySide(t *testing.T) {
	r := &Report{
		Scenario: ScenarioLatency,
		Daemon:   &Result{Target: "daemon", CPU: &CPU{PID: 10, Server: 3.2, ServerNsPerDelivery: 10000, Bench: 2}},
		Baseline: &Result{Target: "baseline", CPU: &CPU{PID: 11, Server: 1.6, ServerNsPerDelivery: 5000, Bench: 2}},
	}
	r.ratios()
	if got := r.Ratios["serverNsPerDelivery"]; got != 2 {
		t.Errorf("ratio serverNsPerDelivery = %v, want 2", got)
	}
	var b strings.Builder
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(b.String(), "\n") {
		lines[strings.Join(strings.Fields(l), " ")] = true
	}
	for _, want := range []string{"server CPU s 3.20 1.60 2.00", "server CPU ns/delivery 10000 5000 2.00", "bench CPU s 2.00 2.00"} {
		if !lines[want] {
			t.Errorf("table has no row %q:\n%s", want, b.String())
		}
	}
}

// TestBaselineServerSourceIsPinned: the baseline server is the yardstick
// of the fan-out and latency targets (performance.md gives the daemon's
// figures as ratios to it), so a change to it would move every ratio
// without the daemon changing. Change it on purpose only: measure again,
// update performance.md's figures, then this digest.
func TestBaselineServerSourceIsPinned(t *testing.T) {
	const want = "570174bd246f4ba66bbd6afa5e808a2ef10a7a22cf56ce6fec67adc9bfaad57a"
	b, err := os.ReadFile("baseserver.go")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%x", sha256.Sum256(b)); got != want {
		t.Errorf("baseserver.go's SHA-256 is %s, want %s: the baseline changed, and every ratio to it with it", got, want)
	}
}
