package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/daemon/daemontest"
	"github.com/localbus/localbus/ipc/client"
)

// consumerOf returns the consumer name of session as the daemon lists it.
func consumerOf(t *testing.T, c *client.Client, session, name string) (client.Consumer, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	list, err := c.Consumers(ctx, session)
	if err != nil {
		t.Fatalf("consumers of %s: %v", session, err)
	}
	for _, cs := range list {
		if cs.Name == name {
			return cs, true
		}
	}
	return client.Consumer{}, false
}

// rawNumbers returns the data of the --raw lines of out, which must be
// numbers.
func rawNumbers(t *testing.T, out string) []int {
	t.Helper()
	var got []int
	for l := range strings.Lines(out) {
		var env bus.Envelope
		if err := json.Unmarshal([]byte(l), &env); err != nil {
			t.Fatalf("stdout line %q is not an envelope: %v", l, err)
		}
		n, err := strconv.Atoi(string(env.Data))
		if err != nil {
			t.Fatalf("event %d has data %s, want a number", env.ID, env.Data)
		}
		got = append(got, n)
	}
	return got
}

func TestEventsConsumerExplicitAcksSurviveRestartsOfTheDaemon(t *testing.T) {
	t.Parallel()
	for _, tr := range []string{"sse", "ws"} {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			opts := daemontest.Options{Dir: t.TempDir(), Durable: true}
			d := daemontest.Start(t, opts)
			c := apiClient(t, d)
			publishData(t, c, "s", "t:n", 1, 5)
			events := func(count int, more ...string) binResult {
				t.Helper()
				args := append([]string{"events", "--socket", d.Socket, "--session", "s", "--consumer", "backup", "--raw", "--transport", tr, "--count", strconv.Itoa(count)}, more...)
				r := runBin(t, "", args...)
				if r.code != exitOK {
					t.Fatalf("localbus %s: exit %d, stderr %q", strings.Join(args, " "), r.code, r.stderr)
				}
				return r
			}

			r := events(3, "--ack", "explicit")
			checkSequence(t, rawNumbers(t, r.stdout), 1, 3)
			oneLine(t, "events", r.stderr, `created consumer "backup" of session "s" (explicit acks); starting from the first event the daemon holds`)
			if cs, _ := consumerOf(t, c, "s", "backup"); cs.AckedID != 3 || cs.Ack != "explicit" {
				t.Errorf("after printing 3 events: consumer %+v, want explicit, acknowledged through 3", cs)
			}

			// A clean restart, then a crash: an answered ack is kept.
			d.Stop(t)
			d = daemontest.Start(t, opts)
			publishData(t, c, "s", "t:n", 6, 7)
			r = events(4) // the consumer's own mode: explicit
			checkSequence(t, rawNumbers(t, r.stdout), 4, 7)
			oneLine(t, "events", r.stderr, `following consumer "backup" of session "s" (explicit acks); resuming after event 3`)

			d.Kill(t)
			d = daemontest.Start(t, opts)
			publishData(t, c, "s", "t:n", 8, 8)
			r = events(1)
			checkSequence(t, rawNumbers(t, r.stdout), 8, 8)
			if cs, _ := consumerOf(t, c, "s", "backup"); cs.AckedID != 8 || cs.Pending != 0 {
				t.Errorf("after printing every event: consumer %+v, want acknowledged through 8, none pending", cs)
			}
		})
	}
}

