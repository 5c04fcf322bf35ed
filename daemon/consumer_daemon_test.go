package daemon_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/daemon/daemontest"
	"github.com/localbus/localbus/ipc/wire"
)

// consumers returns GET …/consumers of session.
func consumers(t *testing.T, d *daemontest.Daemon, session string) []wire.Consumer {
	t.Helper()
	status, body := d.Do(t, http.MethodGet, wire.SessionConsumersPath(session), "")
	var list []wire.Consumer
	if status != http.StatusOK || json.Unmarshal(body, &list) != nil {
		t.Fatalf("GET consumers of %s = %d %s", session, status, body)
	}
	return list
}

// publishOne publishes one event to session and returns its id.
func publishOne(t *testing.T, d *daemontest.Daemon, session string) uint64 {
	t.Helper()
	status, body := d.Do(t, http.MethodPost, wire.SessionEventsPath(session), `{"type":"c:e","data":1}`)
	var r wire.PublishReply
	if status != http.StatusOK || json.Unmarshal(body, &r) != nil {
		t.Fatalf("publish to %s = %d %s", session, status, body)
	}
	return r.LastID
}

// readSSE opens the SSE stream at path and returns its first n frames,
// reserved ones included, then closes it.
func readSSE(t *testing.T, d *daemontest.Daemon, path string, n int) []bus.Envelope {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://localbus"+path, nil)
	resp, err := d.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	var out []bus.Envelope
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for len(out) < n && sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var env bus.Envelope
			if err := json.Unmarshal([]byte(data), &env); err != nil {
				t.Fatalf("frame %q: %v", data, err)
			}
			out = append(out, env)
		}
	}
	if len(out) < n {
		t.Fatalf("GET %s: %d frames before the end (%v), want %d", path, len(out), sc.Err(), n)
	}
	return out
}

// TestConsumersThroughTheDaemon: a takeover ends the first stream for
// good (stream:closed replaced without retryMs, WebSocket 1000), and
// max_consumers refuses one more with 429, on the built daemon.
func TestConsumersThroughTheDaemon(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Config: "max_consumers = 2\n"})
	publishOne(t, d, "s")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://localbus"+wire.SessionWSPath("s")+"?consumer=svc", &websocket.DialOptions{HTTPClient: d.Client()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	for range 4 { // ready, 1, replayed... and what the takeover sends
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), bus.TypeReplayed) {
			break
		}
	}
	got := readSSE(t, d, wire.SessionEventsPath("s")+"?consumer=svc", 1)
	if got[0].Type != bus.TypeReady {
		t.Fatalf("the stream that took over began with %s", got[0].Type)
	}
	var last []byte
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			if code := websocket.CloseStatus(err); code != websocket.StatusNormalClosure {
				t.Fatalf("the replaced WebSocket ended with %v (code %d), want 1000", err, code)
			}
			break
		}
		last = b
	}
	var env bus.Envelope
	if json.Unmarshal(last, &env) != nil || env.Type != bus.TypeClosed || string(env.Data) != `{"reason":"replaced"}` {
		t.Errorf("the replaced stream's last frame %s, want stream:closed replaced without retryMs", last)
	}

	readSSE(t, d, wire.SessionEventsPath("s")+"?consumer=other", 1)
	status, body := d.Do(t, http.MethodGet, wire.SessionEventsPath("s")+"?consumer=third", "")
	if e := daemontest.DecodeError(t, body); status != http.StatusTooManyRequests || e.Error.Code != wire.CodeConsumerLimit {
		t.Errorf("a third consumer = %d %s, want 429 consumer_limit", status, body)
	}
	if n := len(consumers(t, d, "s")); n != 2 {
		t.Errorf("%d consumers, want 2", n)
	}
}

// TestConsumersKeepTheirSessionAndExpire: an auto session whose consumer
// has pending events outlives auto_session_ttl until they are
// acknowledged, while one without a consumer expires; consumer_ttl
// (reloaded) forgets a consumer without a stream.
func TestConsumersKeepTheirSessionAndExpire(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Config: "auto_session_ttl = \"1s\"\n"})
	publishOne(t, d, "keep")
	publishOne(t, d, "gone")
	envs := readSSE(t, d, wire.SessionEventsPath("keep")+"?consumer=svc&ack=explicit", 3)
	var rd bus.ReadyData
	json.Unmarshal(envs[0].Data, &rd)
	bustest.Eventually(t, 20*time.Second, "session gone to expire", func() bool {
		status, _ := d.Do(t, http.MethodGet, wire.SessionPath("gone"), "")
		return status == http.StatusNotFound
	})
	if status, _ := d.Do(t, http.MethodGet, wire.SessionPath("keep"), ""); status != http.StatusOK {
		t.Fatalf("the session whose consumer has a pending event expired (%d)", status)
	}
	if list := consumers(t, d, "keep"); len(list) != 1 || list[0].Pending != 1 {
		t.Fatalf("consumers %+v, want svc with 1 pending", list)
	}
	status, body := d.Do(t, http.MethodPost, wire.ConsumerAckPath("keep", "svc"), fmt.Sprintf(`{"id":1,"epoch":%q}`, rd.Epoch))
	if status != http.StatusOK {
		t.Fatalf("ack = %d %s", status, body)
	}
	bustest.Eventually(t, 20*time.Second, "session keep to expire once nothing is pending", func() bool {
		status, _ := d.Do(t, http.MethodGet, wire.SessionPath("keep"), "")
		return status == http.StatusNotFound
	})

	d.WriteConfig(t, "auto_session_ttl = \"0\"\nconsumer_ttl = \"1s\"\n")
	if status, body := d.Do(t, http.MethodPost, wire.PathReload, ""); status != http.StatusOK {
		t.Fatalf("reload = %d %s", status, body)
	}
	publishOne(t, d, "s")
	readSSE(t, d, wire.SessionEventsPath("s")+"?consumer=brief", 1)
	bustest.Eventually(t, 20*time.Second, "the consumer without a stream to expire", func() bool {
		return len(consumers(t, d, "s")) == 0
	})
	d.WaitStderr(t, "consumer expired", 10*time.Second)
}

