package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the outcome of a run: its parameters, the machine, and the
// results on the daemon and on the baseline.
type Report struct {
	Scenario  string `json:"scenario"`
	Transport string `json:"transport"`
	// Params are the effective parameters, defaults filled in.
	Params Params `json:"params"`
	// Machine describes where the bench ran.
	Machine Machine `json:"machine"`
	// Server is where the daemon was reached, and Version what it reported.
	Server  string `json:"server,omitempty"`
	Version string `json:"version,omitempty"`
	// Durability ("disk" or "memory") and Fsync (with "disk") are the
	// daemon's settings, as /api/v1/caps reported them; "" when it did not.
	Durability string `json:"durability,omitempty"`
	Fsync      string `json:"fsync,omitempty"`
	// JetStream is the NATS URL of the JetStream the daemon was compared
	// with, and JetStreamVersion its server's version; its results are
	// Baseline's.
	JetStream        string `json:"jetstream,omitempty"`
	JetStreamVersion string `json:"jetstreamVersion,omitempty"`
	// Consumers reports a fanout with --consumers: Daemon's subscribers
	// read through consumers, Baseline's are the same daemon's plain
	// streams.
	Consumers bool `json:"consumers,omitempty"`
	// Daemon and Baseline are the results; either may be absent.
	// With several rounds they are each target's best round, and
	// DaemonRounds and BaselineRounds hold every round.
	Daemon         *Result   `json:"daemon,omitempty"`
	Baseline       *Result   `json:"baseline,omitempty"`
	DaemonRounds   []*Result `json:"daemonRounds,omitempty"`
	BaselineRounds []*Result `json:"baselineRounds,omitempty"`
	// Ratios are the daemon's figures over the baseline's (or JetStream's):
	// deliveriesPerSec (fanout; higher is better), latencyP50 and latencyP99
	// (latency; lower is better), requestsPerSec (publish; higher is
	// better), serverNsPerDelivery (the server's processor time per
	// delivery, or per request in publish; lower is better); and, in the
	// ack scenario, the daemon's ackP50PerPublishP50: an ack's round trip
	// over a single-event publish's, at the median.
	Ratios map[string]float64 `json:"ratios,omitempty"`
}

// Params are a run's parameters.
type Params struct {
	Subscribers int     `json:"subscribers"`
	Events      int     `json:"events,omitempty"`
	Size        int     `json:"size"`
	Batch       int     `json:"batch,omitempty"`
	MaxQueued   int     `json:"maxQueued,omitempty"`
	Rate        int     `json:"rate,omitempty"`
	Duration    float64 `json:"durationSeconds,omitempty"`
	Repeat      int     `json:"repeat,omitempty"`
	Publishers  int     `json:"publishers,omitempty"`
	Rounds      int     `json:"rounds"`
}

// Machine describes the machine the bench ran on.
type Machine struct {
	CPUs      int    `json:"cpus"`
	Model     string `json:"model,omitempty"`
	Kernel    string `json:"kernel,omitempty"`
	GoVersion string `json:"go"`
	// LoadAvg is the 1, 5 and 15 minute load averages when the run
	// started, from /proc/loadavg: how busy the machine was.
	LoadAvg string `json:"loadAvg,omitempty"`
}

func thisMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = runtime.GOOS + " " + strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.Model = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	return m
}

// OK reports whether every result's check passed.
func (r *Report) OK() bool { return r.Problem() == "" }

// Problem says what the checks found wrong, "" when nothing.
func (r *Report) Problem() string {
	var p []string
	all := append([]*Result{r.Daemon, r.Baseline}, r.DaemonRounds...)
	seen := map[*Result]bool{}
	for _, res := range append(all, r.BaselineRounds...) {
		if res != nil && !seen[res] && !res.Check.OK() {
			seen[res] = true
			p = append(p, res.Target+": "+res.Check.Problem())
		}
	}
	return strings.Join(p, "; ")
}