func TestEventsConsumerAutoFollowsAcrossAReloadAndResumesAfterAStop(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{})
	c := apiClient(t, d)
	publishData(t, c, "s", "t:n", 1, 3)
	p := startBin(t, "events", "--socket", d.Socket, "--session", "s", "--consumer", "watch", "--raw")
	got := numbers(t, p, 3)
	p.waitStderr(t, `created consumer "watch" of session "s" (auto acks)`)
	d.Signal(t, syscall.SIGHUP)
	p.waitStderr(t, "reloading")
	publishData(t, c, "s", "t:n", 4, 6)
	got = append(got, numbers(t, p, 3)...)
	checkSequence(t, got, 1, 6)

	// The daemon moved the position as it wrote; it stores it at the
	// stream's end.
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.exitCode(t); code != exitOK {
		t.Fatalf("events exit %d on SIGTERM, want 0", code)
	}
	bustest.Eventually(t, e2eWait, "the consumer to be stored through 6", func() bool {
		cs, _ := consumerOf(t, c, "s", "watch")
		return cs.AckedID == 6 && !cs.Connected
	})
	publishData(t, c, "s", "t:n", 7, 9)
	r := runBin(t, "", "events", "--socket", d.Socket, "--session", "s", "--consumer", "watch", "--raw", "--count", "3", "--transport", "ws")
	if r.code != exitOK {
		t.Fatalf("events: exit %d, stderr %q", r.code, r.stderr)
	}
	checkSequence(t, rawNumbers(t, r.stdout), 7, 9)
	oneLine(t, "events", r.stderr, `following consumer "watch" of session "s" (auto acks); resuming after event 6`)
}

func TestEventsConsumerTakenOverExitsFour(t *testing.T) {
	t.Parallel()
	for _, tr := range []string{"sse", "ws"} {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			d := daemontest.Start(t, daemontest.Options{})
			c := apiClient(t, d)
			publishData(t, c, "s", "t:n", 1, 2)
			first := startBin(t, "events", "--socket", d.Socket, "--session", "s", "--consumer", "one", "--ack", "explicit", "--raw", "--transport", tr)
			checkSequence(t, numbers(t, first, 2), 1, 2)
			bustest.Eventually(t, e2eWait, "the first command's acks", func() bool {
				cs, _ := consumerOf(t, c, "s", "one")
				return cs.AckedID == 2
			})

			second := startBin(t, "events", "--socket", d.Socket, "--session", "s", "--consumer", "one", "--raw", "--transport", tr)
			if code := first.exitCode(t); code != exitEnded {
				t.Fatalf("the first command exit %d once taken over, want %d", code, exitEnded)
			}
			want := `another stream took consumer "one" of session "s" over, or it was deleted; this one has stopped`
			if !strings.Contains(first.Stderr(), want) || strings.Contains(first.Stderr(), "reconnecting") {
				t.Errorf("the first command's stderr:\n%s\nwant %q and no reconnection", first.Stderr(), want)
			}
			// The second one reads on, after what the first acknowledged.
			publishData(t, c, "s", "t:n", 3, 3)
			checkSequence(t, numbers(t, second, 1), 3, 3)
			second.waitStderr(t, `resuming after event 2`)
		})
	}
}

