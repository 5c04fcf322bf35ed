package daemon_test

// End-to-end tests of durability (SPEC §11) with the built daemon: what a
// publisher was told is stored survives kill -9 and restarts, in order, with
// ids that continue and epochs that stay, and followers resume across the
// restart with no stream:gap.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/daemon/daemontest"
	"github.com/localbus/localbus/daemon/journal"
	"github.com/localbus/localbus/daemon/journal/journaltest"
)

// acked is what one batch publisher was told: for each acknowledged id of
// its session, the sequence number it put in the event's data.
type acked struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu  sync.Mutex // guards ids
	ids map[uint64]int
}

// publishBatches publishes batches of 1 to 5 events to session, one request
// at a time, until stopped; failed requests (the daemon is down) are
// retried with the next batch.
func publishBatches(t testing.TB, d *daemontest.Daemon, session string) *acked {
	return publishFrom(t, d, session, 0, 5)
}

// publishFrom is publishBatches with the events' sequence numbers starting
// at n (so that publishers to one session tell their events apart) and
// batches of 1 to most events.
func publishFrom(t testing.TB, d *daemontest.Daemon, session string, n, most int) *acked {
	ctx, cancel := context.WithCancel(context.Background())
	a := &acked{cancel: cancel, done: make(chan struct{}), ids: map[uint64]int{}}
	go func() {
		defer close(a.done)
		for k := 0; ctx.Err() == nil; k++ {
			size := 1 + k%most
			var evs []string
			for i := range size {
				evs = append(evs, fmt.Sprintf(`{"type":"dur:ev","data":{"n":%d}}`, n+i))
			}
			status, body, err := d.TryDo(http.MethodPost, "/api/v1/sessions/"+session+"/events", "["+strings.Join(evs, ",")+"]")
			if err != nil || status != http.StatusOK {
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond): // the daemon is down: retry later
				}
				n += size
				continue
			}
			var r struct {
				IDs []uint64 `json:"ids"`
			}
			if json.Unmarshal(body, &r) == nil && len(r.IDs) == size {
				a.mu.Lock()
				for i, id := range r.IDs {
					a.ids[id] = n + i
				}
				a.mu.Unlock()
			}
			n += size
		}
	}()
	t.Cleanup(a.stop)
	return a
}

func (a *acked) stop() {
	a.cancel()
	<-a.done
}

// count returns how many events were acknowledged.
func (a *acked) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.ids)
}

// max returns the largest acknowledged id.
func (a *acked) max() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var m uint64
	for id := range a.ids {
		m = max(m, id)
	}
	return m
}

// replay reads session's ring from since with ?since=, up to
// stream:replayed; a stream:gap fails the test.
func replay(t testing.TB, d *daemontest.Daemon, session string, since uint64) []bus.Envelope {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://localbus/api/v1/sessions/"+session+"/events?since="+strconv.FormatUint(since, 10), nil)
	resp, err := d.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET events of %s = %s", session, resp.Status)
	}
	var out []bus.Envelope
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var env bus.Envelope
		if err := json.Unmarshal([]byte(data), &env); err != nil {
			t.Fatalf("frame %q: %v", data, err)
		}
		switch env.Type {
		case bus.TypeReplayed:
			return out
		case bus.TypeGap:
			t.Errorf("replay of %s from %d: %s", session, since, data)
		}
		if env.ID != 0 {
			out = append(out, env)
		}
	}
	t.Fatalf("stream of %s ended before stream:replayed: %v", session, sc.Err())
	return nil
}

// sessionInfo returns GET /api/v1/sessions/{id}.
func sessionInfo(t testing.TB, d *daemontest.Daemon, session string) (info struct {
	Epoch      string `json:"epoch"`
	LastID     uint64 `json:"lastId"`
	Durability *struct {
		BytesOnDisk  int64  `json:"bytesOnDisk"`
		LastSyncedID uint64 `json:"lastSyncedId"`
	} `json:"durability"`
}) {
	t.Helper()
	status, body := d.Do(t, http.MethodGet, "/api/v1/sessions/"+session, "")
	if status != http.StatusOK {
		t.Fatalf("GET session %s = %d %s", session, status, body)
	}
	if err := json.Unmarshal(body, &info); err != nil {
		t.Fatal(err)
	}
	return info
}

