package daemon_test

// Benchmarks of the durability targets (daemon/journal/durability.md) against the
// built daemon, without the race detector:
//
//	go test -run '^$' -bench DaemonBatchPublish -benchtime 300x -count 3 ./daemon

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/localbus/localbus/daemon/daemontest"
)

// benchBinary builds the daemon without -race in a directory removed when
// the benchmark b ends.
func benchBinary(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	bin := filepath.Join(dir, "localbus")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/localbus")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// benchDaemon is a daemon a benchmark runs.
type benchDaemon struct {
	cmd    *exec.Cmd
	socket string
	client *http.Client
	done   chan struct{}
}

// startBench starts the daemon on dir with args and returns it once
// /readyz answers, with the time that took.
func startBench(b *testing.B, bin, dir string, args ...string) (*benchDaemon, time.Duration) {
	b.Helper()
	sock := filepath.Join(dir, "lb.sock")
	conf := filepath.Join(dir, "config.toml")
	if _, err := os.Stat(conf); err != nil {
		os.WriteFile(conf, nil, 0o600)
	}
	args = append([]string{"serve", "--socket", sock, "--config", conf, "--state-dir", filepath.Join(dir, "state"), "--log-level", "warn"}, args...)
	d := &benchDaemon{cmd: exec.Command(bin, args...), socket: sock, client: daemontest.UnixClient(sock), done: make(chan struct{})}
	d.cmd.Stderr = os.Stderr
	start := time.Now()
	if err := d.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() { d.cmd.Wait(); close(d.done) }()
	b.Cleanup(d.stop)
	deadline := start.Add(patience)
	for time.Now().Before(deadline) {
		resp, err := d.client.Get("http://localbus/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return d, time.Since(start)
			}
		}
		select {
		case <-d.done:
			b.Fatal("daemon exited before it was ready")
		case <-time.After(time.Millisecond): // polling interval
		}
	}
	b.Fatal("daemon not ready")
	return nil, 0
}

func (d *benchDaemon) stop() {
	d.cmd.Process.Signal(os.Interrupt)
	select {
	case <-d.done:
	case <-time.After(patience):
		d.cmd.Process.Kill()
		<-d.done
	}
}

func (d *benchDaemon) post(path string, body []byte) error {
	resp, err := d.client.Post("http://localbus"+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s = %d %s", path, resp.StatusCode, b)
	}
	return nil
}

// batchBody is a JSON array of n events of about 300 bytes of data.
func batchBody(n int) []byte {
	pad := strings.Repeat("p", 260)
	var evs []string
	for i := range n {
		evs = append(evs, fmt.Sprintf(`{"type":"bench:event","data":{"n":%d,"pad":%q}}`, i, pad))
	}
	return []byte("[" + strings.Join(evs, ",") + "]")
}

// durabilityModes are the configurations a target compares.
var durabilityModes = map[string][]string{
	"memory":          {"--durability", "memory"},
	"disk-interval":   {"--fsync", "interval"},
	"disk-always":     {"--fsync", "always"},
	"disk-never":      {"--fsync", "never"},
	"memory-baseline": {"--durability", "memory"},
}