// Run runs the scenario c describes against the daemon and, with
// c.Baseline, the baseline, and reports what it measured. It fails when
// the daemon cannot be reached or refuses the scenario; a run whose
// subscribers missed events is reported, with Report.OK false.
func Run(ctx context.Context, c Config) (*Report, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	logf := func(string, ...any) {}
	if c.Progress != nil {
		logf = func(format string, args ...any) {
			fmt.Fprintf(c.Progress, "bench: "+format+"\n", args...)
		}
	}
	rep := &Report{
		Scenario: c.Scenario, Transport: c.Transport, Machine: thisMachine(),
		Params: Params{Subscribers: c.Subscribers, Size: c.Size, Rounds: c.Rounds},
	}
	switch c.Scenario {
	case ScenarioFanout:
		rep.Params.Events, rep.Params.Batch, rep.Params.MaxQueued = c.Events, c.Batch, c.MaxQueued
	case ScenarioLatency:
		rep.Params.Events, rep.Params.Rate, rep.Params.Duration = c.Events, c.Rate, c.Duration.Seconds()
		rep.Params.Publishers = c.Publishers
	case ScenarioIdle:
		rep.Params.Duration = c.Duration.Seconds()
	case ScenarioReplay:
		rep.Params.Repeat, rep.Params.Batch = c.Repeat, c.Batch
	case ScenarioPublish:
		rep.Params.Events, rep.Params.Publishers = c.Events, c.Publishers
	case ScenarioAck:
		rep.Params.Events = c.Events
	}
	var d *daemon
	if !c.BaselineOnly {
		if d, err = newDaemon(ctx, c); err != nil {
			return nil, err
		}
		rep.Server, rep.Version = d.String(), d.Version()
		rep.Durability, rep.Fsync = d.durab, d.fsync
		defer func() {
			cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
			d.close(cctx)
			ccancel()
		}()
	}
	// dt is the daemon as the scenario runs on it, and b what it is
	// compared with: the bare server, JetStream, or (--consumers) the
	// same daemon's plain streams.
	var dt, b target
	if d != nil {
		dt = d
	}
	switch {
	case c.Consumers:
		dt, b = viaConsumers{d}, plainDaemon{d}
		rep.Consumers = true
	case c.Baseline:
		bl, err := newBaseline(ctx)
		if err != nil {
			return nil, err
		}
		b = bl
		defer bl.close(ctx)
	case c.JetStream != "":
		js, err := newJetStream(ctx, c.JetStream, c.JetStreamPID)
		if err != nil {
			return nil, err
		}
		b = js
		rep.JetStream, rep.JetStreamVersion = c.JetStream, js.version
		defer js.close(ctx)
	}
	for i := range c.Rounds {
		if c.Rounds > 1 {
			logf("round %d of %d", i+1, c.Rounds)
		}
		if dt != nil {
			res, err := run(ctx, &env{c: c, t: dt, logf: logf})
			if err != nil {
				return nil, err
			}
			rep.DaemonRounds = append(rep.DaemonRounds, res)
		}
		if b != nil {
			res, err := run(ctx, &env{c: c, t: b, logf: logf})
			if err != nil {
				return nil, fmt.Errorf("bench: %s: %w", b.name(), err)
			}
			rep.BaselineRounds = append(rep.BaselineRounds, res)
		}
	}
	rep.Daemon, rep.Baseline = best(c.Scenario, rep.DaemonRounds), best(c.Scenario, rep.BaselineRounds)
	if c.Rounds == 1 {
		rep.DaemonRounds, rep.BaselineRounds = nil, nil
	}
	rep.ratios()
	if d := rep.Daemon; d != nil && d.Acks != nil && d.Requests != nil && d.Requests.P50 > 0 {
		if rep.Ratios == nil {
			rep.Ratios = map[string]float64{}
		}
		rep.Ratios["ackP50PerPublishP50"] = d.Acks.P50 / d.Requests.P50
	}
	return rep, nil
}

// best returns the best of rounds: the highest throughput or the lowest
// latency, time or memory.
func best(scenario string, rounds []*Result) *Result {
	score := func(r *Result) float64 {
		switch scenario {
		case ScenarioFanout:
			return r.DeliveriesPerSec
		case ScenarioLatency:
			return -r.Latency.P99
		case ScenarioIdle:
			return -r.Memory.PerStreamKiB
		case ScenarioReplay:
			return -r.Replay.P50
		case ScenarioAck:
			return -r.Acks.P50
		}
		return r.RequestsPerSec
	}
	var b *Result
	for _, r := range rounds {
		if b == nil || score(r) > score(b) {
			b = r
		}
	}
	return b
}

func (r *Report) ratios() {
	d, b := r.Daemon, r.Baseline
	if d == nil || b == nil {
		return
	}
	r.Ratios = map[string]float64{}
	if d.DeliveriesPerSec > 0 && b.DeliveriesPerSec > 0 {
		r.Ratios["deliveriesPerSec"] = d.DeliveriesPerSec / b.DeliveriesPerSec
	}
	if d.Latency != nil && b.Latency != nil && b.Latency.P99 > 0 {
		r.Ratios["latencyP50"] = d.Latency.P50 / b.Latency.P50
		r.Ratios["latencyP99"] = d.Latency.P99 / b.Latency.P99
	}
	if d.RequestsPerSec > 0 && b.RequestsPerSec > 0 {
		r.Ratios["requestsPerSec"] = d.RequestsPerSec / b.RequestsPerSec
	}
	if d.CPU != nil && b.CPU != nil && d.CPU.ServerNsPerDelivery > 0 && b.CPU.ServerNsPerDelivery > 0 {
		r.Ratios["serverNsPerDelivery"] = d.CPU.ServerNsPerDelivery / b.CPU.ServerNsPerDelivery
	}
}

