package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/localbus/localbus/cmd/localbus/bench"
)

// benchCommand is "localbus bench": load a running daemon and report what
// it delivers, next to this machine's limit with --baseline.
func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "measure a running daemon: fan-out, latency, memory per stream, replay, publish",
		Description: `Runs one scenario against the daemon and checks that every subscriber got
every event once, in order:

  fanout   S subscribers, E events of P bytes published in batches
  latency  events published one per request at R per second for D, each
           sent when due over a pool of --publishers connections
  idle     C idle streams; the daemon's resident memory per stream
  replay   a new subscriber resuming from 0 on a full ring
  publish  single-event publish requests per second, one subscriber
  ack      one client: publish an event, read it through an explicit
           consumer on the WebSocket, acknowledge it; an ack's round trip
           against the publish's

--baseline runs fanout or latency through a bare server too (a process of the
bench's own, whose CPU time is measured as the daemon's), and prints the
daemon's figures as ratios to it. --jetstream URL runs publish against NATS
JetStream too (no subscriber on either), with ratios. --consumers puts every fanout
subscriber on an auto consumer of its own and compares it with plain streams of
the same daemon, in alternating rounds. The bench uses a session of its
own, created and deleted for the run. Exits 1 when a check fails.`,
		OnUsageError: onUsageError,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "scenario", Value: bench.ScenarioFanout, Usage: "fanout, latency, idle, replay, publish or ack"},
			&cli.StringFlag{Name: "transport", Usage: "sse or ws", DefaultText: "sse; ws for ack"},
			&cli.IntFlag{Name: "subscribers", Aliases: []string{"S", "C"}, Usage: "subscribers (fanout, latency) or idle streams (idle)", DefaultText: "64; 2000 for idle"},
			&cli.IntFlag{Name: "events", Aliases: []string{"E"}, Usage: "events to publish (fanout, publish, ack)", DefaultText: "20000; 10000 for publish, 2000 for ack"},
			&cli.IntFlag{Name: "size", Aliases: []string{"P"}, Value: 256, Usage: "bytes of each event's data"},
			&cli.IntFlag{Name: "batch", Value: 1000, Usage: "events per publish request (fanout, replay)"},
			&cli.IntFlag{Name: "window", Usage: "fanout: most events published ahead of the slowest subscriber; -1: no flow control", DefaultText: "two batches, within the queue limits"},
			&cli.IntFlag{Name: "max-queued", Value: 2048, Usage: "fanout: the ?maxQueued= each subscriber asks for"},
			&cli.IntFlag{Name: "rate", Aliases: []string{"R"}, Value: 1000, Usage: "latency: events per second"},
			&cli.DurationFlag{Name: "duration", Aliases: []string{"D"}, Usage: "latency: how long to publish; idle: how long to hold the streams before measuring", DefaultText: "10s for latency, 3s for idle"},
			&cli.IntFlag{Name: "repeat", Value: 10, Usage: "replay: resumes to time"},
			&cli.IntFlag{Name: "publishers", Usage: "latency: the pool of connections that each send an event as soon as it is due; publish: connections sending requests back to back", DefaultText: fmt.Sprintf("%d for latency, 1 for publish", bench.DefaultLatencyPublishers)},
			&cli.IntFlag{Name: "rounds", Value: 1, Usage: "run the scenario this many times, alternating daemon and baseline, and report each one's best round"},
			&cli.BoolFlag{Name: "baseline", Usage: "also run through a bare server's Unix socket writes and print ratios (fanout, latency)"},
			&cli.BoolFlag{Name: "baseline-only", Usage: "run the baseline alone, without a daemon"},
			&cli.BoolFlag{Name: "consumers", Usage: "fanout: every subscriber reads through an auto consumer of its own, compared with plain streams of the same daemon"},
			&cli.StringFlag{Name: "jetstream", Usage: "publish: also run against NATS JetStream at `URL` (nats://127.0.0.1:4222), a synchronous publish per request to a file-storage stream, no subscriber on either, and print ratios"},
			&cli.IntFlag{Name: "jetstream-pid", Usage: "nats-server's process id, for its CPU figures with --jetstream"},
			&cli.StringFlag{Name: "session", Usage: "the session `ID` to use (default: a new bench-… session, deleted after)"},
			&cli.BoolFlag{Name: "keep-session", Usage: "do not delete the sessions the bench created"},
			&cli.IntFlag{Name: "pid", Usage: "the daemon's process id, for its memory and CPU figures", DefaultText: "the socket's peer"},
			&cli.DurationFlag{Name: "settle", Usage: "after publishing, how long subscribers may go without an event before what they miss counts as lost", DefaultText: "5s"},
			&cli.DurationFlag{Name: "timeout", Usage: "bound the whole run", DefaultText: "5m"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress lines on stderr"},
			jsonFlag("print the report as JSON"),
			&cli.StringFlag{Name: "json-out", Usage: "also write the report as JSON to `FILE`", TakesFile: true},
		}, connFlags()...),
		Action: runBench,
	}
}

