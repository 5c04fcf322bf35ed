package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localbus/localbus/cmd/localbus/bench"
	"github.com/localbus/localbus/cmd/localbus/bench/benchtest"
	"github.com/localbus/localbus/ipc"
)

// benchArgs are a small fan-out against socket.
func benchArgs(socket string, more ...string) []string {
	return append([]string{"bench", "--socket", socket, "--quiet", "--subscribers", "2", "--events", "200", "--batch", "50", "--settle", "2s", "--timeout", "60s"}, more...)
}

func TestBenchReportsAFanout(t *testing.T) {
	srv := benchtest.New(t, benchtest.Faults{}, ipc.Options{})
	for _, tr := range []string{"sse", "ws"} {
		t.Run(tr, func(t *testing.T) {
			r := runCLI(t, benchArgs(srv.Socket, "--transport", tr)...)
			if r.code != exitOK {
				t.Fatalf("bench = %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			for _, want := range []string{"fanout over " + tr + ", 2 subscribers, 200 events of 256 B", "deliveries/s", "check daemon: ok: 400 of 400 deliveries to 2 subscribers, 0 lost, 0 duplicates, 0 out of order"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("stdout does not say %q:\n%s", want, r.stdout)
				}
			}
		})
	}
}

// TestBenchLatencyPublishesOverAPoolUnlessTold: --publishers defaults to
// the scenario's own figure (32 for latency, 1 for publish), which the help
// says, and
// the header says how many connections published.
func TestBenchLatencyPublishesOverAPoolUnlessTold(t *testing.T) {
	if r := runCLI(t, "bench", "--help"); !strings.Contains(r.stdout, "(default: 32 for latency, 1 for publish)") {
		t.Errorf("bench --help does not give --publishers' defaults:\n%s", r.stdout)
	}
	srv := benchtest.New(t, benchtest.Faults{}, ipc.Options{})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--scenario", "latency", "--rate", "200", "--duration", "100ms"}, "open loop over 32 publisher connections"},
		{[]string{"--scenario", "latency", "--rate", "200", "--duration", "100ms", "--publishers", "2"}, "open loop over 2 publisher connections"},
		{[]string{"--scenario", "publish", "--events", "20"}, "over 1 publisher connection,"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := runCLI(t, append([]string{"bench", "--socket", srv.Socket, "--quiet", "--subscribers", "2", "--settle", "2s", "--timeout", "60s"}, tc.args...)...)
			if r.code != exitOK {
				t.Fatalf("bench = %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stdout, tc.want) {
				t.Errorf("stdout does not say %q:\n%s", tc.want, r.stdout)
			}
		})
	}
}

// TestBenchFailsWhenTheServerLosesEvents: a lost, repeated or reordered
// event is reported, and the exit code is 1.
func TestBenchFailsWhenTheServerLosesEvents(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults benchtest.Faults
		says   string
	}{
		{"drop", benchtest.Faults{Drop: 30}, "2 events lost"},
		{"duplicate", benchtest.Faults{Duplicate: 30}, "2 duplicates"},
		{"swap", benchtest.Faults{Swap: 30}, "2 events out of order"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := benchtest.New(t, tc.faults, ipc.Options{})
			r := runCLI(t, benchArgs(srv.Socket)...)
			if r.code != exitUsage {
				t.Errorf("bench = %d, want %d", r.code, exitUsage)
			}
			if !strings.Contains(r.stdout, "check daemon: FAILED: "+tc.says) {
				t.Errorf("stdout does not report %q:\n%s", tc.says, r.stdout)
			}
			if !strings.Contains(r.stderr, tc.says) {
				t.Errorf("stderr does not say %q:\n%s", tc.says, r.stderr)
			}
		})
	}
}

func TestBenchJSON(t *testing.T) {
	srv := benchtest.New(t, benchtest.Faults{Drop: 5}, ipc.Options{})
	file := filepath.Join(t.TempDir(), "report.json")
	r := runCLI(t, benchArgs(srv.Socket, "--json", "--json-out", file)...)
	var rep bench.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("--json output is not a report: %v\n%s", err, r.stdout)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != r.stdout {
		t.Errorf("--json-out file = %q (%v), want what --json printed", b, err)
	}
	if rep.Scenario != "fanout" || rep.Daemon == nil || rep.Daemon.Check.Lost != 2 || rep.Daemon.Check.Received != 398 {
		t.Errorf("report = %+v, daemon %+v; want fanout with 2 lost of 400", rep, rep.Daemon)
	}
	if r.code != exitUsage {
		t.Errorf("bench --json with losses = %d, want %d", r.code, exitUsage)
	}
}

func TestBenchUsageAndReachErrors(t *testing.T) {
	none := filepath.Join(t.TempDir(), "none.sock")
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"unknown scenario", []string{"bench", "--socket", none, "--scenario", "nope"}, exitUsage, "unknown scenario"},
		{"unknown transport", []string{"bench", "--socket", none, "--transport", "smoke"}, exitUsage, "unknown transport"},
		{"baseline of idle", []string{"bench", "--socket", none, "--scenario", "idle", "--baseline"}, exitUsage, "--baseline applies to fanout and latency"},
		{"consumers of publish", []string{"bench", "--socket", none, "--scenario", "publish", "--consumers"}, exitUsage, "--consumers applies to the fanout scenario"},
		{"ack over sse", []string{"bench", "--socket", none, "--scenario", "ack", "--transport", "sse"}, exitUsage, "acknowledges on the WebSocket"},
		{"an argument", []string{"bench", "--socket", none, "extra"}, exitUsage, "too many arguments"},
		{"no daemon", []string{"bench", "--socket", none}, exitUnreachable, "cannot reach the daemon"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, tc.args...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.says) {
				t.Errorf("%v = %d, stderr:\n%s\nwant %d saying %q", tc.args, r.code, r.stderr, tc.code, tc.says)
			}
		})
	}
}

// TestBenchBaselineRunsAsAProcessOfItsOwn: --baseline-only runs the
// baseline server as this executable again, in the built binary and in
// this test binary alike, and reports its processor time; the help lists
// no such command.
func TestBenchBaselineRunsAsAProcessOfItsOwn(t *testing.T) {
	args := []string{"bench", "--baseline-only", "--quiet", "--json", "--subscribers", "4", "--events", "50000", "--settle", "2s", "--timeout", "60s"}
	for _, tc := range []struct {
		name string
		run  func() (int, string, string)
	}{
		{"built binary", func() (int, string, string) { r := runBin(t, "", args...); return r.code, r.stdout, r.stderr }},
		{"in process", func() (int, string, string) { r := runCLI(t, args...); return r.code, r.stdout, r.stderr }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := tc.run()
			if code != exitOK {
				t.Fatalf("bench = %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			var rep bench.Report
			if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
				t.Fatalf("--json output is not a report: %v\n%s", err, stdout)
			}
			b := rep.Baseline
			if b == nil || b.CPU == nil || b.CPU.PID <= 0 || b.CPU.PID == os.Getpid() || b.CPU.Server <= 0 || b.CPU.ServerNsPerDelivery <= 0 {
				t.Fatalf("baseline %+v, want the CPU figures of a process of its own", b)
			}
			if b.Check.Received != 200000 || !rep.OK() {
				t.Errorf("baseline check %+v, want 200000 deliveries ok", b.Check)
			}
		})
	}
	if r := runCLI(t, "help"); r.code != exitOK || strings.Contains(strings.ToLower(r.stdout), "baseline server") {
		t.Errorf("localbus help = %d, shows the baseline server:\n%s", r.code, r.stdout)
	}
}
