package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Result is what one scenario measured on one target.
type Result struct {
	// Target is "daemon" or "baseline".
	Target string `json:"target"`
	// Seconds is the measured time: first publish to last delivery
	// (fanout), the publishing period (latency, publish), the settle time
	// (idle), or every replay (replay).
	Seconds float64 `json:"seconds"`
	// DeliveriesPerSec is events delivered per second, summed over the
	// subscribers (fanout).
	DeliveriesPerSec float64 `json:"deliveriesPerSec,omitempty"`
	// PublishedPerSec is events published per second.
	PublishedPerSec float64 `json:"publishedPerSec,omitempty"`
	// Window is the flow-control window fanout used, in events; -1 for none.
	Window int `json:"window,omitempty"`
	// Batch is the events per publish request fanout used.
	Batch int `json:"batch,omitempty"`
	// Latency is publish-to-deliver latency, from each event's due time
	// (latency), in milliseconds.
	Latency *Percentiles `json:"latencyMs,omitempty"`
	// PublisherLag is how late each publish began after its due time
	// (latency), in milliseconds.
	PublisherLag *Percentiles `json:"publisherLagMs,omitempty"`
	// Publishers is the number of connections that published concurrently
	// (latency, publish).
	Publishers int `json:"publishers,omitempty"`
	// RequestsPerSec is publish requests per second (publish).
	RequestsPerSec float64 `json:"requestsPerSec,omitempty"`
	// Requests is the round trip of each publish request (publish, ack),
	// in milliseconds.
	Requests *Percentiles `json:"requestMs,omitempty"`
	// Acks is the time from sending {"op":"ack"} to its {"op":"acked"}
	// (ack), in milliseconds.
	Acks *Percentiles `json:"ackMs,omitempty"`
	// Replay is the time from dialling to stream:replayed for each replay,
	// in milliseconds; ReplayedEvents is the ring each one replayed.
	Replay         *Percentiles `json:"replayMs,omitempty"`
	ReplayedEvents int          `json:"replayedEvents,omitempty"`
	// CPU is the processor time of the measured part.
	CPU *CPU `json:"cpu,omitempty"`
	// Memory is the server's resident memory, when its process is known.
	Memory *Memory `json:"memory,omitempty"`
	// Check is what the subscribers received against what was published.
	Check Check `json:"check"`
}

// env is what a scenario runs with.
type env struct {
	c    Config
	t    target
	logf func(format string, args ...any)
}

func run(ctx context.Context, e *env) (*Result, error) {
	switch e.c.Scenario {
	case ScenarioFanout:
		return fanout(ctx, e)
	case ScenarioLatency:
		return latency(ctx, e)
	case ScenarioIdle:
		return idle(ctx, e)
	case ScenarioReplay:
		return replay(ctx, e)
	case ScenarioPublish:
		return publish(ctx, e)
	case ScenarioAck:
		return ack(ctx, e)
	}
	return nil, fmt.Errorf("bench: unknown scenario %q", e.c.Scenario)
}

func (e *env) checkSubscribers(n int) error {
	if m := e.t.limits().MaxSubscribers; m > 0 && n > m {
		return fmt.Errorf("bench: %d subscribers on one session, but the daemon allows %d: start it with --max-subscribers %d (and a max-subscribers-total at least as high)", n, m, n)
	}
	return nil
}

// window is fanout's flow-control window and batch: two batches, within
// the subscriber's live frame limit and three quarters of its byte limit,
// so that the publisher never makes the daemon evict a subscriber.
func (e *env) window() (window, batch int) {
	c := e.c
	batch = c.Batch
	if c.Window < 0 {
		return -1, batch
	}
	if c.Window > 0 {
		return c.Window, min(batch, c.Window)
	}
	frame := c.Size + 160 + len(e.c.Session) // the envelope around the data
	window = min(2*batch, c.MaxQueued)
	if mb := e.t.limits().MaxQueuedBytes; mb > 0 {
		window = min(window, int(mb*3/4)/frame)
	}
	window = max(window, 1)
	return window, min(batch, window)
}

// openStreams is how fanout and latency begin: it opens a session, starts
// c.Subscribers followers on it, made by mk from the session's path, and
// npub publishers of c.Size-byte events to it, each on a connection of its
// own. stop closes the publishers, then the followers; on error nothing is
// left open.
func (e *env) openStreams(ctx context.Context, npub int, mk func(path string) func(i int) *follower) (fs []*follower, pubs []publisher, stop func(), err error) {
	c := e.c
	if err := e.checkSubscribers(c.Subscribers); err != nil {
		return nil, nil, nil, err
	}
	path, err := e.t.newSession(ctx, 0)
	if err != nil {
		return nil, nil, nil, err
	}
	e.logf("%s: opening %d %s streams", e.t.name(), c.Subscribers, c.Transport)
	if fs, err = startFollowers(ctx, c.Subscribers, 32, mk(path)); err != nil {
		return nil, nil, nil, err
	}
	closeAll := func() {
		for _, p := range pubs {
			p.Close()
		}
		stopFollowers(fs)
	}
	for range npub {
		p, err := e.t.publisher(ctx, path, c.Size)
		if err != nil {
			closeAll()
			return nil, nil, nil, err
		}
		pubs = append(pubs, p)
	}
	return fs, pubs, closeAll, nil
}