// TestAConsumerDiesWithItsSessionAndMovesToANewEpoch: deleting the session
// deletes its consumers, across a restart too; a consumer whose session's
// ids started again (kill -9 under fsync "interval") resumes with
// stream:gap epoch_reset and the whole ring, refuses an ack of the old
// epoch and takes one of the new.
func TestAConsumerDiesWithItsSessionAndMovesToANewEpoch(t *testing.T) {
	dir := t.TempDir()
	opts := daemontest.Options{Dir: dir, Durable: true, Args: []string{"--fsync", "interval"}}
	d := daemontest.Start(t, opts)
	publishOne(t, d, "gone")
	readSSE(t, d, wire.SessionEventsPath("gone")+"?consumer=svc", 1)
	if status, _ := d.Do(t, http.MethodDelete, wire.SessionPath("gone"), ""); status != http.StatusNoContent {
		t.Fatalf("DELETE session = %d", status)
	}
	publishOne(t, d, "gone")
	if list := consumers(t, d, "gone"); len(list) != 0 {
		t.Fatalf("the session made again has consumers %+v", list)
	}

	for range 5 {
		publishOne(t, d, "s")
	}
	envs := readSSE(t, d, wire.SessionEventsPath("s")+"?consumer=svc&ack=explicit", 1)
	var rd bus.ReadyData
	json.Unmarshal(envs[0].Data, &rd)
	oldEpoch := rd.Epoch
	if status, body := d.Do(t, http.MethodPost, wire.ConsumerAckPath("s", "svc"), fmt.Sprintf(`{"id":3,"epoch":%q}`, oldEpoch)); status != http.StatusOK {
		t.Fatalf("ack = %d %s", status, body)
	}
	d.Kill(t)

	d = daemontest.Start(t, opts)
	if list := consumers(t, d, "gone"); len(list) != 0 {
		t.Errorf("after the restart the session made again has consumers %+v", list)
	}
	status, body := d.Do(t, http.MethodGet, wire.SessionPath("s"), "")
	var info wire.SessionInfo
	if status != http.StatusOK || json.Unmarshal(body, &info) != nil || info.Epoch == oldEpoch {
		t.Fatalf("after kill -9 under fsync interval: %d %s; want a new epoch", status, body)
	}
	n := 3 + int(info.LastID) // ready, gap, the whole ring, replayed
	envs = readSSE(t, d, wire.SessionEventsPath("s")+"?consumer=svc", n)
	json.Unmarshal(envs[0].Data, &rd)
	if rd.Consumer == nil || rd.Consumer.AckedID != 3 || rd.Cursor == nil || *rd.Cursor != 3 || rd.Epoch != info.Epoch {
		t.Errorf("stream:ready %+v consumer %+v", rd, rd.Consumer)
	}
	var gd bus.GapData
	if envs[1].Type != bus.TypeGap || json.Unmarshal(envs[1].Data, &gd) != nil || gd.Reason != bus.GapEpochReset {
		t.Fatalf("second frame %s %s, want stream:gap epoch_reset", envs[1].Type, envs[1].Data)
	}
	for i, e := range envs[2 : n-1] {
		if e.ID != uint64(i+1) {
			t.Errorf("replay %d: id %d, want the whole ring from 1", i, e.ID)
		}
	}
	list := consumers(t, d, "s")
	if len(list) != 1 || list[0].Epoch != info.Epoch || list[0].AckedID != 0 {
		t.Errorf("consumers after the new epoch %+v, want svc at 0 in %s", list, info.Epoch)
	}
	status, body = d.Do(t, http.MethodPost, wire.ConsumerAckPath("s", "svc"), fmt.Sprintf(`{"id":4,"epoch":%q}`, oldEpoch))
	if e := daemontest.DecodeError(t, body); status != http.StatusConflict || e.Error.Code != wire.CodeEpochMismatch {
		t.Errorf("an ack of the old epoch = %d %s, want 409 epoch_mismatch", status, body)
	}
	if info.LastID > 0 {
		status, body = d.Do(t, http.MethodPost, wire.ConsumerAckPath("s", "svc"), fmt.Sprintf(`{"id":1,"epoch":%q}`, info.Epoch))
		if status != http.StatusOK || !strings.Contains(string(body), `"ackedId":1`) {
			t.Errorf("an ack of the new epoch = %d %s", status, body)
		}
	}
}
