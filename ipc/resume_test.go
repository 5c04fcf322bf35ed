package ipc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/ipc/ipctest"
)

// follower is a client that keeps a stream of one session until it has
// every event up to total, dropping its connection after a random number of
// events and resuming from the last id it received.
type follower struct {
	srv     *ipctest.Server
	session string
	total   uint64
	rng     *rand.Rand

	got   []uint64 // every event id received, in order
	conns int      // connections opened
}

var errDone = errors.New("done")

// take checks one frame of a connection opened with cursor last(): the
// first must be stream:ready with that cursor; events must come exactly in
// id order; resume frames pass. It reports whether to drop the connection:
// after n events, on stream:lagged, or with errDone at the end.
func (f *follower) take(env bus.Envelope, first bool, cursor uint64, n *int, drop int) (bool, error) {
	if first {
		var rd bus.ReadyData
		if err := json.Unmarshal(env.Data, &rd); err != nil || env.Type != bus.TypeReady || rd.Cursor == nil || *rd.Cursor != cursor {
			return false, fmt.Errorf("connection %d opened with %s %s, want stream:ready with cursor %d", f.conns, env.Type, env.Data, cursor)
		}
		return false, nil
	}
	switch {
	case env.ID != 0:
		if want := f.last() + 1; env.ID != want {
			return false, fmt.Errorf("connection %d: got id %d after %d, want %d", f.conns, env.ID, f.last(), want)
		}
		var d struct{ N uint64 }
		if err := json.Unmarshal(env.Data, &d); err != nil || d.N != env.ID {
			return false, fmt.Errorf("event %d carries %s, want n %d", env.ID, env.Data, env.ID)
		}
		f.got = append(f.got, env.ID)
		if env.ID == f.total {
			return true, errDone
		}
		*n++
		return *n >= drop, nil
	case env.Type == bus.TypeReplayed, env.Type == bus.TypeSlow:
		return false, nil
	case env.Type == bus.TypeLagged:
		return true, nil // resume, as a client that fell behind does
	}
	return false, fmt.Errorf("connection %d: unexpected %s %s", f.conns, env.Type, env.Data)
}

func (f *follower) last() uint64 {
	if len(f.got) == 0 {
		return 0
	}
	return f.got[len(f.got)-1]
}

// followSSE resumes with Last-Event-ID (?since=0 the first time).
func (f *follower) followSSE(ctx context.Context) error {
	for {
		cursor := f.last()
		path, h := "/api/v1/sessions/"+f.session+"/events", header("Last-Event-ID", strconv.FormatUint(cursor, 10))
		if f.conns == 0 {
			path, h = path+"?since=0", nil
		}
		f.conns++
		st, err := f.srv.DialSSE(ctx, path, h)
		if err != nil {
			return err
		}
		err = func() error {
			defer st.Close()
			drop, n := 1+f.rng.IntN(150), 0
			for first := true; ; first = false {
				env, _, err := st.NextEnvelope(ctx)
				if err != nil {
					return fmt.Errorf("connection %d: %w", f.conns, err)
				}
				if stop, err := f.take(env, first, cursor, &n, drop); stop || err != nil {
					return err
				}
			}
		}()
		if err != nil {
			if errors.Is(err, errDone) {
				return nil
			}
			return err
		}
	}
}

// followWS resumes with ?since=, closing either abruptly or with a close
// handshake.
func (f *follower) followWS(ctx context.Context) error {
	for {
		cursor := f.last()
		f.conns++
		c, _, err := f.srv.DialWS(ctx, "/api/v1/sessions/"+f.session+"/ws?since="+strconv.FormatUint(cursor, 10), nil)
		if err != nil {
			return err
		}
		c.SetReadLimit(-1)
		err = func() error {
			graceful := f.rng.IntN(2) == 0
			defer func() {
				if graceful {
					c.Close(websocket.StatusNormalClosure, "")
				}
				c.CloseNow()
			}()
			drop, n := 1+f.rng.IntN(150), 0
			for first := true; ; first = false {
				env, _, err := ipctest.ReadEnvelope(ctx, c)
				if err != nil {
					return fmt.Errorf("connection %d: %w", f.conns, err)
				}
				if stop, err := f.take(env, first, cursor, &n, drop); stop || err != nil {
					return err
				}
			}
		}()
		if err != nil {
			if errors.Is(err, errDone) {
				return nil
			}
			return err
		}
	}
}

// TestResumeUnderLoad: while a publisher publishes 2000 events in batches,
// three SSE and two WebSocket clients keep dropping their connections after
// a random number of events and resuming with their last id. Each ends with
// every id exactly once, in order.
func TestResumeUnderLoad(t *testing.T) {
	srv := newServer(t)
	createSession(t, srv, "load")
	const total, batch = 2000, 10
	ctx, cancel := context.WithTimeout(context.Background(), 6*wait)
	defer cancel()

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; n < total; {
			var evs []ipctest.Event
			for range batch {
				n++
				evs = append(evs, ev("load:n", fmt.Sprintf(`{"n":%d}`, n)))
			}
			if _, err := srv.TryPublish(ctx, "load", nil, evs...); err != nil {
				errs <- fmt.Errorf("publisher: %w", err)
				cancel()
				return
			}
		}
	}()
	followers := make([]*follower, 5)
	for i := range followers {
		f := &follower{srv: srv, session: "load", total: total, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(i)))}
		followers[i] = f
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if i < 3 {
				err = f.followSSE(ctx)
			} else {
				err = f.followWS(ctx)
			}
			if err != nil {
				errs <- fmt.Errorf("client %d (after %d events, %d connections): %w", i, len(f.got), f.conns, err)
				cancel()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, f := range followers {
		if !slices.Equal(f.got, seq(1, total)) {
			t.Errorf("client %d got %d events, want each of 1 to %d once, in order", i, len(f.got), total)
		}
		if f.conns < 2 {
			t.Errorf("client %d used %d connection(s), want it to have resumed", i, f.conns)
		}
		t.Logf("client %d: %d connections", i, f.conns)
	}
	bustest.Eventually(t, wait, "every stream closed", func() bool {
		s, _ := srv.Hub.Session("load")
		return s.Bus.Stats().Subscribers == 0
	})
}