// WriteTable writes the report as a table for people.
func (r *Report) WriteTable(w io.Writer) error {
	ew := &errWriter{w: w}
	p := r.Params
	fmt.Fprintf(ew, "localbus bench: %s over %s", r.Scenario, r.Transport)
	switch r.Scenario {
	case ScenarioFanout:
		fmt.Fprintf(ew, ", %d subscribers, %d events of %d B, batches of %d\n", p.Subscribers, p.Events, p.Size, p.Batch)
	case ScenarioLatency:
		fmt.Fprintf(ew, ", %d subscribers, %d events/s of %d B for %gs, one per request, open loop over %s\n",
			p.Subscribers, p.Rate, p.Size, p.Duration, plural(p.Publishers, "publisher connection", "publisher connections"))
	case ScenarioIdle:
		fmt.Fprintf(ew, ", %d idle streams held %gs\n", p.Subscribers, p.Duration)
	case ScenarioReplay:
		fmt.Fprintf(ew, ", %d resumes from 0 on a full ring of %d B events\n", p.Repeat, p.Size)
	case ScenarioPublish:
		fmt.Fprintf(ew, ", %d single-event requests of %d B over %s, %s\n", p.Events, p.Size,
			plural(p.Publishers, "publisher connection", "publisher connections"), plural(p.Subscribers, "subscriber", "subscribers"))
	case ScenarioAck:
		fmt.Fprintf(ew, ", %d events of %d B, each published, read through an explicit consumer and acknowledged before the next\n", p.Events, p.Size)
	}
	if r.Consumers {
		fmt.Fprintf(ew, "consumers: every subscriber on an auto consumer of its own, against the same daemon's plain streams\n")
	}
	if p.Rounds > 1 {
		fmt.Fprintf(ew, "best of %d rounds\n", p.Rounds)
	}
	m := r.Machine
	fmt.Fprintf(ew, "machine: %d CPUs, %s, %s, %s, load average %s\n", m.CPUs, orDash(m.Model), orDash(m.Kernel), m.GoVersion, orDash(m.LoadAvg))
	if r.Server != "" {
		fmt.Fprintf(ew, "daemon:  localbus %s at %s, %s\n", orDash(r.Version), r.Server, r.durabilityText())
	}
	if r.JetStream != "" {
		fmt.Fprintf(ew, "jetstream: nats-server %s at %s, file storage, a synchronous publish per request\n", orDash(r.JetStreamVersion), r.JetStream)
	}
	fmt.Fprintln(ew)

	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	cols := []*Result{}
	head := ""
	for _, res := range []*Result{r.Daemon, r.Baseline} {
		if res != nil {
			cols = append(cols, res)
			head += res.Target + "\t"
		}
	}
	showRatio := len(cols) == 2
	if showRatio {
		head += "ratio\t"
	}
	fmt.Fprintf(tw, "\t%s\n", head)
	row := func(name string, f func(*Result) (float64, bool), format string, ratio bool) {
		vals := make([]float64, len(cols))
		any := false
		line := name + "\t"
		for i, res := range cols {
			v, ok := f(res)
			vals[i] = v
			if ok {
				any = true
				line += fmt.Sprintf(format, v) + "\t"
			} else {
				line += "-\t"
			}
		}
		if !any {
			return
		}
		if showRatio {
			if ratio && vals[1] != 0 {
				line += fmt.Sprintf("%.2f", vals[0]/vals[1]) + "\t"
			} else {
				line += "\t"
			}
		}
		fmt.Fprintln(tw, line)
	}
	pct := func(get func(*Result) *Percentiles, q func(*Percentiles) float64) func(*Result) (float64, bool) {
		return func(r *Result) (float64, bool) {
			if p := get(r); p != nil && p.Count > 0 {
				return q(p), true
			}
			return 0, false
		}
	}
	num := func(get func(*Result) float64) func(*Result) (float64, bool) {
		return func(r *Result) (float64, bool) { v := get(r); return v, v != 0 }
	}
	lat := func(r *Result) *Percentiles { return r.Latency }
	lag := func(r *Result) *Percentiles { return r.PublisherLag }
	req := func(r *Result) *Percentiles { return r.Requests }
	rep := func(r *Result) *Percentiles { return r.Replay }
	p50 := func(p *Percentiles) float64 { return p.P50 }
	p99 := func(p *Percentiles) float64 { return p.P99 }
	pmax := func(p *Percentiles) float64 { return p.Max }

	row("deliveries/s", num(func(r *Result) float64 { return r.DeliveriesPerSec }), "%.0f", true)
	row("published events/s", num(func(r *Result) float64 { return r.PublishedPerSec }), "%.0f", true)
	row("publish requests/s", num(func(r *Result) float64 { return r.RequestsPerSec }), "%.0f", true)
	row("request p50 ms", pct(req, p50), "%.3f", true)
	row("request p99 ms", pct(req, p99), "%.3f", true)
	ackp := func(r *Result) *Percentiles { return r.Acks }
	row("ack p50 ms", pct(ackp, p50), "%.3f", true)
	row("ack p99 ms", pct(ackp, p99), "%.3f", true)
	row("latency p50 ms", pct(lat, p50), "%.3f", true)
	row("latency p99 ms", pct(lat, p99), "%.3f", true)
	row("latency max ms", pct(lat, pmax), "%.3f", true)
	row("publisher lag p99 ms", pct(lag, p99), "%.3f", false)
	row("publisher lag max ms", pct(lag, pmax), "%.3f", false)
	row("replay p50 ms", pct(rep, p50), "%.2f", false)
	row("replay max ms", pct(rep, pmax), "%.2f", false)
	row("replayed events", num(func(r *Result) float64 { return float64(r.ReplayedEvents) }), "%.0f", false)
	row("window (events)", num(func(r *Result) float64 { return float64(r.Window) }), "%.0f", false)
	row("time s", num(func(r *Result) float64 { return r.Seconds }), "%.3f", false)
	mem := func(get func(*Memory) float64) func(*Result) (float64, bool) {
		return func(r *Result) (float64, bool) {
			if r.Memory == nil {
				return 0, false
			}
			v := get(r.Memory)
			return v, v != 0
		}
	}
	cpu := func(get func(*CPU) float64) func(*Result) (float64, bool) {
		return func(r *Result) (float64, bool) {
			if r.CPU == nil {
				return 0, false
			}
			v := get(r.CPU)
			return v, v != 0
		}
	}
	// The server is the daemon in its column and the baseline server in
	// the baseline's, each a process of its own.
	row("server CPU s", cpu(func(c *CPU) float64 { return c.Server }), "%.2f", true)
	row("server CPU ns/delivery", cpu(func(c *CPU) float64 { return c.ServerNsPerDelivery }), "%.0f", true)
	row("bench CPU s", cpu(func(c *CPU) float64 { return c.Bench }), "%.2f", false)
	row("RSS per stream KiB", mem(func(m *Memory) float64 { return m.PerStreamKiB }), "%.1f", false)
	row("RSS before KiB", mem(func(m *Memory) float64 { return float64(m.BeforeKiB) }), "%.0f", false)
	row("RSS after KiB", mem(func(m *Memory) float64 { return float64(m.AfterKiB) }), "%.0f", false)
	row("RSS peak KiB", mem(func(m *Memory) float64 { return float64(m.PeakKiB) }), "%.0f", false)
	tw.Flush()

	if v, ok := r.Ratios["ackP50PerPublishP50"]; ok {
		fmt.Fprintf(ew, "ack p50 / publish p50: %.2f\n", v)
	}
	for _, res := range cols {
		if res.Memory != nil && res.Memory.Note != "" {
			fmt.Fprintf(ew, "note %s: %s\n", res.Target, res.Memory.Note)
		}
	}
	fmt.Fprintln(ew)
	for _, res := range cols {
		c := res.Check
		verdict := "ok"
		if !c.OK() {
			verdict = "FAILED: " + c.Problem()
		}
		fmt.Fprintf(ew, "check %s: %s: %d of %d deliveries to %d subscribers, %d lost, %d duplicates, %d out of order",
			res.Target, verdict, c.Received, c.Expected, c.Subscribers, c.Lost, c.Duplicates, c.OutOfOrder)
		if c.Reconnects+c.Lagged+c.Gaps+c.Slow > 0 || c.Unexpected > 0 {
			fmt.Fprintf(ew, "; %d reconnects, %d lagged, %d gaps, %d slow warnings, %d unexpected ids", c.Reconnects, c.Lagged, c.Gaps, c.Slow, c.Unexpected)
		}
		fmt.Fprintln(ew)
	}
	return ew.err
}

// durabilityText says how the daemon keeps events, as the header shows it.
func (r *Report) durabilityText() string {
	switch {
	case r.Durability == "":
		return "durability not reported"
	case r.Fsync != "":
		return "durability " + r.Durability + ", fsync " + r.Fsync
	}
	return "durability " + r.Durability
}

// plural says n things, in the singular when n is 1.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// errWriter keeps the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	if err != nil {
		e.err = err
	}
	return n, err
}

// ErrCheckFailed is returned by callers that treat a failed check as an
// error; Report.Problem says what failed.
var ErrCheckFailed = errors.New("bench: the subscribers did not receive every event once, in order")