func runBench(c *cli.Context) error {
	if err := checkArgs(c, 0, 0, "no arguments"); err != nil {
		return err
	}
	cfg := bench.Config{
		Socket: c.String("socket"), URL: c.String("url"), Key: c.String("key"),
		Scenario: c.String("scenario"), Transport: c.String("transport"),
		Subscribers: c.Int("subscribers"), Events: c.Int("events"), Size: c.Int("size"),
		Batch: c.Int("batch"), Window: c.Int("window"), MaxQueued: c.Int("max-queued"),
		Rate: c.Int("rate"), Duration: c.Duration("duration"), Repeat: c.Int("repeat"),
		Publishers: c.Int("publishers"), Rounds: c.Int("rounds"), Baseline: c.Bool("baseline"), BaselineOnly: c.Bool("baseline-only"),
		Consumers: c.Bool("consumers"),
		JetStream: c.String("jetstream"), JetStreamPID: c.Int("jetstream-pid"),
		Session: c.String("session"), KeepSession: c.Bool("keep-session"), PID: c.Int("pid"),
		Settle: c.Duration("settle"), Timeout: c.Duration("timeout"),
	}
	if cfg.Socket == "" && cfg.URL == "" {
		cfg.Socket = socketPath(c)
	}
	if !c.Bool("quiet") {
		cfg.Progress = c.App.ErrWriter
	}
	rep, err := bench.Run(c.Context, cfg)
	if err != nil {
		return benchError(c, err)
	}
	if err := writeBenchReport(c.App.Writer, rep, c.Bool("json")); err != nil {
		return err
	}
	if path := c.String("json-out"); path != "" {
		var b bytes.Buffer
		writeBenchReport(&b, rep, true)
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			return exitError{exitUsage, err}
		}
	}
	if !rep.OK() {
		return exitError{exitUsage, fmt.Errorf("%w: %s", bench.ErrCheckFailed, rep.Problem())}
	}
	return nil
}

func writeBenchReport(w io.Writer, rep *bench.Report, asJSON bool) error {
	if !asJSON {
		return rep.WriteTable(w)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// benchError maps a failed run to the exit codes of the other commands.
func benchError(c *cli.Context, err error) error {
	var ue *bench.UnreachableError
	var se *bench.StatusError
	var ce *bench.ConfigError
	switch {
	case errors.As(err, &ce):
		return usagef(c, "%v", strings.TrimPrefix(err.Error(), "bench: "))
	case errors.As(err, &ue):
		return exitError{exitUnreachable, fmt.Errorf("cannot reach the daemon at %s: %v; is it running?", strings.TrimPrefix(ue.Addr, "unix:"), rootCause(ue.Err))}
	case errors.As(err, &se) && (se.Status == http.StatusUnauthorized || se.Status == http.StatusForbidden):
		return exitError{exitRefused, fmt.Errorf("refused by the daemon: %v; pass a key with --key or LOCALBUS_KEY", err)}
	}
	return exitError{exitUsage, err}
}