// checkStored checks that session holds ids 1 to lastId in order, that
// every acknowledged event is among them with the data it was published
// with, and returns lastId.
func checkStored(t testing.TB, d *daemontest.Daemon, session string, a *acked) uint64 {
	t.Helper()
	envs := replay(t, d, session, 0)
	var ids []uint64
	for _, e := range envs {
		ids = append(ids, e.ID)
	}
	last := sessionInfo(t, d, session).LastID
	if diff := cmp.Diff(upTo(last), ids); diff != "" {
		t.Errorf("%s: stored ids are not 1..%d (-want +got):\n%s", session, last, diff)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, n := range a.ids {
		if id > uint64(len(envs)) {
			t.Errorf("%s: acknowledged id %d is lost (lastId %d)", session, id, last)
			continue
		}
		var data struct {
			N int `json:"n"`
		}
		json.Unmarshal(envs[id-1].Data, &data)
		if data.N != n {
			t.Errorf("%s: id %d holds n=%d, want the acknowledged n=%d", session, id, data.N, n)
		}
	}
	return last
}

// checkFollowers waits until every follower has reached last and checks it
// got every id once, in order, with no gap: a broken connection while the
// daemon was down is the only problem allowed.
func checkFollowers(t testing.TB, fl []*daemontest.Follower, last uint64) {
	t.Helper()
	waitFor(t, "every follower to catch up", all(fl, func(f *daemontest.Follower) bool { return f.Last() >= last }))
	for _, f := range fl {
		f.Stop()
		if diff := cmp.Diff(upTo(last), f.IDs()[:min(len(f.IDs()), int(last))]); diff != "" {
			t.Errorf("%s: ids (-want +got):\n%s", f.Name, diff)
		}
		for _, p := range f.Problems() {
			if !strings.HasPrefix(p, "stream ended without stream:closed") {
				t.Errorf("%s: %s", f.Name, p)
			}
		}
	}
}

// TestKillNineLosesNoAcknowledgedEvent kills the daemon with SIGKILL while
// three publishers publish batches with fsync "always" to SSE and WebSocket
// followers. After a restart every acknowledged event is stored, in order,
// with its data; ids continue with no reuse; epochs are kept; and the
// followers, resuming with their last id, get everything with no gap.
func TestKillNineLosesNoAcknowledgedEvent(t *testing.T) {
	dir := t.TempDir()
	opts := daemontest.Options{Dir: dir, Durable: true, Args: []string{"--fsync", "always"}}
	d := daemontest.Start(t, opts)
	sessions := []string{"k1", "k2", "k3"}
	epochs := map[string]string{}
	var pubs []*acked
	var fl []*daemontest.Follower
	for _, s := range sessions {
		createSession(t, d, s)
		epochs[s] = sessionInfo(t, d, s).Epoch
		fl = append(fl, followers(t, d, s, daemontest.FollowOptions{})...)
	}
	for _, s := range sessions {
		pubs = append(pubs, publishBatches(t, d, s))
	}
	waitFor(t, "every publisher to have 300 events acknowledged", func() bool {
		for _, p := range pubs {
			if p.count() < 300 {
				return false
			}
		}
		return true
	})
	d.Kill(t)
	for _, p := range pubs {
		p.stop()
	}

	d2 := daemontest.Start(t, opts)
	if strings.Contains(d2.Stderr(), "new epoch") && !strings.Contains(d2.Stderr(), "newEpochs=false") {
		t.Errorf("restart gave new epochs:\n%s", d2.Stderr())
	}
	for i, s := range sessions {
		last := checkStored(t, d2, s, pubs[i])
		if last < pubs[i].max() {
			t.Errorf("%s: lastId %d below the largest acknowledged id %d", s, last, pubs[i].max())
		}
		if got := sessionInfo(t, d2, s).Epoch; got != epochs[s] {
			t.Errorf("%s: epoch %q after kill -9 with fsync always, want %q", s, got, epochs[s])
		}
		if id := publish(t, d2, s, "dur:after", "0"); id != last+1 {
			t.Errorf("%s: first id after the restart = %d, want %d", s, id, last+1)
		}
		checkFollowers(t, fl[4*i:4*i+4], last+1)
	}
}

// TestKillNineUnderConcurrentPublishersToOneSessionLosesNothing kills the
// daemon with SIGKILL while 16 publishers publish single events (and a few
// small batches) concurrently to one session with fsync "always", so that
// they share syncs (group commit). After a restart every acknowledged event
// is stored with its data, every id a follower saw before the kill is still
// there, ids continue and the epoch is kept.
func TestKillNineUnderConcurrentPublishersToOneSessionLosesNothing(t *testing.T) {
	dir := t.TempDir()
	opts := daemontest.Options{Dir: dir, Durable: true, Args: []string{"--fsync", "always"}}
	d := daemontest.Start(t, opts)
	const session, publishers = "one", 16
	createSession(t, d, session)
	epoch := sessionInfo(t, d, session).Epoch
	fl := followers(t, d, session, daemontest.FollowOptions{})
	var pubs []*acked
	for p := range publishers {
		// Single events; half the publishers send every other request as a pair.
		pubs = append(pubs, publishFrom(t, d, session, p*1_000_000, 1+p%2))
	}
	waitFor(t, "1,000 events acknowledged", func() bool {
		n := 0
		for _, p := range pubs {
			n += p.count()
		}
		return n >= 1000
	})
	d.Kill(t)
	seen := uint64(0)
	for _, f := range fl {
		seen = max(seen, f.Last())
	}
	for _, p := range pubs {
		p.stop()
	}

	d2 := daemontest.Start(t, opts)
	envs := replay(t, d2, session, 0)
	last := sessionInfo(t, d2, session).LastID
	if seen > last {
		t.Errorf("a follower saw id %d before the kill; after the restart the last id is %d", seen, last)
	}
	for i, p := range pubs {
		p.mu.Lock()
		for id, n := range p.ids {
			if id > uint64(len(envs)) || envs[id-1].ID != id {
				t.Errorf("publisher %d: acknowledged id %d is lost (lastId %d)", i, id, last)
				continue
			}
			var data struct {
				N int `json:"n"`
			}
			json.Unmarshal(envs[id-1].Data, &data)
			if data.N != n {
				t.Errorf("publisher %d: id %d holds n=%d, want the acknowledged n=%d", i, id, data.N, n)
			}
		}
		p.mu.Unlock()
	}
	var ids []uint64
	for _, e := range envs {
		ids = append(ids, e.ID)
	}
	if diff := cmp.Diff(upTo(last), ids); diff != "" {
		t.Errorf("stored ids are not 1..%d (-want +got):\n%s", last, diff)
	}
	if got := sessionInfo(t, d2, session).Epoch; got != epoch {
		t.Errorf("epoch %q after kill -9 with fsync always, want %q", got, epoch)
	}
	if id := publish(t, d2, session, "dur:after", "0"); id != last+1 {
		t.Errorf("first id after the restart = %d, want %d", id, last+1)
	}
	checkFollowers(t, fl, last+1)
}

// TestRestartUnderSocketActivationLosesNothing restarts the daemon under
// systemd-socket-activate, on the same socket path, twice: once with
// SIGTERM and once with SIGKILL, while a publisher publishes to followers
// that stay connected. The followers reconnect to the same socket and
// resume; nothing acknowledged is lost, nothing is repeated, no gap.
func TestRestartUnderSocketActivationLosesNothing(t *testing.T) {
	daemontest.SocketActivate(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "lb.sock")
	start := func() *daemontest.Daemon { return daemontest.StartActivated(t, dir, sock, patience) }
	d := start()
	createSession(t, d, "act")
	epoch := sessionInfo(t, d, "act").Epoch
	fl := followers(t, d, "act", daemontest.FollowOptions{})
	pub := publishBatches(t, d, "act")
	for round, stop := range []func(*daemontest.Daemon){
		func(d *daemontest.Daemon) { d.Signal(t, syscall.SIGTERM); d.Wait(t, patience) },
		func(d *daemontest.Daemon) { d.Kill(t) },
	} {
		target := pub.count() + 200
		waitFor(t, "200 more events acknowledged", func() bool { return pub.count() >= target })
		stop(d)
		d = start()
		if got := sessionInfo(t, d, "act").Epoch; got != epoch {
			t.Errorf("round %d: epoch %q after the restart, want %q", round, got, epoch)
		}
	}
	target := pub.count() + 100
	waitFor(t, "100 more events acknowledged", func() bool { return pub.count() >= target })
	pub.stop()
	last := checkStored(t, d, "act", pub)
	checkFollowers(t, fl, last)
}

// TestRetentionKeepsDiskWithinTheRing publishes far more than the ring
// holds, stops the daemon (which checkpoints) and checks what the journal
// holds: at most ring_size events and ring_max_bytes bytes per bus.
func TestRetentionKeepsDiskWithinTheRing(t *testing.T) {
	dir := t.TempDir()
	const ringSize, ringBytes = 100, 30_000
	d := daemontest.Start(t, daemontest.Options{Dir: dir, Durable: true, Args: []string{
		"--ring-size", strconv.Itoa(ringSize), "--ring-max-bytes", strconv.Itoa(ringBytes),
	}})
	pad := strings.Repeat("x", 200)
	for i := range 50 {
		var evs []string
		for k := range 20 {
			evs = append(evs, fmt.Sprintf(`{"type":"ret:ev","data":{"n":%d,"pad":%q}}`, i*20+k, pad))
		}
		if status, body := d.Do(t, http.MethodPost, "/api/v1/sessions/ret/events", "["+strings.Join(evs, ",")+"]"); status != http.StatusOK {
			t.Fatalf("publish = %d %s", status, body)
		}
	}
	info := sessionInfo(t, d, "ret")
	if info.Durability == nil || info.Durability.BytesOnDisk > ringBytes || info.Durability.LastSyncedID != 1000 {
		t.Errorf("durability figures = %+v, want bytesOnDisk ≤ %d and lastSyncedId 1000", info.Durability, ringBytes)
	}
	d.Stop(t)

	j, err := journal.Open(journal.Options{Dir: filepath.Join(dir, "state", "journal")})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for _, s := range append(j.Sessions(), "") {
		// Before the bus applies its limits, the store holds what is on disk.
		st, _, _, err := j.OpenBus(s, 0)
		if err != nil {
			t.Fatal(err)
		}
		if st.Len() > ringSize || st.Bytes() > ringBytes || st.LastID() < 1000 {
			t.Errorf("bus %q on disk: %d events, %d bytes, lastId %d; want ≤ %d, ≤ %d, ≥ 1000",
				s, st.Len(), st.Bytes(), st.LastID(), ringSize, ringBytes)
		}
	}
	if !slices.Equal(j.Sessions(), []string{"ret"}) {
		t.Errorf("sessions on disk = %v, want [ret]", j.Sessions())
	}
}

// TestDiskFullAnswers507AndKeepsServingReads runs the daemon with its
// state_dir on a 16 MiB tmpfs that a ballast file fills but for 1 MiB (the
// journal keeps within about twice what the rings retain, plus a segment,
// so the ballast must leave it less than that) and publishes until the
// disk is full: the
// publish is refused with 507 and a JSON error, reads and replays go on,
// publishing resumes with the next id once there is room, and a restart
// restores every acknowledged event. It needs root to mount the tmpfs.
func TestDiskFullAnswers507AndKeepsServingReads(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small filesystem needs root")
	}
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", state).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v: %s", err, out)
	}
	// Registered first, so it runs after the daemon has stopped.
	t.Cleanup(func() {
		if out, err := exec.Command("umount", state).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", state, err, out)
		}
	})
	ballast := filepath.Join(state, "ballast")
	if err := os.WriteFile(ballast, make([]byte, 15<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := daemontest.Options{Dir: dir, Durable: true, Args: []string{"--ring-size", "1000"}}
	d := daemontest.Start(t, opts)

	body := func(k int) string {
		var evs []string
		for i := range 100 {
			evs = append(evs, fmt.Sprintf(`{"type":"full:ev","data":{"n":%d,"pad":"%s"}}`, k*100+i, strings.Repeat("x", 250)))
		}
		return "[" + strings.Join(evs, ",") + "]"
	}
	var last uint64
	var refused []byte
	for k := 0; k < 5000 && refused == nil; k++ {
		status, b := d.Do(t, http.MethodPost, "/api/v1/sessions/full/events", body(k))
		switch status {
		case http.StatusOK:
			var r struct {
				LastID uint64 `json:"lastId"`
			}
			json.Unmarshal(b, &r)
			last = r.LastID
		case http.StatusInsufficientStorage:
			refused = b
		default:
			t.Fatalf("publish %d = %d %s, want 200 or 507", k, status, b)
		}
	}
	if refused == nil {
		t.Fatalf("the disk never filled; last id %d", last)
	}
	if e := daemontest.DecodeError(t, refused); e.Error.Code != "disk_full" {
		t.Errorf("507 error code = %q, want disk_full", e.Error.Code)
	}

	// Reads go on.
	if info := sessionInfo(t, d, "full"); info.LastID != last {
		t.Errorf("lastId while the disk is full = %d, want %d", info.LastID, last)
	}
	envs := replay(t, d, "full", last-50)
	if len(envs) != 50 || envs[49].ID != last {
		t.Errorf("replay of the last 50 while the disk is full: %d events, want 50 ending at id %d", len(envs), last)
	}

	// Room again: the next publish gets the next id.
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	if id := publish(t, d, "full", "full:ev", "1"); id != last+1 {
		t.Errorf("first id once there is room = %d, want %d", id, last+1)
	}
	d.Stop(t)
	d2 := daemontest.Start(t, opts)
	if info := sessionInfo(t, d2, "full"); info.LastID != last+1 {
		t.Errorf("lastId after a restart = %d, want %d", info.LastID, last+1)
	}
}

// TestCapsSayTheDurability: /api/v1/caps reports how the daemon keeps
// events, which localbus bench prints in every report.
func TestCapsSayTheDurability(t *testing.T) {
	for _, tc := range []struct {
		opts             daemontest.Options
		durability, sync string
	}{
		{daemontest.Options{Durable: true, Args: []string{"--fsync", "interval"}}, "disk", "interval"},
		{daemontest.Options{}, "memory", ""},
	} {
		tc.opts.Dir = t.TempDir()
		d := daemontest.Start(t, tc.opts)
		_, body := d.Do(t, http.MethodGet, "/api/v1/caps", "")
		var caps struct {
			Durability string `json:"durability"`
			Fsync      string `json:"fsync"`
		}
		if err := json.Unmarshal(body, &caps); err != nil || caps.Durability != tc.durability || caps.Fsync != tc.sync {
			t.Errorf("caps = %s (%v), want durability %q fsync %q", body, err, tc.durability, tc.sync)
		}
		d.Stop(t)
	}
}

// TestFreshStateDirTakesAtMostOneMiB starts a daemon on an empty state_dir,
// publishes one event, stops it, and measures what the state_dir takes on
// disk (allocated blocks, as du counts them).
func TestFreshStateDirTakesAtMostOneMiB(t *testing.T) {
	dir := t.TempDir()
	d := daemontest.Start(t, daemontest.Options{Dir: dir, Durable: true})
	createSession(t, d, "small")
	publish(t, d, "small", "dur:ev", "1")
	d.Stop(t)
	var use int64
	err := filepath.Walk(filepath.Join(dir, "state"), func(_ string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() {
			use += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if use > 1<<20 {
		t.Errorf("a fresh state_dir takes %d bytes on disk, want at most 1 MiB", use)
	}
	t.Logf("a fresh state_dir takes %d bytes on disk", use)
}

// TestStartOnAFullDiskServesReadsAndAnswers507UntilThereIsRoom starts the
// daemon on a full state_dir whose journal has a log to replay: it starts,
// serves the restored events, refuses publishes with 507 and a JSON error
// (the other session's reads unaffected), and once there is room again
// publishes continue with the next id. It needs root to mount the tmpfs.
func TestStartOnAFullDiskServesReadsAndAnswers507UntilThereIsRoom(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	journaltest.SmallDisk(t, state, 32<<20) // registered first: unmounted after the daemons stop
	opts := daemontest.Options{Dir: dir, Durable: true, Args: []string{"--fsync", "always"}}
	d := daemontest.Start(t, opts)
	for i := range 30 {
		publish(t, d, "ro", "ro:ev", strconv.Itoa(i))
	}
	publish(t, d, "other", "ro:ev", "1")
	d.Kill(t) // the log keeps the events: the restart replays it
	release := journaltest.Fill(t, state)
	t.Cleanup(release)

	d2 := daemontest.Start(t, opts)
	d2.WaitStderr(t, "read-only", patience)
	envs := replay(t, d2, "ro", 0)
	if len(envs) != 30 || envs[0].ID != 1 || envs[29].ID != 30 {
		t.Fatalf("restored on a full disk: %d events, want ids 1..30", len(envs))
	}
	status, body := d2.Do(t, http.MethodPost, "/api/v1/sessions/ro/events", `{"type":"ro:ev","data":31}`)
	if status != http.StatusInsufficientStorage {
		t.Fatalf("publish on a full disk = %d %s, want 507", status, body)
	}
	if e := daemontest.DecodeError(t, body); e.Error.Code != "disk_full" {
		t.Errorf("507 error code = %q, want disk_full", e.Error.Code)
	}
	if info := sessionInfo(t, d2, "ro"); info.LastID != 30 {
		t.Errorf("lastId after a refused publish = %d, want 30", info.LastID)
	}
	if envs := replay(t, d2, "other", 0); len(envs) != 1 {
		t.Errorf("other session while the disk is full: %d events, want 1", len(envs))
	}

	release()
	// The journal retries finishing its open at most once a second.
	bustest.Eventually(bustest.Showing(t, func() string { return fmt.Sprintf("%d %s", status, body) }), patience, "a publish not refused for a full disk", func() bool {
		status, body = d2.Do(t, http.MethodPost, "/api/v1/sessions/ro/events", `{"type":"ro:ev","data":31}`)
		return status != http.StatusInsufficientStorage
	})
	if status != http.StatusOK || !strings.Contains(string(body), `"lastId":31`) {
		t.Fatalf("publish once there is room = %d %s, want 200 with lastId 31", status, body)
	}
	d2.Stop(t)
	d3 := daemontest.Start(t, opts)
	if envs := replay(t, d3, "ro", 0); len(envs) != 31 || envs[30].ID != 31 {
		t.Errorf("after a restart: %d events, want ids 1..31", len(envs))
	}
}

// TestStartOnAFullDiskWithAnEmptyStateDir starts the daemon with a state
// dir that holds nothing on a full disk: it starts (a service manager
// would otherwise restart it in a loop), serves reads, answers publishes
// 507 and, once there is room, publishes from id 1.
func TestStartOnAFullDiskWithAnEmptyStateDir(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	journaltest.SmallDisk(t, state, 8<<20)
	release := journaltest.Fill(t, state)
	t.Cleanup(release)
	d := daemontest.Start(t, daemontest.Options{Dir: dir, Durable: true})
	d.WaitStderr(t, "read-only", patience)
	if status, body := d.Do(t, http.MethodGet, "/api/v1/sessions", ""); status != http.StatusOK {
		t.Errorf("GET /api/v1/sessions on a full disk = %d %s, want 200", status, body)
	}
	status, body := d.Do(t, http.MethodPost, "/api/v1/sessions/s/events", `{"type":"ro:ev","data":1}`)
	if status != http.StatusInsufficientStorage {
		t.Fatalf("publish on a full disk = %d %s, want 507", status, body)
	}
	if e := daemontest.DecodeError(t, body); e.Error.Code != "disk_full" {
		t.Errorf("507 error code = %q, want disk_full", e.Error.Code)
	}
	release()
	bustest.Eventually(bustest.Showing(t, func() string { return fmt.Sprintf("%d %s", status, body) }), patience, "a publish not refused for a full disk", func() bool {
		status, body = d.Do(t, http.MethodPost, "/api/v1/sessions/s/events", `{"type":"ro:ev","data":1}`)
		return status != http.StatusInsufficientStorage
	})
	if status != http.StatusOK || !strings.Contains(string(body), `"lastId":1`) {
		t.Fatalf("publish once there is room = %d %s, want 200 with lastId 1", status, body)
	}
	d.Stop(t)
	d2 := daemontest.Start(t, daemontest.Options{Dir: dir, Durable: true})
	if envs := replay(t, d2, "s", 0); len(envs) != 1 || envs[0].ID != 1 {
		t.Errorf("after a restart: %d events, want id 1", len(envs))
	}
}

// TestKillNineDuringTheCheckpointAfterARestartLosesNothing kills the daemon
// with SIGKILL with about 20 MiB of log, restarts it, which serves before
// copying the log into its database, publishes to every session and kills
// it again while that copy runs (the first run's segments are still there).
// After a third start every acknowledged event of both runs is stored with
// its data, ids continue with no reuse and epochs are kept.
func TestKillNineDuringTheCheckpointAfterARestartLosesNothing(t *testing.T) {
	dir := t.TempDir()
	opts := daemontest.Options{Dir: dir, Durable: true, Args: []string{"--fsync", "always", "--ring-size", "100000"}}
	d := daemontest.Start(t, opts)
	sessions := []string{"c1", "c2", "c3"}
	acked := map[string]map[uint64]int{} // session → id → the n in its data
	epochs := map[string]string{}
	n := 0
	post := func(d *daemontest.Daemon, s string, count int) {
		t.Helper()
		pad := strings.Repeat("p", 250)
		evs := make([]string, count)
		for i := range evs {
			evs[i] = fmt.Sprintf(`{"type":"ck:ev","data":{"n":%d,"pad":%q}}`, n+i, pad)
		}
		status, body := d.Do(t, http.MethodPost, "/api/v1/sessions/"+s+"/events", "["+strings.Join(evs, ",")+"]")
		if status != http.StatusOK {
			t.Fatalf("publish to %s = %d %s", s, status, body)
		}
		var r struct {
			LastID uint64 `json:"lastId"`
		}
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		for i := range count {
			acked[s][r.LastID-uint64(count-1-i)] = n + i
		}
		n += count
	}
	for _, s := range sessions {
		createSession(t, d, s)
		epochs[s] = sessionInfo(t, d, s).Epoch
		acked[s] = map[uint64]int{}
	}
	for k := range 60 { // 60 × 1,000 events of about 300 bytes
		post(d, sessions[k%3], 1000)
	}
	d.Kill(t)
	journalDir := filepath.Join(dir, "state", "journal")
	before := journaltest.Segments(t, journalDir)
	if len(before) < 4 {
		t.Fatalf("%d log segments after the first kill, want several", len(before))
	}

	d2 := daemontest.Start(t, opts)
	for _, s := range sessions {
		post(d2, s, 10)
	}
	d2.Kill(t)
	if !slices.Contains(journaltest.Segments(t, journalDir), before[len(before)-1]) {
		t.Fatalf("the second run copied the first run's log before it was killed: nothing was interrupted")
	}

	d3 := daemontest.Start(t, opts)
	for _, s := range sessions {
		envs := replay(t, d3, s, 0)
		if len(envs) != len(acked[s]) {
			t.Errorf("%s: %d events stored, want %d", s, len(envs), len(acked[s]))
		}
		for i, e := range envs {
			var data struct {
				N int `json:"n"`
			}
			json.Unmarshal(e.Data, &data)
			if want, ok := acked[s][e.ID]; e.ID != uint64(i+1) || !ok || data.N != want {
				t.Fatalf("%s: event %d is id %d with n %d, want id %d with n %d", s, i, e.ID, data.N, i+1, want)
			}
		}
		if got := sessionInfo(t, d3, s).Epoch; got != epochs[s] {
			t.Errorf("%s: epoch %q after two kills with fsync always, want %q", s, got, epochs[s])
		}
		last := uint64(len(acked[s]))
		if id := publish(t, d3, s, "ck:after", "0"); id != last+1 {
			t.Errorf("%s: first id after the restarts = %d, want %d", s, id, last+1)
		}
	}
}
