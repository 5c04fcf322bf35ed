package daemontest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/localbus/localbus/bus"
)

// Transport is how a Follower reads its stream.
type Transport string

// The transports of SPEC §3.
const (
	SSE       Transport = "sse"
	WebSocket Transport = "ws"
)

// An End is how one stream of a Follower ended.
type End struct {
	// Reason is the reason of the stream's stream:closed frame, "" if the
	// stream ended without one.
	Reason string
	// Code is the WebSocket close code, -1 for SSE or when the connection
	// ended without a close frame.
	Code websocket.StatusCode
	// Err is the error that ended the stream, nil when it ended cleanly
	// (SSE: end of body; WebSocket: a close frame).
	Err error
}

func (e End) String() string {
	if e.Code == -1 {
		return fmt.Sprintf("%s (err %v)", e.Reason, e.Err)
	}
	return fmt.Sprintf("%s/%d (err %v)", e.Reason, e.Code, e.Err)
}

// A Follower is a client that follows one stream of a daemon and, when the
// daemon ends it, resumes it with its last id the way SPEC §2.3 and §8
// expect clients to: Last-Event-ID on SSE, ?since= on WebSocket. It records
// every event id it gets, how each stream ended and anything a client would
// not expect (a gap, an id out of order, a refused connection).
//
// Start it with Follow; it runs in a goroutine of its own until Stop, which
// the test that started it also calls when it ends. Its methods are safe
// for concurrent use.
type Follower struct {
	// Name identifies the follower in test failures.
	Name string

	d         *Daemon
	transport Transport
	path      string
	resume    bool

	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex // guards the fields below
	ids      []uint64
	types    []string       // of every event, in order
	envs     []bus.Envelope // every event, in order
	ends     []End
	streams  int // streams that got stream:ready
	problems []string
}

// FollowOptions configure Follow.
type FollowOptions struct {
	// Transport is SSE or WebSocket; "" means SSE.
	Transport Transport
	// Since is the cursor of the first stream; nil means none (live only).
	Since *uint64
	// Once stops the follower when its first stream ends, instead of
	// resuming.
	Once bool
}

// Follow starts a Follower of the stream at path ("/api/v1/sessions/s/events"
// for SSE, ".../ws" for WebSocket) and stops it when the test ends.
func (d *Daemon) Follow(t testing.TB, name, path string, opts FollowOptions) *Follower {
	ctx, cancel := context.WithCancel(context.Background())
	f := &Follower{
		Name: name, d: d, transport: opts.Transport, path: path, resume: !opts.Once,
		cancel: cancel, done: make(chan struct{}),
	}
	if f.transport == "" {
		f.transport = SSE
	}
	go f.run(ctx, opts.Since)
	t.Cleanup(f.Stop)
	return f
}

// Stop stops the follower and waits for its goroutine. It is idempotent.
func (f *Follower) Stop() {
	f.cancel()
	<-f.done
}

// Done is closed when the follower has stopped: after Stop, or after its
// only stream ended when FollowOptions.Once is set.
func (f *Follower) Done() <-chan struct{} { return f.done }

// IDs returns the event ids received so far, in order.
func (f *Follower) IDs() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]uint64(nil), f.ids...)
}

// Envelopes returns every event received, decoded, in order.
func (f *Follower) Envelopes() []bus.Envelope {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]bus.Envelope(nil), f.envs...)
}

// Types returns the types of the events received so far, in order.
func (f *Follower) Types() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.types...)
}

// Last returns the last event id received, 0 for none.
func (f *Follower) Last() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.ids) == 0 {
		return 0
	}
	return f.ids[len(f.ids)-1]
}

// Ends returns how each stream that has ended so far ended.
func (f *Follower) Ends() []End {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]End(nil), f.ends...)
}

// Streams returns how many streams have begun (got stream:ready).
func (f *Follower) Streams() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.streams
}

// Problems returns what the follower saw that a client would not expect.
func (f *Follower) Problems() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.problems...)
}

