package daemon_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/daemon/daemontest"
	"github.com/localbus/localbus/ipc/wire"
)

// ackReader is a reader of session "crash" through an explicit consumer
// of its own that acknowledges every event as it handles it: on SSE with
// a POST carrying the stream's epoch, waiting for each answer; on the
// WebSocket with {"op":"ack"}, without waiting (the answers come between
// the frames). It checks every stream it opens against what it knows:
// the consumer starts at an id no lower than the last ack the daemon
// answered and no higher than the last it sent, and the stream then
// carries every event after that id, in order, with no gap.
type ackReader struct {
	name string
	ws   bool

	mu       sync.Mutex
	answered uint64          // the highest id the daemon answered an ack for
	sent     uint64          // the highest id acknowledged, answered or not
	seen     map[uint64]bool // every event id received
	streams  int
	problems []string
}

func (r *ackReader) problem(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.problems) < 20 {
		r.problems = append(r.problems, fmt.Sprintf(format, args...))
	}
}

// started checks where a stream of the consumer starts, from its
// stream:ready, and returns the id the next event must have.
func (r *ackReader) started(env bus.Envelope) (next uint64, epoch string, ok bool) {
	var rd bus.ReadyData
	if err := json.Unmarshal(env.Data, &rd); err != nil || rd.Consumer == nil || rd.Cursor == nil {
		r.problem("stream:ready without a consumer: %s", env.Data)
		return 0, "", false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.streams++
	if a := rd.Consumer.AckedID; a < r.answered || a > r.sent || *rd.Cursor != a {
		r.problems = append(r.problems, fmt.Sprintf("stream %d starts after %d (cursor %d); answered acks reach %d, sent ones %d",
			r.streams, a, *rd.Cursor, r.answered, r.sent))
	}
	return rd.Consumer.AckedID + 1, rd.Epoch, true
}

// got records event id, which must be want.
func (r *ackReader) got(id, want uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id != want {
		r.problems = append(r.problems, fmt.Sprintf("stream %d: event %d where %d was due", r.streams, id, want))
	}
	r.seen[id] = true
}

func (r *ackReader) acked(id uint64, answered bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = max(r.sent, id)
	if answered {
		r.answered = max(r.answered, id)
	}
}

// stream reads one stream until it ends (the daemon died) or ctx is done,
// or until it has handled event until, when not 0.
func (r *ackReader) stream(ctx context.Context, d *daemontest.Daemon, until uint64) {
	path := wire.SessionEventsPath("crash")
	if r.ws {
		path = wire.SessionWSPath("crash")
	}
	path += "?consumer=" + r.name + "&ack=explicit"
	if r.ws {
		r.streamWS(ctx, d, path, until)
	} else {
		r.streamSSE(ctx, d, path, until)
	}
}

func (r *ackReader) streamSSE(ctx context.Context, d *daemontest.Daemon, path string, until uint64) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://localbus"+path, nil)
	resp, err := d.Client().Do(req)
	if err != nil {
		return // the daemon is gone
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		r.problem("GET %s: %s %s", path, resp.Status, b)
		return
	}
	var next uint64
	var epoch string
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		data, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "data: ")
		if !ok {
			continue
		}
		var env bus.Envelope
		if err := json.Unmarshal([]byte(data), &env); err != nil {
			r.problem("undecodable frame %q", data)
			return
		}
		switch {
		case env.Type == bus.TypeReady:
			if next, epoch, ok = r.started(env); !ok {
				return
			}
		case env.ID > 0:
			r.got(env.ID, next)
			next = env.ID + 1
			body := fmt.Sprintf(`{"id":%d,"epoch":%q}`, env.ID, epoch)
			r.acked(env.ID, false)
			status, b, err := d.TryDo(http.MethodPost, wire.ConsumerAckPath("crash", r.name), body)
			if err != nil || status == http.StatusServiceUnavailable {
				return // the daemon died before answering
			}
			var reply wire.AckReply
			if status != http.StatusOK || json.Unmarshal(b, &reply) != nil || reply.AckedID != env.ID {
				r.problem("ack %d: %d %s", env.ID, status, b)
				return
			}
			r.acked(env.ID, true)
			if env.ID == until {
				return
			}
		case env.Type == bus.TypeGap || env.Type == bus.TypeLagged:
			r.problem("%s %s", env.Type, env.Data)
		}
	}
}

func (r *ackReader) streamWS(ctx context.Context, d *daemontest.Daemon, path string, until uint64) {
	c, _, err := websocket.Dial(ctx, "ws://localbus"+path, &websocket.DialOptions{HTTPClient: d.Client()})
	if err != nil {
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(-1)
	var next uint64
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			return
		}
		if strings.HasPrefix(string(b), `{"op":`) {
			var reply struct {
				Op      string
				ID      uint64
				Message string
			}
			if json.Unmarshal(b, &reply) != nil || reply.Op != "acked" {
				r.problem("control reply %s", b)
				return
			}
			r.acked(reply.ID, true)
			if reply.ID == until {
				return
			}
			continue
		}
		var env bus.Envelope
		if err := json.Unmarshal(b, &env); err != nil {
			r.problem("undecodable frame %q", b)
			return
		}
		switch {
		case env.Type == bus.TypeReady:
			var ok bool
			if next, _, ok = r.started(env); !ok {
				return
			}
		case env.ID > 0:
			r.got(env.ID, next)
			next = env.ID + 1
			r.acked(env.ID, false)
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := c.Write(wctx, websocket.MessageText, []byte(`{"op":"ack","id":`+strconv.FormatUint(env.ID, 10)+`}`))
			cancel()
			if err != nil {
				return
			}
		case env.Type == bus.TypeGap || env.Type == bus.TypeLagged:
			r.problem("%s %s", env.Type, env.Data)
		}
	}
}