func TestEventsConsumerRefusalsAreInTheUsersWords(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--max-consumers", "2"}})
	c := apiClient(t, d)
	publishData(t, c, "s", "t:n", 1, 3)
	run := func(args ...string) binResult {
		t.Helper()
		return runBin(t, "", append([]string{"events", "--socket", d.Socket}, args...)...)
	}
	if r := run("--session", "s", "--consumer", "exp", "--ack", "explicit", "--count", "1"); r.code != exitOK {
		t.Fatalf("creating consumer exp: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := run("--session", "s", "--consumer", "aut", "--count", "1"); r.code != exitOK {
		t.Fatalf("creating consumer aut: exit %d, stderr %q", r.code, r.stderr)
	}
	long := strings.Repeat("a", 65)
	tests := []struct {
		name string
		args []string
		says string
	}{
		{"on a family", []string{"--family", "t", "--consumer", "x"}, "--consumer follows a session: give --session ID (family and global streams have no consumers)"},
		{"on the global bus", []string{"--consumer", "x"}, "--consumer follows a session"},
		{"name ..", []string{"--session", "s", "--consumer", ".."}, `--consumer "..": a consumer's name is a letter or digit, then up to 63 letters`},
		{"name of 65", []string{"--session", "s", "--consumer", long}, "a consumer's name is a letter or digit"},
		{"empty name", []string{"--session", "s", "--consumer", ""}, "--consumer needs a name"},
		{"ack alone", []string{"--session", "s", "--ack", "explicit"}, "--ack is a consumer's ack mode: give --consumer NAME too"},
		{"bad ack", []string{"--session", "s", "--consumer", "x", "--ack", "sometimes"}, `--ack must be auto or explicit, not "sometimes"`},
		{"exec and auto", []string{"--session", "s", "--consumer", "x", "--ack", "auto", "--exec", "cat"}, "--exec acknowledges each event once CMD exits 0: its consumer is explicit"},
		{"exec and raw", []string{"--session", "s", "--exec", "cat", "--raw"}, "give --exec or --raw/--format, not both"},
		{"empty exec", []string{"--session", "s", "--exec", " "}, "--exec needs a command"},
		{"tail", []string{"--session", "s", "--consumer", "x", "-n", "2"}, "give --tail or --consumer, not both"},
		{"since above the last id", []string{"--session", "s", "--consumer", "x", "--since", "1764643500"}, `--since 1764643500 is an event id, and session "s"'s last event id is 3`},
		{"since on an existing one", []string{"--session", "s", "--consumer", "exp", "--since", "0"}, `consumer "exp" of session "s" exists: it resumes after event 1, and --since places only a new consumer`},
		{"the other ack mode", []string{"--session", "s", "--consumer", "exp", "--ack", "auto"}, `consumer "exp" of session "s" has ack mode explicit, fixed when it was created; leave --ack out to use it`},
		{"exec on an auto one", []string{"--session", "s", "--consumer", "aut", "--exec", "cat"}, `consumer "aut" of session "s" has ack mode auto, and --exec needs an explicit consumer`},
		{"limit", []string{"--session", "s", "--consumer", "third"}, "(429 consumer_limit)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(tt.args...)
			if r.code != exitUsage || r.stdout != "" {
				t.Errorf("events %s: exit %d, stdout %q; want %d and nothing", strings.Join(tt.args, " "), r.code, r.stdout, exitUsage)
			}
			if !strings.Contains(r.stderr, tt.says) {
				t.Errorf("events %s: stderr %q, want it to say %q", strings.Join(tt.args, " "), r.stderr, tt.says)
			}
		})
	}
	// Nothing refused moved or made a consumer, and the bus serves on.
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	list, err := c.Consumers(ctx, "s")
	if err != nil || len(list) != 2 || list[0].Name != "aut" || list[1].Name != "exp" || list[1].AckedID != 1 {
		t.Errorf("consumers after the refusals: %+v, %v; want aut and exp (acknowledged through 1) only", list, err)
	}
	if r := run("--session", "s", "--since", "0", "--count", "3", "--raw"); r.code != exitOK {
		t.Errorf("a plain stream after the refusals: exit %d, stderr %q", r.code, r.stderr)
	}
}

// execHandler writes a handler script into dir for --exec. It appends
// "ID run ATTEMPT" to dir/log when it starts on an event and "ID ok" when
// it is done with it; the first time it meets event 3 it exits 1, event 5
// it kills itself, events 7 and 9 it writes its pid to dir/pidN and
// sleeps until killed.
func execHandler(t *testing.T, dir string) string {
	t.Helper()
	script := fmt.Sprintf(`#!/bin/sh
dir=%q
id=$LOCALBUS_EVENT_ID
envelope=$(cat)
case "$envelope" in
*"\"id\":$id,"*) ;;
*) echo "stdin $envelope is not event $id" >>"$dir/log"; exit 0 ;;
esac
echo "$id run $LOCALBUS_ATTEMPT" >>"$dir/log"
first() { [ ! -e "$dir/seen$1" ] && : >"$dir/seen$1"; }
case $id in
3) first 3 && exit 1 ;;
5) first 5 && kill -KILL $$ ;;
7|9) first $id && { echo $$ >"$dir/pid$id.tmp"; mv "$dir/pid$id.tmp" "$dir/pid$id"; exec sleep 300; } ;;
esac
echo "$id ok" >>"$dir/log"
`, dir)
	path := filepath.Join(dir, "handler")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// killPID kills the process whose pid the handler wrote to file, once it
// is there.
func killPID(t *testing.T, file string) {
	t.Helper()
	var b []byte
	bustest.Eventually(t, e2eWait, "the handler to write "+file, func() bool {
		var err error
		b, err = os.ReadFile(file)
		return err == nil
	})
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %q", file, b)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %d: %v", pid, err)
	}
}