func (f *Follower) problem(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.problems = append(f.problems, fmt.Sprintf(format, args...))
}

func (f *Follower) run(ctx context.Context, since *uint64) {
	defer close(f.done)
	for {
		cursor := since
		if last := f.Last(); last > 0 {
			cursor = &last
		}
		end := f.stream(ctx, cursor)
		if ctx.Err() != nil {
			return
		}
		f.mu.Lock()
		f.ends = append(f.ends, end)
		f.mu.Unlock()
		if !f.resume {
			return
		}
		if end.Reason == "" {
			// Not ended by the daemon: a refused or broken connection.
			// Retry after a pause, as a client would.
			f.problem("stream ended without stream:closed: %v", end)
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// stream runs one stream from cursor until it ends or ctx is done.
func (f *Follower) stream(ctx context.Context, cursor *uint64) End {
	if f.transport == WebSocket {
		return f.streamWS(ctx, cursor)
	}
	return f.streamSSE(ctx, cursor)
}

func (f *Follower) streamSSE(ctx context.Context, cursor *uint64) End {
	end := End{Code: -1}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://localbus"+f.path, nil)
	if err != nil {
		end.Err = err
		return end
	}
	if cursor != nil {
		req.Header.Set("Last-Event-ID", strconv.FormatUint(*cursor, 10))
	}
	resp, err := f.d.Client().Do(req)
	if err != nil {
		end.Err = err
		return end
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		end.Err = fmt.Errorf("GET %s: %s: %s", f.path, resp.Status, b)
		return end
	}
	br := bufio.NewReader(resp.Body)
	var data []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if !errors.Is(err, io.EOF) || line != "" || len(data) > 0 {
				end.Err = err
			}
			return end
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if len(data) > 0 {
				f.frame(&end, []byte(strings.Join(data, "\n")))
				data = data[:0]
			}
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
}

func (f *Follower) streamWS(ctx context.Context, cursor *uint64) End {
	end := End{Code: -1}
	path := f.path
	if cursor != nil {
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		path += sep + "since=" + strconv.FormatUint(*cursor, 10)
	}
	c, resp, err := websocket.Dial(ctx, "ws://localbus"+path, &websocket.DialOptions{HTTPClient: f.d.Client()})
	if err != nil {
		if resp != nil {
			err = fmt.Errorf("%w (%s)", err, resp.Status)
		}
		end.Err = err
		return end
	}
	defer c.CloseNow()
	c.SetReadLimit(-1)
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			end.Code = websocket.CloseStatus(err)
			if end.Code == -1 {
				end.Err = err
			}
			return end
		}
		f.frame(&end, b)
	}
}

// frame records one envelope of a stream.
func (f *Follower) frame(end *End, b []byte) {
	var env bus.Envelope
	if err := json.Unmarshal(b, &env); err != nil {
		f.problem("undecodable frame %q: %v", b, err)
		return
	}
	if end.Reason != "" {
		f.problem("frame after stream:closed: %s", b)
	}
	switch env.Type {
	case bus.TypeReady:
		f.mu.Lock()
		f.streams++
		f.mu.Unlock()
	case bus.TypeClosed:
		var data struct {
			Reason string `json:"reason"`
		}
		json.Unmarshal(env.Data, &data)
		end.Reason = data.Reason
	case bus.TypeGap, bus.TypeLagged, bus.TypeError:
		f.problem("unexpected %s", b)
	case bus.TypeReplayed, bus.TypeSlow:
	default:
		if env.ID == 0 {
			f.problem("event without an id: %s", b)
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if n := len(f.ids); n > 0 && env.ID <= f.ids[n-1] {
			f.problems = append(f.problems, fmt.Sprintf("id %d after %d", env.ID, f.ids[n-1]))
		}
		f.ids = append(f.ids, env.ID)
		f.types = append(f.types, env.Type)
		f.envs = append(f.envs, env)
	}
}