// TestKillNineUnderLoadLosesNoAcknowledgedConsumerPosition: four readers
// (two SSE, two WebSocket) follow a session through explicit consumers of
// their own, acknowledging every event as they go, while two publishers
// keep publishing and the daemon (fsync always) is killed with SIGKILL
// again and again, and once stopped cleanly. After each restart every
// reader's stream starts after its last answered ack (never before it,
// never past what it sent) and carries every event after it, in order; in
// the end every reader has seen every event.
func TestKillNineUnderLoadLosesNoAcknowledgedConsumerPosition(t *testing.T) {
	dir := t.TempDir()
	opts := daemontest.Options{Dir: dir, Durable: true, Args: []string{"--fsync", "always", "--ring-size", "100000"}}
	readers := make([]*ackReader, 4)
	for i := range readers {
		readers[i] = &ackReader{name: fmt.Sprintf("r%d", i), ws: i%2 == 1, seen: map[uint64]bool{}}
	}
	var published sync.Map // id → true, every id a publish answered
	var last uint64
	var lastMu sync.Mutex
	publish := func(d *daemontest.Daemon, k int) bool {
		var b strings.Builder
		b.WriteString("[")
		for i := range 5 {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"type":"crash:ev","data":{"k":%d,"i":%d}}`, k, i)
		}
		b.WriteString("]")
		status, body, err := d.TryDo(http.MethodPost, wire.SessionEventsPath("crash"), b.String())
		if err != nil || status == http.StatusServiceUnavailable {
			return false
		}
		var r wire.PublishReply
		if status != http.StatusOK || json.Unmarshal(body, &r) != nil {
			t.Errorf("publish: %d %s", status, body)
			return false
		}
		for _, id := range r.IDs {
			published.Store(id, true)
		}
		lastMu.Lock()
		last = max(last, r.LastID)
		lastMu.Unlock()
		return true
	}
	rng := rand.New(rand.NewPCG(3, 4))
	const rounds = 7
	k := 0
	for round := range rounds {
		d := daemontest.Start(t, opts)
		if round == 0 && !publish(d, -1) { // the session, before its readers
			t.Fatal("the first publish failed")
		}
		ctx, cancel := context.WithCancel(context.Background())
		sentBefore := map[string]uint64{}
		for _, r := range readers {
			r.mu.Lock()
			sentBefore[r.name] = r.sent
			r.mu.Unlock()
		}
		var wg sync.WaitGroup
		for _, r := range readers {
			wg.Go(func() { r.stream(ctx, d, 0) })
		}
		for p := range 2 {
			wg.Go(func() {
				for i := 0; ; i++ {
					if ctx.Err() != nil || !publish(d, k*1000+p*100000+i) {
						return
					}
				}
			})
		}
		// Once every reader has a stream of this run and has handled an
		// event in it, crash at a random moment.
		bustest.Eventually(t, 30*time.Second, "every reader to handle an event of this run", func() bool {
			for _, r := range readers {
				r.mu.Lock()
				ok := r.streams > round && r.sent > sentBefore[r.name]
				r.mu.Unlock()
				if !ok {
					return false
				}
			}
			return true
		})
		<-time.After(time.Duration(rng.IntN(500)) * time.Millisecond)
		if round == rounds-1 {
			d.Stop(t) // one clean stop too
		} else {
			d.Kill(t)
		}
		cancel()
		wg.Wait()
		k++
		if t.Failed() {
			t.FailNow()
		}
	}
	// The last run: every reader catches up to the session's last event
	// (which may follow the last answered publish) and stops.
	d := daemontest.Start(t, opts)
	status, body := d.Do(t, http.MethodGet, wire.SessionPath("crash"), "")
	var info wire.SessionInfo
	if status != http.StatusOK || json.Unmarshal(body, &info) != nil || info.LastID < last {
		t.Fatalf("GET session = %d %s; want lastId at least %d", status, body, last)
	}
	last = info.LastID
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for _, r := range readers {
		if r.answered < last {
			wg.Go(func() { r.stream(ctx, d, last) })
		}
	}
	wg.Wait()
	n := 0
	published.Range(func(any, any) bool { n++; return true })
	for _, r := range readers {
		for _, p := range r.problems {
			t.Errorf("%s: %s", r.name, p)
		}
		missing := 0
		for id := uint64(1); id <= last; id++ {
			if !r.seen[id] {
				missing++
			}
		}
		if missing > 0 || r.answered != last {
			t.Errorf("%s (ws %v): %d of %d events never seen, last answered ack %d", r.name, r.ws, missing, last, r.answered)
		}
		t.Logf("%s (ws %v): %d streams, %d events, acknowledged to %d", r.name, r.ws, r.streams, len(r.seen), r.answered)
	}
	if uint64(n) > last || n == 0 {
		t.Errorf("%d ids answered to publishers, last id %d", n, last)
	}
	t.Logf("%d events published over %d kills and a clean stop", last, rounds-1)
}
