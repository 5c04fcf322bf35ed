package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/localbus/localbus/daemon/daemontest"
	"github.com/localbus/localbus/ipc/wire"
)

// crashPublishesEnv sets how many keyed publishes
// TestKillNineDuringKeyedPublishesNeitherDoublesNorLoses makes (at least
// 2,000, its default).
const crashPublishesEnv = "LOCALBUS_CRASH_PUBLISHES"

// TestKillNineDuringKeyedPublishesNeitherDoublesNorLoses publishes keyed
// batches from four clients while the daemon is killed with SIGKILL again
// and again; after each restart every client sends its interrupted publish
// again, with the same key and body, as a client that lost the reply does.
// In the end every batch is in the session exactly once (0 doubled), every
// acknowledged one with the ids it was acknowledged with (0 lost), and its
// ids contiguous.
func TestKillNineDuringKeyedPublishesNeitherDoublesNorLoses(t *testing.T) {
	total := 2000
	if v := os.Getenv(crashPublishesEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", crashPublishesEnv, v)
		}
		total = n
	}
	const clients, perBatch = 4, 2
	dir := t.TempDir()
	opts := daemontest.Options{Dir: dir, Durable: true, Args: []string{"--fsync", "always", "--ring-size", "100000"}}
	type batch struct {
		key  string
		body []byte
	}
	type ack struct{ first, last uint64 }
	var mu sync.Mutex
	acked := map[string]ack{} // by key: the ids of the first reply
	next := make([]int, clients)
	pending := make([]*batch, clients) // interrupted, to send again
	makeBatch := func(c, k int) *batch {
		var b bytes.Buffer
		for i := range perBatch {
			fmt.Fprintf(&b, `{"type":"crash:ev","data":{"c":%d,"k":%d,"i":%d}}`+"\n", c, k, i)
		}
		return &batch{key: fmt.Sprintf("c%d-k%d", c, k), body: b.Bytes()}
	}
	// send publishes b; it reports false when the daemon did not answer.
	send := func(d *daemontest.Daemon, b *batch) (ack, bool, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://localbus/api/v1/sessions/crash/events", bytes.NewReader(b.body))
		req.Header.Set("Content-Type", wire.ContentTypeNDJSON)
		req.Header.Set(wire.HeaderIdempotencyKey, b.key)
		resp, err := d.Client().Do(req)
		if err != nil {
			return ack{}, false, false
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return ack{}, false, false
		}
		if resp.StatusCode == http.StatusServiceUnavailable {
			return ack{}, false, false // shutting down: the kill came
		}
		var r wire.PublishReply
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &r) != nil || len(r.IDs) != perBatch {
			t.Errorf("publish %s = %d %s", b.key, resp.StatusCode, body)
			return ack{}, false, true
		}
		return ack{r.IDs[0], r.LastID}, resp.Header.Get(wire.HeaderIdempotentReplayed) == "true", true
	}
	rng := rand.New(rand.NewPCG(1, 2))
	done, kills, retried, replayed := 0, 0, 0, 0
	for done < total {
		d := daemontest.Start(t, opts)
		var wg sync.WaitGroup
		for c := range clients {
			wg.Go(func() {
				for {
					mu.Lock()
					b := pending[c]
					if b == nil {
						if done >= total {
							mu.Unlock()
							return
						}
						b = makeBatch(c, next[c])
						next[c]++
						pending[c] = b
						done++
					} else {
						retried++
					}
					mu.Unlock()
					a, rep, ok := send(d, b)
					if !ok {
						return // the daemon is gone: b stays pending
					}
					mu.Lock()
					if prev, seen := acked[b.key]; seen && prev != a {
						t.Errorf("key %s answered ids %d..%d, then %d..%d", b.key, prev.first, prev.last, a.first, a.last)
					}
					acked[b.key] = a
					if rep {
						replayed++
					}
					pending[c] = nil
					mu.Unlock()
				}
			})
		}
		// Kill at a random moment, or let the last round finish.
		finished := make(chan struct{})
		go func() { wg.Wait(); close(finished) }()
		select {
		case <-finished:
			d.Stop(t)
		case <-time.After(time.Duration(20+rng.IntN(200)) * time.Millisecond):
			d.Kill(t)
			kills++
			<-finished
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	// The last interrupted ones, if any, once more.
	d := daemontest.Start(t, opts)
	for c := range clients {
		if b := pending[c]; b != nil {
			a, _, ok := send(d, b)
			if !ok {
				t.Fatalf("publish %s after the last restart failed", b.key)
			}
			acked[b.key] = a
			retried++
		}
	}
	envs := replay(t, d, "crash", 0)
	type mark struct{ C, K, I int }
	seen := map[mark]uint64{}
	doubled := 0
	for _, env := range envs {
		var m mark
		if err := json.Unmarshal(env.Data, &m); err != nil {
			t.Fatal(err)
		}
		if _, dup := seen[m]; dup {
			doubled++
		}
		seen[m] = env.ID
	}
	lost := 0
	for key, a := range acked {
		var c, k int
		fmt.Sscanf(key, "c%d-k%d", &c, &k)
		for i := range perBatch {
			id, ok := seen[mark{c, k, i}]
			if !ok || id != a.first+uint64(i) {
				lost++
			}
		}
	}
	t.Logf("%d keyed publishes, %d kills, %d sent again (%d answered as replays); %d events, %d doubled, %d lost",
		len(acked), kills, retried, replayed, len(envs), doubled, lost)
	if len(acked) < total {
		t.Errorf("%d publishes acknowledged, want %d", len(acked), total)
	}
	if doubled != 0 || lost != 0 || len(envs) != len(acked)*perBatch {
		t.Errorf("%d events for %d batches: %d doubled, %d lost; want %d events, 0 and 0", len(envs), len(acked), doubled, lost, len(acked)*perBatch)
	}
}