// handlerLog reads the handler's log: the events it started on, in
// order, and the events it was done with, in order.
func handlerLog(t *testing.T, dir string) (runs, oks []int, text string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		var id int
		var what string
		if _, err := fmt.Sscanf(l, "%d %s", &id, &what); err != nil {
			t.Fatalf("handler log line %q", l)
		}
		switch what {
		case "run":
			runs = append(runs, id)
		case "ok":
			oks = append(oks, id)
		}
	}
	return runs, oks, string(b)
}

func TestEventsExecHandlesEveryEventAtLeastOnceInOrder(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{})
	c := apiClient(t, d)
	dir := t.TempDir()
	handler := execHandler(t, dir)
	publishData(t, c, "s", "t:n", 1, 8)

	// Event 3's handler exits 1, event 5's is killed by a signal, event
	// 7's is killed by someone else mid-run: each runs again, and the
	// next event waits for it.
	p := startBin(t, "events", "--socket", d.Socket, "--session", "s", "--consumer", "h", "--exec", handler, "--count", "8")
	killPID(t, filepath.Join(dir, "pid7"))
	if lines, code := p.drainExit(t); code != exitOK || len(lines) != 0 {
		t.Fatalf("events --exec --count 8: exit %d, stdout %q; want 0 and nothing of its own", code, lines)
	}
	for _, want := range []string{"--exec exited 1 for event 3; running it again in 500ms (attempt 2)", "for event 5; running it again", "for event 7; running it again"} {
		if !strings.Contains(p.Stderr(), want) {
			t.Errorf("stderr does not say %q:\n%s", want, p.Stderr())
		}
	}
	runs, oks, log := handlerLog(t, dir)
	wantRuns := []int{1, 2, 3, 3, 4, 5, 5, 6, 7, 7, 8}
	if fmt.Sprint(runs) != fmt.Sprint(wantRuns) || fmt.Sprint(oks) != fmt.Sprint([]int{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Fatalf("handler log:\n%s\nwant runs %v, each event done once, in order", log, wantRuns)
	}
	if cs, _ := consumerOf(t, c, "s", "h"); cs.AckedID != 8 || cs.Ack != "explicit" {
		t.Errorf("consumer %+v, want explicit, acknowledged through 8", cs)
	}

	// The command killed while the handler of event 9 runs: a new one
	// starts after the last acknowledged event, 8, and runs 9 again.
	publishData(t, c, "s", "t:n", 9, 10)
	p = startBin(t, "events", "--socket", d.Socket, "--session", "s", "--consumer", "h", "--exec", handler)
	bustest.Eventually(t, e2eWait, "the handler to start on event 9", func() bool {
		_, err := os.Stat(filepath.Join(dir, "pid9"))
		return err == nil
	})
	p.cmd.Process.Kill()
	// The handler holds the command's stderr: kill it too, as systemd
	// would kill the unit's processes.
	killPID(t, filepath.Join(dir, "pid9"))
	p.exitCode(t)
	r := runBin(t, "", "events", "--socket", d.Socket, "--session", "s", "--consumer", "h", "--exec", handler, "--count", "2", "--transport", "ws")
	if r.code != exitOK {
		t.Fatalf("events --exec after a kill: exit %d, stderr %q", r.code, r.stderr)
	}
	oneLine(t, "events", r.stderr, `following consumer "h" of session "s" (explicit acks); resuming after event 8`)
	runs, oks, log = handlerLog(t, dir)
	wantRuns = append(wantRuns, 9, 9, 10)
	if fmt.Sprint(runs) != fmt.Sprint(wantRuns) || fmt.Sprint(oks) != fmt.Sprint([]int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}) {
		t.Fatalf("handler log:\n%s\nwant runs %v, each event done once, in order", log, wantRuns)
	}
}

