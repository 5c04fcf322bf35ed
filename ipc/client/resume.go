package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/coder/websocket"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/ipc/wire"
)

// This file is the reconnection policy of a Stream (see its doc comment):
// what each way a connection ends means, how long to wait, and what ends
// the stream for good.

// reconnect waits until retryAt and connects, backing off after each
// failure, until it connects, ctx or the stream is done, or an error ends
// the stream for good.
func (s *Stream) reconnect(ctx context.Context) error {
	for {
		if wait := time.Until(s.retryAt); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-s.ctx.Done():
				t.Stop()
				return s.stopped()
			}
		}
		err := s.connect(ctx)
		switch {
		case err == nil:
			return nil
		case s.ctx.Err() != nil:
			return s.stopped()
		case ctx.Err() != nil:
			return ctx.Err()
		}
		if err := s.classify(err, false); err != nil {
			s.err = err
			return err
		}
		s.failures++
		d := s.backoff()
		s.retryAt = time.Now().Add(d)
		s.notify(err, d)
	}
}

// classify returns the error that ends the stream for good, or nil when a
// failed connection attempt is worth retrying. Every error of the first
// attempt is final.
func (s *Stream) classify(err error, first bool) error {
	var ae *APIError
	if errors.As(err, &ae) {
		switch {
		case ae.Code == wire.CodeConsumerExists && !first && (s.query.Has(wire.ParamSince) || s.query.Has(wire.ParamSinceTime)):
			// An earlier attempt created the consumer, and its answer was
			// lost: it starts where it is now.
			s.consumerStarted()
			return nil
		case ae.Status == http.StatusNotFound && s.opts.Session != "":
			if (s.mayRestart && !first) || s.waitsFor(err) {
				return nil
			}
			return &EndedError{Reason: "not_found", Session: s.opts.Session, Err: ae}
		case ae.Status == http.StatusRequestTimeout, ae.Status == http.StatusTooManyRequests, ae.Status >= 500:
			if first {
				return ae
			}
			return nil
		case ae.Status >= 400:
			return ae
		}
	}
	if first {
		return err
	}
	return nil
}

// waitsFor reports whether err is a missing session that the stream waits
// for (StreamOptions.WaitForSession). A stream that starts live and finds
// no session then starts from the session's beginning when it appears:
// every event of it is published after the stream began.
func (s *Stream) waitsFor(err error) bool {
	var ae *APIError
	if !s.opts.WaitForSession || s.opts.Session == "" || !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
		return false
	}
	s.mu.Lock()
	if !s.hasCursor {
		s.cursor, s.hasCursor = 0, true
	}
	s.mu.Unlock()
	return true
}

// backoff returns the wait before the next attempt: a random time between
// half and all of base·2^(failures−1), at most MaxBackoff.
func (s *Stream) backoff() time.Duration {
	d := s.base
	for i := 1; i < s.failures && d < s.opts.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, s.opts.MaxBackoff)
	return jitter(d/2, d)
}

// jitter returns a random duration in [lo, hi].
func jitter(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + rand.N(hi-lo+1)
}

func (s *Stream) notify(err error, wait time.Duration) {
	if s.opts.OnRetry != nil {
		s.opts.OnRetry(err, wait)
	}
}

// lost handles a connection that failed or closed without a terminal frame.
func (s *Stream) lost(err error) {
	s.drop()
	switch websocket.CloseStatus(err) {
	case websocket.StatusNormalClosure:
		s.err = &EndedError{Reason: "closed", Session: s.opts.Session, Err: err}
		return
	case websocket.StatusGoingAway:
		// Shutdown or reload, whose stream:closed went missing.
		s.mayRestart = true
		s.base, s.failures = minBackoff, 0
		s.retryAt = time.Now().Add(jitter(500*time.Millisecond, 1500*time.Millisecond))
		return
	case websocket.StatusTryAgainLater:
		s.base, s.failures = minBackoff, 0
		s.retryAt = time.Now().Add(jitter(0, laggedWait))
		return
	}
	// Unannounced: honour the retry: the daemon asked for.
	s.mayRestart = true
	s.base = s.retry
	s.failures++
	d := s.backoff()
	s.retryAt = time.Now().Add(d)
	s.notify(fmt.Errorf("client: connection lost: %w", err), d)
}

// apply updates the stream's state with a frame about to be returned.
func (s *Stream) apply(f Frame) {
	if !f.Reserved() {
		s.mu.Lock()
		s.cursor, s.hasCursor = f.ID, true
		s.mu.Unlock()
		return
	}
	switch f.Type {
	case bus.TypeReady:
		var rd bus.ReadyData
		if f.DecodeData(&rd) != nil {
			return
		}
		s.failures, s.mayRestart = 0, false
		s.mu.Lock()
		if s.opts.Consumer != "" && rd.Cursor != nil {
			// The daemon resumes a consumer's stream after its
			// acknowledged id, in the epoch the consumer had.
			s.cursor, s.hasCursor = *rd.Cursor, true
		} else if s.hasCursor && s.epoch != "" && rd.Epoch != s.epoch {
			// A new id sequence: nothing of it was received yet. The
			// daemon reports the epoch_reset gap and replays it all; were
			// the connection lost first, the next one asks for it all.
			s.cursor = 0
		}
		if !s.hasCursor && rd.Cursor != nil {
			// Live start: the bus's last id is a safe anchor, so events
			// published while reconnecting are not lost.
			s.cursor, s.hasCursor = *rd.Cursor, true
		}
		s.epoch = rd.Epoch
		s.mu.Unlock()
	case bus.TypeGap:
		var gd bus.GapData
		if f.DecodeData(&gd) == nil && gd.Reason == bus.GapEpochReset {
			s.mu.Lock()
			s.cursor = 0
			s.mu.Unlock()
		}
	case bus.TypeClosed:
		s.drop()
		var cd bus.ClosedData
		f.DecodeData(&cd)
		switch cd.Reason {
		case string(bus.EndSessionDeleted):
			s.err = &EndedError{Reason: cd.Reason, Session: s.opts.Session}
			return
		case string(bus.EndReplaced):
			s.err = &EndedError{Reason: cd.Reason, Session: s.opts.Session, Err: ErrReplaced}
			return
		}
		s.mayRestart = cd.Reason == string(bus.EndShutdown)
		s.base, s.failures = minBackoff, 0
		wait := time.Duration(cd.RetryMs) * time.Millisecond
		if wait <= 0 {
			wait = jitter(500*time.Millisecond, 1500*time.Millisecond)
		}
		s.retryAt = time.Now().Add(wait)
	case bus.TypeLagged:
		// Evicted as a slow reader; the missed events are in the ring.
		s.drop()
		s.base, s.failures = minBackoff, 0
		s.retryAt = time.Now().Add(jitter(0, laggedWait))
	case bus.TypeError:
		// Refused after the response began (the subscriber limit).
		s.drop()
		s.base = minBackoff
		s.failures++
		s.retryAt = time.Now().Add(s.backoff())
	}
}
