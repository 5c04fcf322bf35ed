package bench

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"time"

	"github.com/localbus/localbus/ipc/wire/grammar"
)

// Scenarios Run knows.
const (
	ScenarioFanout  = "fanout"
	ScenarioLatency = "latency"
	ScenarioIdle    = "idle"
	ScenarioReplay  = "replay"
	ScenarioPublish = "publish"
	ScenarioAck     = "ack"
)

// DefaultLatencyPublishers is the size of latency's pool of publishing
// connections when Config.Publishers is 0. The pool keeps the rate as long
// as R × the reply time stays below it: 32 connections cover replies of up
// to 32 ms at 1000 events a second, which a daemon that answers only after
// its fsync reaches on a busy machine, the way many clients publishing at
// once would not be held back either.
const DefaultLatencyPublishers = 32

// Scenarios lists every scenario, in the order the docs describe them.
var Scenarios = []string{ScenarioFanout, ScenarioLatency, ScenarioIdle, ScenarioReplay, ScenarioPublish, ScenarioAck}

// Config is one run of the bench. Zero values mean the defaults, which
// depend on the scenario and are given with each field.
type Config struct {
	// Socket is the daemon's Unix socket. URL, when set, reaches the daemon
	// over TCP instead (http://127.0.0.1:PORT). Key is the bearer key to
	// present, "" for none.
	Socket, URL, Key string

	// Scenario is one of Scenarios; default fanout.
	Scenario string
	// Transport is TransportSSE (default) or TransportWS.
	Transport string
	// Subscribers is S for fanout and latency (default 64) and C for idle
	// (default 2000). Replay and publish use one subscriber at a time.
	Subscribers int
	// Events is E: fanout 20000, publish 10000, ack 2000. Replay
	// publishes a ring's worth, latency Rate × Duration.
	Events int
	// Size is P, the size in bytes of each event's data; default 256.
	Size int
	// Batch is the number of events per publish request in fanout and when
	// replay fills the ring; default 1000 (the daemon's limit).
	Batch int
	// Window is, in fanout, the most events the publisher runs ahead of the
	// slowest subscriber. Default: two batches, kept within the
	// subscriber's queue limits, so that no subscriber is evicted. A
	// negative value publishes as fast as it can; subscribers that fall
	// behind are evicted and resume, which the check counts.
	Window int
	// MaxQueued is the ?maxQueued= every fanout subscriber asks for;
	// default 2048, the highest a client may ask.
	MaxQueued int
	// Rate is R, events per second in latency; default 1000.
	Rate int
	// Duration is D, how long latency publishes (default 10 s), and how
	// long idle holds its streams open before it reads the daemon's memory
	// (default 3 s).
	Duration time.Duration
	// Repeat is how many subscribers replay resumes, one after another;
	// default 10.
	Repeat int
	// Publishers is the number of keep-alive connections that publish
	// concurrently: in latency a pool, each event sent when due on whichever
	// connection is free (default DefaultLatencyPublishers, 32); in publish, connections that send
	// requests back to back (default 1).
	Publishers int
	// Rounds is how many times the scenario runs, alternating daemon and
	// baseline; the report keeps each target's best round (the highest
	// throughput, the lowest latency), since a busy machine only ever
	// makes a round slower. Default 1.
	Rounds int
	// Baseline also runs fanout or latency through a bare server on a Unix
	// socket, to report every figure as a ratio to this machine's limit.
	// The server is this executable run again (see ServeBaselineIfAsked),
	// so that its processor time is measured apart from the clients'.
	Baseline bool
	// BaselineOnly runs the baseline alone, without a daemon.
	BaselineOnly bool
	// Consumers makes every fanout subscriber read through an auto
	// consumer of its own (?consumer=bench-N, SPEC §2.4), and compares
	// that, in alternating rounds, with the same daemon's plain streams:
	// the report's two columns are "consumers" and "plain".
	Consumers bool
	// JetStream, a NATS URL (nats://127.0.0.1:4222), also runs the publish
	// scenario against NATS JetStream there, in alternating rounds, and
	// reports the daemon's figures as ratios to it: each publisher is a
	// NATS connection that publishes the same bytes, one message at a
	// time, waiting for JetStream's acknowledgement, to a file-storage
	// stream of the bench's own. Neither target has a subscriber then; the
	// check is that every publish was acknowledged with an id of its own.
	// JetStreamPID is nats-server's process id, for its CPU figures.
	JetStream    string
	JetStreamPID int
	// Session is the session the bench uses; default bench-RANDOM, created
	// for the run and deleted after it. Nothing else should publish to it.
	Session string
	// KeepSession keeps the sessions the bench created.
	KeepSession bool
	// PID is the daemon's process id, for its memory figures; 0 asks the
	// Unix socket who its peer is.
	PID int
	// Settle is how long the subscribers may go without an event, once
	// publishing is over, before the bench stops waiting and counts what
	// they miss as lost; default 5 s.
	Settle time.Duration
	// Timeout bounds the whole run; default 5 minutes.
	Timeout time.Duration
	// Progress, when not nil, receives a line as each phase begins.
	Progress io.Writer
}

