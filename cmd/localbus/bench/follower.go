package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// follower is one subscriber of a scenario. It opens a stream, checks the
// events it receives against the range it expects, and reopens the stream
// with Last-Event-ID when the server ends it, as a real client would.
type follower struct {
	t       target
	o       streamOptions
	n       uint64        // events expected after the stream's start
	signal  chan struct{} // progress, to the publisher: capacity 1, never blocks
	every   int64         // signal every this many deliveries
	latency bool          // keep publish-to-deliver samples
	// untilReplayed ends the follower at stream:replayed.
	untilReplayed bool

	ready     chan struct{} // closed at the first stream:ready
	done      chan struct{} // closed when loop returns
	delivered atomic.Int64  // new due events received

	mu     sync.Mutex // guards st, which Close closes from another goroutine
	st     stream
	closed atomic.Bool // Close was called: loop does not resume

	// Written by loop; read after done is closed.
	seq        *sequence
	last       uint64 // the highest id received, the resume cursor
	doneAt     time.Time
	replayedAt time.Time
	replayed   int
	lat        []int64
	lagged     int
	slow       int
	gaps       int
	reconnects int
	err        error
}

// readyData is what the bench reads of stream:ready.
type readyData struct {
	Cursor *uint64 `json:"cursor"`
	LastID uint64  `json:"lastId"`
}

// startFollower opens the follower's stream and waits for stream:ready.
// The follower runs until it has received n events (or stream:replayed,
// with untilReplayed), ctx is done, or it fails.
func startFollower(ctx context.Context, f *follower) error {
	f.ready, f.done = make(chan struct{}), make(chan struct{})
	if f.every <= 0 {
		f.every = 1 << 62
	}
	st, err := f.t.open(ctx, f.o)
	if err != nil {
		close(f.done)
		return err
	}
	f.st = st
	go f.loop(ctx)
	select {
	case <-f.ready:
		return nil
	case <-f.done:
		// A short stream (untilReplayed) may be over by now, having been
		// ready: both channels are closed and select picks either.
		select {
		case <-f.ready:
			return nil
		default:
		}
		if f.err == nil {
			f.err = errors.New("bench: the stream ended before stream:ready")
		}
		return f.err
	case <-ctx.Done():
		f.Close()
		<-f.done
		return ctx.Err()
	}
}

// Close ends the follower's stream; loop then returns.
func (f *follower) Close() {
	f.closed.Store(true)
	f.mu.Lock()
	if f.st != nil {
		f.st.Close()
	}
	f.mu.Unlock()
}

func (f *follower) notify() {
	select {
	case f.signal <- struct{}{}:
	default:
	}
}

func (f *follower) loop(ctx context.Context) {
	defer close(f.done)
	defer f.notify()
	stop := context.AfterFunc(ctx, f.Close)
	defer stop()
	for {
		err := f.st.run(f.handle)
		f.st.Close()
		switch {
		case errors.Is(err, errStop), f.closed.Load() && ctx.Err() == nil:
			return
		case ctx.Err() != nil:
			f.err = ctx.Err()
			return
		case f.err != nil:
			return
		case f.seq == nil:
			f.err = fmt.Errorf("bench: the stream ended before stream:ready: %v", err)
			return
		}
		// The server ended the stream (stream:lagged, stream:closed) or the
		// connection dropped: resume after the last id received.
		f.reconnects++
		cursor := max(f.last, f.seq.base)
		o := f.o
		o.cursor = &cursor
		st, err := f.t.open(ctx, o)
		if err != nil {
			f.err = fmt.Errorf("bench: resuming after id %d: %w", cursor, err)
			return
		}
		f.mu.Lock()
		f.st = st
		f.mu.Unlock()
		if f.closed.Load() {
			st.Close()
		}
	}
}