func TestFollowerSkipsWhatItHandledWhenAConsumerReplaysIt(t *testing.T) {
	f := &follower{consumer: "c", handled: eventPoint{id: 5, epoch: "e1", ok: true}}
	for _, tt := range []struct {
		at   eventPoint
		want bool
	}{
		{eventPoint{id: 4, epoch: "e1"}, true},
		{eventPoint{id: 5, epoch: "e1"}, true},
		{eventPoint{id: 6, epoch: "e1"}, false},
		{eventPoint{id: 3, epoch: "e2"}, false}, // a new id sequence
	} {
		if got := f.seen(tt.at); got != tt.want {
			t.Errorf("seen(%+v) after handling 5 of e1 = %v, want %v", tt.at, got, tt.want)
		}
	}
	if (&follower{handled: f.handled}).seen(eventPoint{id: 4, epoch: "e1"}) {
		t.Error("a stream without a consumer skipped an event")
	}
}

// TestConsumersAreCountedWhereTheDaemonIsWatched: what the consumers of
// the CLI leave behind shows in status, session show and /metrics.
func TestConsumersAreCountedWhereTheDaemonIsWatched(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, daemontest.Options{})
	c := apiClient(t, d)
	publishData(t, c, "s", "t:n", 1, 5)
	publishData(t, c, "other", "t:n", 1, 1)
	for _, args := range [][]string{
		{"--consumer", "a", "--ack", "explicit", "--count", "2"},
		{"--consumer", "b", "--count", "5"},
	} {
		if r := runBin(t, "", append([]string{"events", "--socket", d.Socket, "--session", "s"}, args...)...); r.code != exitOK {
			t.Fatalf("events %v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	// b, auto, is stored when its stream ends.
	bustest.Eventually(t, e2eWait, "consumer b to be stored through 5", func() bool {
		cs, _ := consumerOf(t, c, "s", "b")
		return cs.AckedID == 5
	})

	var status struct {
		Status struct{ Consumers int } `json:"status"`
	}
	if r := runBin(t, "", "status", "--socket", d.Socket, "--json"); r.code != exitOK || json.Unmarshal([]byte(r.stdout), &status) != nil || status.Status.Consumers != 2 {
		t.Errorf("status --json: exit %d, consumers %d, want 2: %s", r.code, status.Status.Consumers, r.stdout)
	}
	var show struct {
		Consumers    int
		ConsumerList []struct {
			Name    string
			AckedID uint64
			Pending uint64
		}
	}
	r := runBin(t, "", "session", "show", "--socket", d.Socket, "s", "--json")
	if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &show) != nil {
		t.Fatalf("session show s --json: exit %d, stdout %q", r.code, r.stdout)
	}
	if got := fmt.Sprintf("%d %+v", show.Consumers, show.ConsumerList); got != "2 [{Name:a AckedID:2 Pending:3} {Name:b AckedID:5 Pending:0}]" {
		t.Errorf("session show s --json: consumers %s, want 2: a through 2 with 3 pending, b through 5", got)
	}

	code, body := d.Do(t, "GET", "/metrics", "")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	metric := func(name string) string {
		for l := range strings.Lines(string(body)) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), name+" "); ok {
				return v
			}
		}
		return "absent"
	}
	if got := metric("localbus_consumers"); got != "2" {
		t.Errorf("localbus_consumers %s, want 2", got)
	}
	if got := metric("localbus_consumer_pending_events"); got != "3" {
		t.Errorf("localbus_consumer_pending_events %s, want 3 (a's)", got)
	}
	if got := metric("localbus_consumer_acks_total"); got != "1" && got != "2" {
		t.Errorf("localbus_consumer_acks_total %s, want 1 or 2 (a's acks of 1 and 2, which may share one)", got)
	}
	if strings.Contains(string(body), `consumer="`) {
		t.Error("/metrics labels something by consumer name")
	}
}

