package daemon_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/localbus/localbus/daemon/daemontest"
)

// TestRSSUnderRingPressureStaysWithinTheBudget fills max_ring_bytes_total
// (256 MiB) twice over from 64 sessions, with batches of 16 events of 64
// KiB, so that the rings are full and evicting, and reads the daemon's
// resident set from /proc: its peak (VmHWM) must stay within 1.5 × the
// rings' budget + 64 MiB, with either durability. The daemon is built
// without the race detector, whose shadow memory would be measured too.
func TestRSSUnderRingPressureStaysWithinTheBudget(t *testing.T) {
	const (
		rings    = 256 << 20
		sessions = 64
		perBatch = 16
		rounds   = 8 // 64 sessions × 8 rounds × 1 MiB: twice the rings
		bound    = rings + rings/2 + 64<<20
	)
	body := fillBatch(perBatch, 64<<10)
	for _, durability := range []string{"memory", "disk"} {
		t.Run(durability, func(t *testing.T) {
			opts := daemontest.Options{Plain: true, Args: []string{"--max-ring-bytes-total", strconv.Itoa(rings)}}
			if durability == "disk" {
				opts.Durable = true
			}
			d := daemontest.Start(t, opts)
			pid := d.Cmd.Process.Pid
			start := procStatusMiB(t, pid)
			var highest float64 // of VmRSS read after each round
			for round := range rounds {
				for s := range sessions {
					publishBody(t, d, fmt.Sprintf("s%d", s), body)
				}
				rss := procStatusMiB(t, pid)["VmRSS"]
				highest = max(highest, rss)
				t.Logf("%s: round %d (%d MiB published): VmRSS %.0f MiB", durability, round+1, (round+1)*sessions*len(body)>>20, rss)
			}
			held := ringBytes(t, d)
			if held < rings*9/10 {
				t.Fatalf("the rings hold %d bytes, want the budget of %d filled: the test measured nothing", held, rings)
			}
			end := procStatusMiB(t, pid)
			t.Logf("%s: rings hold %.0f MiB of %d; VmRSS %.0f MiB at the start, %.0f at most after a round, %.0f at the end; peak (VmHWM) %.0f MiB; bound %d MiB",
				durability, float64(held)/(1<<20), rings>>20, start["VmRSS"], highest, end["VmRSS"], end["VmHWM"], bound>>20)
			if end["VmHWM"] > bound>>20 {
				t.Errorf("%s: peak RSS %.0f MiB, over 1.5 × max_ring_bytes_total + 64 MiB = %d MiB", durability, end["VmHWM"], bound>>20)
			}
		})
	}
}

// fillBatch returns a JSON array of n events whose data are each size bytes.
func fillBatch(n, size int) []byte {
	pad := strings.Repeat("x", size-len(`{"i":"0000","p":""}`))
	var b bytes.Buffer
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"type":"fill:ev","data":{"i":"%04d","p":"%s"}}`, i, pad)
	}
	b.WriteByte(']')
	return b.Bytes()
}

// publishBody posts body to session's events and fails the test unless it
// is published.
func publishBody(t *testing.T, d *daemontest.Daemon, session string, body []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), daemontest.RequestTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://localbus/api/v1/sessions/"+session+"/events", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	reply, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("publish to %s: %d %s", session, resp.StatusCode, reply)
	}
}

// procStatusMiB reads pid's VmRSS and VmHWM, in MiB.
func procStatusMiB(t *testing.T, pid int) map[string]float64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string]float64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kib, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		if err != nil {
			t.Fatalf("/proc/%d/status: %s: %v", pid, sc.Text(), err)
		}
		got[k] = kib / 1024
	}
	if len(got) != 2 {
		t.Fatalf("/proc/%d/status: no VmRSS and VmHWM (%v)", pid, got)
	}
	return got
}

// ringBytes sums the daemon's localbus_ring_bytes metric over its buses.
func ringBytes(t *testing.T, d *daemontest.Daemon) int64 {
	t.Helper()
	status, body := d.Do(t, http.MethodGet, "/metrics", "")
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: %d", status)
	}
	var total int64
	found := false
	for line := range strings.Lines(string(body)) {
		if !strings.HasPrefix(line, "localbus_ring_bytes{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("/metrics: %q: %v", line, err)
		}
		total += int64(v)
		found = true
	}
	if !found {
		t.Fatal("/metrics has no localbus_ring_bytes")
	}
	return total
}