func (f *follower) handle(fr *frame) error {
	switch fr.kind {
	case kindEvent:
		if f.seq == nil {
			f.err = errors.New("bench: an event before stream:ready")
			return f.err
		}
		f.last = max(f.last, fr.id)
		if !f.seq.add(fr.id) {
			if fr.id == f.seq.base+f.seq.n && !f.untilReplayed {
				f.doneAt = fr.at // the last event, again
				return errStop
			}
			return nil
		}
		if f.latency {
			f.lat = append(f.lat, fr.at.UnixNano()-fr.due)
		}
		d := f.delivered.Add(1)
		// The last event ends the wait: with everything else received, or
		// whatever is missing is lost (ids only ever increase).
		if (f.seq.complete() || fr.id == f.seq.base+f.seq.n) && !f.untilReplayed {
			f.doneAt = fr.at
			return errStop
		}
		if d%f.every == 0 {
			f.notify()
		}
	case kindReady:
		if f.seq != nil {
			return nil // a resumed stream
		}
		var rd readyData
		if err := fr.decode(&rd); err != nil {
			f.err = fmt.Errorf("bench: stream:ready: %v", err)
			return f.err
		}
		base := rd.LastID
		if f.o.cursor != nil {
			base = *f.o.cursor
		}
		f.seq = newSequence(base, f.n)
		close(f.ready)
	case kindReplayed:
		if f.replayedAt.IsZero() {
			var d struct {
				Count int `json:"replayedCount"`
			}
			fr.decode(&d)
			f.replayedAt, f.replayed = fr.at, d.Count
		}
		if f.untilReplayed {
			f.doneAt = fr.at
			return errStop
		}
	case kindLagged:
		f.lagged++
	case kindSlow:
		f.slow++
	case kindGap:
		f.gaps++
	case kindError:
		var d struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}
		fr.decode(&d)
		f.err = fmt.Errorf("bench: the server refused the stream: %s (%s)", d.Message, d.Code)
		return f.err
	}
	return nil
}

// result returns the follower's check; call it after done is closed.
func (f *follower) result() Check {
	var c Check
	if f.seq != nil {
		c = f.seq.result()
	} else {
		c = Check{Subscribers: 1, Expected: f.n, Lost: f.n}
	}
	c.Lagged, c.Slow, c.Gaps, c.Reconnects = f.lagged, f.slow, f.gaps, f.reconnects
	return c
}

// startFollowers starts n followers made by mk, at most parallel at a
// time. On error it closes the ones started and waits for them.
func startFollowers(ctx context.Context, n, parallel int, mk func(i int) *follower) ([]*follower, error) {
	fs := make([]*follower, n)
	errs := make([]error, n)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i := range n {
		fs[i] = mk(i)
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = startFollower(ctx, fs[i])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		stopFollowers(fs)
		return nil, err
	}
	return fs, nil
}

// stopFollowers closes every follower and waits for them.
func stopFollowers(fs []*follower) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
	for _, f := range fs {
		if f != nil {
			<-f.done
		}
	}
}

// waitFollowers waits until every follower is done or ctx is done, and
// returns the first follower error. Once no follower has received
// anything for settle (when not 0), it stops waiting: what is missing is
// lost, and the check says so.
func waitFollowers(ctx context.Context, fs []*follower, settle time.Duration) error {
	total := func() int64 {
		var n int64
		for _, f := range fs {
			n += f.delivered.Load()
		}
		return n
	}
	var tick <-chan time.Time
	if settle > 0 {
		t := time.NewTicker(settle)
		defer t.Stop()
		tick = t.C
	}
	last := total()
	for _, f := range fs {
	wait:
		for {
			select {
			case <-f.done:
				break wait
			case <-tick:
				if n := total(); n != last {
					last = n
					continue
				}
				stopFollowers(fs)
				break wait
			case <-ctx.Done():
				stopFollowers(fs)
				return fmt.Errorf("bench: subscribers still waiting for events: %w", ctx.Err())
			}
		}
	}
	for _, f := range fs {
		if f.err != nil {
			return f.err
		}
	}
	return nil
}