func followerAt(e *env, path, query string, n uint64, signal chan struct{}, every int64, latency bool) func(int) *follower {
	return func(int) *follower {
		return &follower{
			t: e.t, o: streamOptions{transport: e.c.Transport, path: path, query: query, wantDue: latency},
			n: n, signal: signal, every: every, latency: latency,
		}
	}
}

func checkAll(fs []*follower) Check {
	var c Check
	for _, f := range fs {
		c.add(f.result())
	}
	return c
}

// serverPID is the server's process for CPU figures: the daemon's, or the
// baseline server's; 0 if unknown.
func (e *env) serverPID() int { return e.t.pid() }

// sampler samples the target's RSS during a scenario, if its pid is known.
func (e *env) sampler() *rssSampler {
	if pid := e.t.pid(); pid > 0 && e.t.name() == "daemon" {
		return sampleRSS(pid, 50*time.Millisecond)
	}
	return nil
}

func fanout(ctx context.Context, e *env) (*Result, error) {
	c := e.c
	window, batch := e.window()
	signal := make(chan struct{}, 1)
	query := "maxQueued=" + strconv.Itoa(c.MaxQueued)
	fs, pubs, stop, err := e.openStreams(ctx, 1, func(path string) func(int) *follower {
		return func(i int) *follower {
			return followerAt(e, path, query+consumerQuery(e.t, i), uint64(c.Events), signal, int64(max(1, batch/4)), false)(i)
		}
	})
	if err != nil {
		return nil, err
	}
	defer stop()
	pub := pubs[0]
	rss := e.sampler()
	var before int64
	if rss != nil {
		before, _ = readRSS(rss.pid)
	}
	e.logf("%s: publishing %d events of %d bytes in batches of %d", e.t.name(), c.Events, c.Size, batch)
	cpu := startCPU(e.serverPID())
	slowest := func() int64 {
		m := int64(1 << 62)
		for _, f := range fs {
			select {
			case <-f.done:
				if f.err != nil {
					return -1
				}
			default:
			}
			m = min(m, f.delivered.Load())
		}
		return m
	}
	// A subscriber that makes no progress for Settle (a server that lost
	// its events) does not hold the publisher back for good.
	stall := time.NewTimer(c.Settle)
	defer stall.Stop()
	start := time.Now()
	published := 0
	for published < c.Events {
		n := min(batch, c.Events-published)
		stall.Reset(c.Settle)
	flow:
		for window >= 0 {
			s := slowest()
			if s < 0 {
				return nil, waitFollowers(ctx, fs, c.Settle)
			}
			if int64(published+n)-s <= int64(window) {
				break
			}
			select {
			case <-signal:
			case <-stall.C:
				break flow
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if _, err := pub.batch(ctx, n); err != nil {
			return nil, err
		}
		published += n
	}
	pubEnd := time.Now()
	if err := waitFollowers(ctx, fs, c.Settle); err != nil {
		return nil, err
	}
	end := pubEnd
	for _, f := range fs {
		if f.doneAt.After(end) {
			end = f.doneAt
		}
	}
	secs := end.Sub(start).Seconds()
	r := &Result{
		Target: e.t.name(), Seconds: secs, Window: window, Batch: batch,
		DeliveriesPerSec: float64(c.Subscribers) * float64(c.Events) / secs,
		PublishedPerSec:  float64(c.Events) / pubEnd.Sub(start).Seconds(),
		CPU:              cpu.stop(float64(c.Subscribers) * float64(c.Events)),
		Check:            checkAll(fs),
	}
	if rss != nil {
		r.Memory = &Memory{PID: rss.pid, BeforeKiB: before, PeakKiB: rss.Stop()}
		r.Memory.AfterKiB, _ = readRSS(rss.pid)
	}
	return r, nil
}

func latency(ctx context.Context, e *env) (*Result, error) {
	c := e.c
	fs, pubs, stop, err := e.openStreams(ctx, c.Publishers, func(path string) func(int) *follower {
		mk := followerAt(e, path, "", uint64(c.Events), nil, 0, true)
		return func(i int) *follower {
			f := mk(i)
			f.lat = make([]int64, 0, c.Events)
			return f
		}
	})
	if err != nil {
		return nil, err
	}
	defer stop()
	e.logf("%s: publishing %d events a second for %v over %d connections", e.t.name(), c.Rate, c.Duration, len(pubs))
	interval := time.Second / time.Duration(c.Rate)
	cpu := startCPU(e.serverPID())
	start := time.Now().Add(20 * time.Millisecond)
	lags, err := openLoop(ctx, pubs, c.Events, start, interval)
	if err != nil {
		return nil, err
	}
	end := time.Now()
	if err := waitFollowers(ctx, fs, c.Settle); err != nil {
		return nil, err
	}
	var all []int64
	for _, f := range fs {
		all = append(all, f.lat...)
	}
	return &Result{
		Target: e.t.name(), Seconds: end.Sub(start).Seconds(), Publishers: len(pubs),
		PublishedPerSec: float64(c.Events) / end.Sub(start).Seconds(),
		Latency:         percentiles(all), PublisherLag: percentiles(lags),
		CPU:   cpu.stop(float64(c.Subscribers) * float64(c.Events)),
		Check: checkAll(fs),
	}, nil
}

// openLoop publishes n single events, event i due at start + i×interval,
// and returns how late each one was sent (its publisher lag, in
// nanoseconds, by event). It is open-loop: an event is sent as soon as it
// is due on whichever of pubs is free, without waiting for the replies to
// the events before it, the way many clients publishing at once would. An
// event that finds every connection still waiting for a reply waits for
// the first one free, and that wait is its lag. Each event carries its due
// time, so latency is measured from when it was due, not from when it was
// sent. The first error stops every connection and is returned.
func openLoop(ctx context.Context, pubs []publisher, n int, start time.Time, interval time.Duration) ([]int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lags := make([]int64, n)
	errs := make([]error, len(pubs))
	// The events are handed out in due order: a connection that is free
	// takes the next one and waits for its due time.
	var next atomic.Int64
	var wg sync.WaitGroup
	for k, p := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			timer := time.NewTimer(time.Hour)
			defer timer.Stop()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				due := start.Add(time.Duration(i) * interval)
				if d := time.Until(due); d > 0 {
					timer.Reset(d)
					select {
					case <-timer.C:
					case <-ctx.Done():
						errs[k] = ctx.Err()
						return
					}
				}
				lags[i] = int64(time.Since(due))
				if _, err := p.one(ctx, due.UnixNano()); err != nil {
					errs[k] = err
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	// A connection stopped by another's failure reports the failure, not
	// its own cancellation.
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return nil, err
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return lags, nil
}

func idle(ctx context.Context, e *env) (*Result, error) {
	c := e.c
	pid := e.t.pid()
	if pid == 0 {
		return nil, errors.New("bench: idle needs the daemon's process id to read its memory: pass --pid (the socket's peer is unknown under socket activation or over TCP)")
	}
	per := e.t.limits().MaxSubscribers
	if per <= 0 {
		per = c.Subscribers
	}
	// Spread the streams over as many sessions as the per-bus limit needs.
	var paths []string
	for len(paths)*per < c.Subscribers {
		p, err := e.t.newSession(ctx, 0)
		if err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	// The baseline is taken right before the streams open, once the RSS
	// has settled: a warm daemon may still be returning memory that
	// earlier work freed, which would otherwise count against the streams.
	before, err := settledRSS(ctx, pid)
	if err != nil {
		return nil, err
	}
	e.logf("%s: opening %d idle %s streams over %d sessions", e.t.name(), c.Subscribers, c.Transport, len(paths))
	rss := sampleRSS(pid, 100*time.Millisecond)
	fs, err := startFollowers(ctx, c.Subscribers, 32, func(i int) *follower {
		return followerAt(e, paths[i%len(paths)], "", 0, nil, 0, false)(i)
	})
	if err != nil {
		rss.Stop()
		return nil, err
	}
	defer stopFollowers(fs)
	e.logf("%s: holding them for %v", e.t.name(), c.Duration)
	t := time.NewTimer(c.Duration)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		rss.Stop()
		return nil, ctx.Err()
	}
	after, err := readRSS(pid)
	peak := rss.Stop()
	if err != nil {
		return nil, err
	}
	for _, f := range fs {
		select {
		case <-f.done:
			if f.err != nil {
				return nil, f.err
			}
			return nil, errors.New("bench: an idle stream ended")
		default:
		}
	}
	m := &Memory{PID: pid, BeforeKiB: before, AfterKiB: after, PeakKiB: peak}
	m.PerStreamKiB, m.Note = perStream(before, after, c.Subscribers)
	return &Result{
		Target: e.t.name(), Seconds: c.Duration.Seconds(), Memory: m,
		Check: Check{Subscribers: c.Subscribers},
	}, nil
}

func replay(ctx context.Context, e *env) (*Result, error) {
	c := e.c
	ring := e.t.limits().RingSize
	if ring <= 0 {
		return nil, errors.New("bench: the daemon reports no ring size")
	}
	path, err := e.t.newSession(ctx, 0)
	if err != nil {
		return nil, err
	}
	pub, err := e.t.publisher(ctx, path, c.Size)
	if err != nil {
		return nil, err
	}
	defer pub.Close()
	e.logf("%s: filling the ring: %d events of %d bytes", e.t.name(), ring, c.Size)
	var base uint64
	for n := 0; n < ring; {
		b := min(c.Batch, ring-n)
		last, err := pub.batch(ctx, b)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			base = last - uint64(b)
		}
		n += b
	}
	e.logf("%s: %d subscribers resume from %d, one after another", e.t.name(), c.Repeat, base)
	var times []int64
	var check Check
	start := time.Now()
	for range c.Repeat {
		cursor := base
		f := &follower{
			t: e.t, o: streamOptions{transport: c.Transport, path: path, cursor: &cursor},
			n: uint64(ring), untilReplayed: true,
		}
		t0 := time.Now()
		if err := startFollower(ctx, f); err != nil {
			return nil, err
		}
		if err := waitFollowers(ctx, []*follower{f}, c.Settle); err != nil {
			return nil, err
		}
		if f.replayed != ring {
			return nil, fmt.Errorf("bench: stream:replayed says %d events, want the ring's %d", f.replayed, ring)
		}
		times = append(times, int64(f.replayedAt.Sub(t0)))
		check.add(f.result())
	}
	return &Result{
		Target: e.t.name(), Seconds: time.Since(start).Seconds(),
		Replay: percentiles(times), ReplayedEvents: ring, Check: check,
	}, nil
}

func publish(ctx context.Context, e *env) (*Result, error) {
	c := e.c
	path, err := e.t.newSession(ctx, 0)
	if err != nil {
		return nil, err
	}
	fs, err := startFollowers(ctx, c.Subscribers, 1, followerAt(e, path, "", uint64(c.Events), nil, 0, false))
	if err != nil {
		return nil, err
	}
	defer stopFollowers(fs)
	pubs := make([]publisher, c.Publishers)
	for i := range pubs {
		if pubs[i], err = e.t.publisher(ctx, path, c.Size); err != nil {
			return nil, err
		}
		defer pubs[i].Close()
	}
	e.logf("%s: %d single-event publish requests over %d connections", e.t.name(), c.Events, c.Publishers)
	rtts := make([][]int64, c.Publishers)
	acked := make([][]uint64, c.Publishers) // the ids the replies gave
	errs := make([]error, c.Publishers)
	var next atomic.Int64
	var wg sync.WaitGroup
	cpu := startCPU(e.serverPID())
	start := time.Now()
	for i, p := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(c.Events) {
				t0 := time.Now()
				id, err := p.one(ctx, 0)
				if err != nil {
					errs[i] = err
					return
				}
				rtts[i] = append(rtts[i], int64(time.Since(t0)))
				acked[i] = append(acked[i], id)
			}
		}()
	}
	wg.Wait()
	end := time.Now()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := waitFollowers(ctx, fs, c.Settle); err != nil {
		return nil, err
	}
	var all []int64
	for _, r := range rtts {
		all = append(all, r...)
	}
	secs := end.Sub(start).Seconds()
	check := checkAll(fs)
	if c.Subscribers == 0 {
		check = checkAcks(acked, uint64(c.Events))
	}
	return &Result{
		Target: e.t.name(), Seconds: secs, RequestsPerSec: float64(c.Events) / secs, Publishers: c.Publishers,
		PublishedPerSec: float64(c.Events) / secs, Requests: percentiles(all), Check: check,
		CPU: cpu.stop(float64(c.Events)),
	}, nil
}

// checkAcks is publish's check without a subscriber: every request was
// acknowledged with an id of its own, n ids with no hole (a reply's id
// given twice is a duplicate, and a hole an event lost).
func checkAcks(acked [][]uint64, n uint64) Check {
	var ids []uint64
	for _, a := range acked {
		ids = append(ids, a...)
	}
	slices.Sort(ids)
	c := Check{Expected: n}
	for i, id := range ids {
		if i > 0 && id == ids[i-1] {
			c.Duplicates++
			continue
		}
		c.Received++
	}
	if len(ids) > 0 && ids[len(ids)-1]-ids[0]+1 != c.Received {
		c.Lost = ids[len(ids)-1] - ids[0] + 1 - c.Received
	}
	if c.Received < n {
		c.Lost = max(c.Lost, n-c.Received)
	}
	return c
}