// ConfigError is a Config that cannot run: a usage mistake.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

var sessionRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// withDefaults checks c and fills in the defaults of its scenario. Its
// errors are *ConfigError.
func (c Config) withDefaults() (Config, error) {
	c, err := c.fill()
	if err != nil {
		return c, &ConfigError{err}
	}
	return c, nil
}

func (c Config) fill() (Config, error) {
	if c.Scenario == "" {
		c.Scenario = ScenarioFanout
	}
	if c.Transport == "" {
		c.Transport = TransportSSE
		if c.Scenario == ScenarioAck {
			c.Transport = TransportWS
		}
	}
	switch c.Transport {
	case TransportSSE, TransportWS:
	default:
		return c, fmt.Errorf("bench: unknown transport %q: want sse or ws", c.Transport)
	}
	var errs []error
	nonNeg := func(name string, v int) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("bench: %s must not be negative, got %d", name, v))
		}
	}
	nonNeg("subscribers", c.Subscribers)
	nonNeg("events", c.Events)
	nonNeg("size", c.Size)
	nonNeg("batch", c.Batch)
	nonNeg("rate", c.Rate)
	nonNeg("repeat", c.Repeat)
	nonNeg("publishers", c.Publishers)
	nonNeg("pid", c.PID)
	nonNeg("jetstream-pid", c.JetStreamPID)
	nonNeg("rounds", c.Rounds)
	if c.Duration < 0 || c.Timeout < 0 || c.Settle < 0 {
		errs = append(errs, errors.New("bench: durations must not be negative"))
	}
	if c.MaxQueued != 0 && (c.MaxQueued < grammar.MinMaxQueued || c.MaxQueued > grammar.MaxMaxQueued) {
		errs = append(errs, fmt.Errorf("bench: max-queued must be from %d to %d, got %d", grammar.MinMaxQueued, grammar.MaxMaxQueued, c.MaxQueued))
	}
	if c.Session != "" && !sessionRE.MatchString(c.Session) {
		errs = append(errs, fmt.Errorf("bench: invalid session id %q", c.Session))
	}
	if len(errs) > 0 {
		return c, errors.Join(errs...)
	}
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&c.Size, 256)
	def(&c.Batch, 1000)
	def(&c.MaxQueued, grammar.MaxMaxQueued)
	def(&c.Rate, 1000)
	def(&c.Repeat, 10)
	def(&c.Rounds, 1)
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Minute
	}
	if c.Settle == 0 {
		c.Settle = 5 * time.Second
	}
	switch c.Scenario {
	case ScenarioFanout:
		def(&c.Subscribers, 64)
		def(&c.Events, 20000)
	case ScenarioLatency:
		def(&c.Subscribers, 64)
		if c.Duration == 0 {
			c.Duration = 10 * time.Second
		}
		c.Events = max(1, int(float64(c.Rate)*c.Duration.Seconds()))
		def(&c.Publishers, DefaultLatencyPublishers)
	case ScenarioIdle:
		def(&c.Subscribers, 2000)
		if c.Duration == 0 {
			c.Duration = 3 * time.Second
		}
	case ScenarioReplay:
		c.Subscribers = 1
	case ScenarioPublish:
		c.Subscribers = 1
		if c.JetStream != "" {
			c.Subscribers = 0
		}
		def(&c.Events, 10000)
		def(&c.Publishers, 1)
	case ScenarioAck:
		c.Subscribers, c.Publishers = 1, 1
		def(&c.Events, 2000)
		if c.Transport != TransportWS {
			return c, errors.New("bench: the ack scenario acknowledges on the WebSocket: --transport ws")
		}
	default:
		return c, fmt.Errorf("bench: unknown scenario %q: want one of fanout, latency, idle, replay, publish, ack", c.Scenario)
	}
	if c.BaselineOnly {
		c.Baseline = true
	}
	if c.Baseline && c.Scenario != ScenarioFanout && c.Scenario != ScenarioLatency {
		return c, fmt.Errorf("bench: --baseline applies to fanout and latency, not %s", c.Scenario)
	}
	if c.JetStream != "" && (c.Scenario != ScenarioPublish || c.Baseline) {
		return c, fmt.Errorf("bench: --jetstream applies to the publish scenario alone, without --baseline")
	}
	if c.Consumers && (c.Scenario != ScenarioFanout || c.Baseline) {
		return c, fmt.Errorf("bench: --consumers applies to the fanout scenario alone, without --baseline")
	}
	if c.Size < 16 {
		return c, fmt.Errorf("bench: size must be at least 16 bytes, got %d", c.Size)
	}
	if c.Batch > 1000 {
		return c, fmt.Errorf("bench: batch must be at most 1000 (the daemon's limit), got %d", c.Batch)
	}
	return c, nil
}