// BenchmarkDaemonFanout: 4 publishers post one event per request to a
// session that 32 SSE clients follow; an op is one event delivered to all.
// Target: disk-interval at 0.8× memory or better.
func BenchmarkDaemonFanout(b *testing.B) {
	bin := benchBinary(b)
	for _, mode := range []string{"memory", "disk-interval", "disk-always"} {
		b.Run(mode, func(b *testing.B) {
			d, _ := startBench(b, bin, b.TempDir(), durabilityModes[mode]...)
			const readers, publishers = 32, 4
			var delivered atomic.Int64
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			ready := make(chan struct{}, readers)
			if err := d.post("/api/v1/sessions", []byte(`{"id":"fan"}`)); err != nil && !strings.Contains(err.Error(), "201") {
				b.Fatal(err)
			}
			for range readers {
				wg.Go(func() {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://localbus/api/v1/sessions/fan/events?maxQueued=2048", nil)
					resp, err := d.client.Do(req)
					if err != nil || resp.StatusCode != http.StatusOK {
						b.Errorf("follow: %v %v", err, resp)
						ready <- struct{}{}
						return
					}
					defer resp.Body.Close()
					sc := bufio.NewScanner(resp.Body)
					for sc.Scan() {
						line := sc.Bytes()
						switch {
						case bytes.HasPrefix(line, []byte("id: ")):
							delivered.Add(1)
						case bytes.HasPrefix(line, []byte("event: stream:ready")):
							ready <- struct{}{}
						case bytes.HasPrefix(line, []byte("event: stream:lagged")):
							b.Error("a reader fell behind")
						}
					}
				})
			}
			for range readers {
				<-ready
			}
			body := []byte(`{"type":"bench:event","data":{"pad":"` + strings.Repeat("p", 280) + `"}}`)
			var next atomic.Int64
			b.ResetTimer()
			var pw sync.WaitGroup
			for range publishers {
				pw.Go(func() {
					for next.Add(1) <= int64(b.N) {
						if err := d.post("/api/v1/sessions/fan/events", body); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			pw.Wait()
			for delivered.Load() < int64(b.N)*readers && !b.Failed() {
				time.Sleep(100 * time.Microsecond) // polling interval
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)*readers/b.Elapsed().Seconds(), "deliveries/s")
			cancel()
			wg.Wait()
		})
	}
}

// BenchmarkDaemonBatchPublish: 4 publishers post batches of 1000 events of
// about 300 bytes, each to a session of its own; an op is one batch.
// Target: disk-always at 0.5× memory or better.
func BenchmarkDaemonBatchPublish(b *testing.B) {
	bin := benchBinary(b)
	for _, mode := range []string{"memory", "disk-always", "disk-interval"} {
		b.Run(mode, func(b *testing.B) {
			d, _ := startBench(b, bin, b.TempDir(), durabilityModes[mode]...)
			body := batchBody(1000)
			var next atomic.Int64
			b.SetBytes(int64(len(body)))
			b.ResetTimer()
			var wg sync.WaitGroup
			for p := range 4 {
				wg.Go(func() {
					path := fmt.Sprintf("/api/v1/sessions/pub-%d/events", p)
					for next.Add(1) <= int64(b.N) {
						if err := d.post(path, body); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkDaemonStartup: the daemon starts on a journal of 1,000,000
// events in 100 sessions; an op is one start, until /readyz answers.
// Target: 2 s.
func BenchmarkDaemonStartup(b *testing.B) {
	bin := benchBinary(b)
	dir := b.TempDir()
	ring := []string{"--ring-size", "10000"}
	d, _ := startBench(b, bin, dir, append(ring, "--fsync", "never")...)
	body := batchBody(1000)
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 2 {
		wg.Go(func() {
			for k := next.Add(1) - 1; k < 1000; k = next.Add(1) - 1 {
				if err := d.post(fmt.Sprintf("/api/v1/sessions/s-%03d/events", k%100), body); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	d.stop()
	b.ResetTimer()
	for range b.N {
		d, took := startBench(b, bin, dir, ring...)
		b.ReportMetric(took.Seconds(), "s/ready")
		b.StopTimer()
		resp, err := d.client.Get("http://localbus/api/v1/sessions/s-042")
		if err == nil {
			info, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !bytes.Contains(info, []byte(`"count":10000`)) {
				b.Errorf("session after the start: %s", info)
			}
		}
		d.stop()
		b.StartTimer()
	}
}

// BenchmarkDaemonRecovery: the daemon is killed (SIGKILL) with its log at
// its bound, about 128 MiB not yet checkpointed (300,000 events of about
// 300 bytes in 4 sessions, and their copies in the global bus, rings of
// 100,000); an op is one start on a copy of that state, until /readyz
// answers. Target: 1 s.
func BenchmarkDaemonRecovery(b *testing.B) {
	bin := benchBinary(b)
	dir := b.TempDir()
	ring := []string{"--ring-size", "100000"}
	d, _ := startBench(b, bin, dir, append(ring, "--fsync", "never")...)
	body := batchBody(1000)
	journalDir := filepath.Join(dir, "state", "journal")
	const bound = 128 << 20
	var wg sync.WaitGroup
	var next atomic.Int64
	var full atomic.Bool
	deadline := time.Now().Add(patience)
	for range 4 {
		wg.Go(func() {
			for k := next.Add(1) - 1; !full.Load() && time.Now().Before(deadline); k = next.Add(1) - 1 {
				if err := d.post(fmt.Sprintf("/api/v1/sessions/s-%d/events", k%4), body); err != nil {
					b.Error(err)
					return
				}
				if logOnDisk(b, journalDir) >= bound {
					full.Store(true)
				}
			}
		})
	}
	wg.Wait()
	d.cmd.Process.Kill()
	<-d.done
	logBytes := logOnDisk(b, journalDir)
	if logBytes < bound {
		b.Fatalf("the log holds %d bytes after the fill, want %d: a checkpoint ran meanwhile", logBytes, bound)
	}
	crashed := filepath.Join(b.TempDir(), "crashed")
	copyTree(b, dir, crashed)
	var took []time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		run := filepath.Join(b.TempDir(), "run")
		copyTree(b, crashed, run)
		b.StartTimer()
		d, t := startBench(b, bin, run, ring...)
		b.StopTimer()
		took = append(took, t)
		resp, err := d.client.Get("http://localbus/api/v1/sessions/s-1")
		if err != nil {
			b.Fatal(err)
		}
		info, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !bytes.Contains(info, []byte(`"lastId":`)) || bytes.Contains(info, []byte(`"count":0`)) {
			b.Errorf("session after the start: %s", info)
		}
		d.stop()
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(took)
	b.Logf("log %.1f MiB; starts until /readyz: %v", float64(logBytes)/(1<<20), took)
	b.ReportMetric(took[len(took)/2].Seconds(), "s/ready-median")
	b.ReportMetric(float64(logBytes)/(1<<20), "MiB-log")
}

// logOnDisk returns the size of the log segments in dir.
func logOnDisk(b *testing.B, dir string) int64 {
	ents, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "wal-") {
			if fi, err := e.Info(); err == nil {
				n += fi.Size()
			}
		}
	}
	return n
}

// copyTree copies the regular files and directories under from to to,
// keeping their modes, and syncs the files.
func copyTree(b *testing.B, from, to string) {
	b.Helper()
	err := filepath.WalkDir(from, func(path string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		dst := filepath.Join(to, rel)
		fi, err := e.Info()
		if err != nil {
			return err
		}
		switch {
		case e.IsDir():
			return os.MkdirAll(dst, fi.Mode().Perm())
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			// Synced, as a crash leaves what an fsync covered: the start
			// must not pay for writing out the copy.
			f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm())
			if err != nil {
				return err
			}
			if _, err := f.Write(data); err != nil {
				f.Close()
				return err
			}
			if err := f.Sync(); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		}
		return nil // the socket
	})
	if err != nil {
		b.Fatal(err)
	}
}