// TestEventsExecStoppedStopsTheHandler: SIGTERM to the command (what
// systemctl stop sends) reaches the processes of the handler it runs, and
// the command exits 0. The interrupted event is acknowledged only if the
// handler's shell still exited 0 (a shell that runs its last command in
// its own place does; one that waits for it dies of the signal), so the
// next run handles it again or goes on after it: at least once, in order.
func TestEventsExecStoppedStopsTheHandler(t *testing.T) {
	t.Parallel()
	d, c, dir, handler := stopExecHandler(t, 3, `trap 'echo "$LOCALBUS_EVENT_ID term" >>"$dir/log"; exit 0' TERM
echo "$LOCALBUS_EVENT_ID run" >>"$dir/log"
[ "$LOCALBUS_EVENT_ID" = 2 ] && [ ! -e "$dir/started" ] || { echo "$LOCALBUS_EVENT_ID ok" >>"$dir/log"; exit 0; }
: >"$dir/started"
sleep 300 &
wait
`)
	if _, _, log := handlerLog(t, dir); log != "1 run\n1 ok\n2 run\n2 term\n" {
		t.Fatalf("handler log %q, want event 1 done, and 2 stopped", log)
	}
	cs, _ := consumerOf(t, c, "s", "h")
	if cs.AckedID != 1 && cs.AckedID != 2 {
		t.Fatalf("consumer %+v, want acknowledged through 1, or 2 if the shell exited 0", cs)
	}
	r := runBin(t, "", "events", "--socket", d.Socket, "--session", "s", "--consumer", "h", "--exec", "sh "+handler, "--count", strconv.Itoa(int(3-cs.AckedID)))
	if r.code != exitOK {
		t.Fatalf("events --exec again: exit %d, stderr %q", r.code, r.stderr)
	}
	runs, oks, log := handlerLog(t, dir)
	wantRuns := []int{1, 2, 3}
	if cs.AckedID == 1 {
		wantRuns = []int{1, 2, 2, 3}
	}
	if fmt.Sprint(runs) != fmt.Sprint(wantRuns) || fmt.Sprint(oks[len(oks)-1]) != "3" {
		t.Errorf("handler log %q, want runs %v and event 3 done last", log, wantRuns)
	}
}

// TestEventsExecStoppedKillsWhatTheHandlerLeft: a process the handler
// starts after the stop's SIGTERM, and leaves behind when its shell exits,
// is killed with the group as the shell exits; it does not keep the
// command's output open.
func TestEventsExecStoppedKillsWhatTheHandlerLeft(t *testing.T) {
	t.Parallel()
	_, _, dir, _ := stopExecHandler(t, 1, `trap 'sleep 300 & echo $! >"$dir/left"; exit 0' TERM
: >"$dir/started"
while :; do sleep 1; done
`)
	b, err := os.ReadFile(filepath.Join(dir, "left"))
	if err != nil {
		t.Fatalf("the handler's trap did not run: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("left %q: %v", b, err)
	}
	bustest.Eventually(t, e2eWait, "the process the handler left to be gone", func() bool {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		// Gone, or a zombie its new parent has not reaped yet.
		return err != nil || strings.Contains(string(st), ") Z ")
	})
}

// stopExecHandler publishes events 1..n to session s of a daemon of its
// own, follows them with events --consumer h --exec running the handler
// script body (a shell script in which $dir is the returned directory),
// stops the command with SIGTERM once the script has created $dir/started,
// and checks that it exits 0.
func stopExecHandler(t *testing.T, n int, body string) (d *daemontest.Daemon, c *client.Client, dir, handler string) {
	t.Helper()
	d = daemontest.Start(t, daemontest.Options{})
	c = apiClient(t, d)
	dir = t.TempDir()
	handler = filepath.Join(dir, "handler")
	script := fmt.Sprintf("#!/bin/sh\ndir=%q\n%s", dir, body)
	if err := os.WriteFile(handler, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	publishData(t, c, "s", "t:n", 1, n)
	// Through a shell of its own: the handler is a grandchild of the
	// command.
	p := startBin(t, "events", "--socket", d.Socket, "--session", "s", "--consumer", "h", "--exec", "sh "+handler)
	bustest.Eventually(t, e2eWait, "the handler to start", func() bool {
		_, err := os.Stat(filepath.Join(dir, "started"))
		return err == nil
	})
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.exitCode(t); code != exitOK {
		t.Fatalf("events --exec exit %d on SIGTERM, want 0", code)
	}
	return d, c, dir, handler
}
