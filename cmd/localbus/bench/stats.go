package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// Percentiles summarise a set of durations, in milliseconds.
type Percentiles struct {
	Count int     `json:"count"`
	Min   float64 `json:"min"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p999"`
	Max   float64 `json:"max"`
	Mean  float64 `json:"mean"`
}

// percentiles sorts ns (durations in nanoseconds) and summarises them.
func percentiles(ns []int64) *Percentiles {
	if len(ns) == 0 {
		return &Percentiles{}
	}
	slices.Sort(ns)
	at := func(q float64) float64 {
		i := int(q*float64(len(ns))+0.5) - 1
		i = max(0, min(i, len(ns)-1))
		return ms(ns[i])
	}
	var sum float64
	for _, v := range ns {
		sum += float64(v)
	}
	return &Percentiles{
		Count: len(ns), Min: ms(ns[0]), P50: at(0.50), P90: at(0.90), P99: at(0.99), P999: at(0.999),
		Max: ms(ns[len(ns)-1]), Mean: sum / float64(len(ns)) / 1e6,
	}
}

func ms(ns int64) float64 { return float64(ns) / float64(time.Millisecond) }

// Memory is a process's resident memory, from /proc/PID/status, in KiB.
type Memory struct {
	PID int `json:"pid"`
	// BeforeKiB is VmRSS before the scenario opened its streams.
	BeforeKiB int64 `json:"beforeKiB"`
	// AfterKiB is VmRSS with the streams open and settled.
	AfterKiB int64 `json:"afterKiB"`
	// PeakKiB is the highest VmRSS sampled during the scenario.
	PeakKiB int64 `json:"peakKiB"`
	// PerStreamKiB is (AfterKiB − BeforeKiB) / streams, for idle; absent
	// when the RSS fell meanwhile (Note says so), never negative.
	PerStreamKiB float64 `json:"perStreamKiB,omitempty"`
	// Note explains a figure that could not be measured.
	Note string `json:"note,omitempty"`
}

// perStream is the memory each of n streams costs, from the RSS before
// they opened and after; when the RSS fell meanwhile (the process gave
// memory back) there is no figure, and the note says why.
func perStream(before, after int64, n int) (float64, string) {
	if after < before || n <= 0 {
		return 0, fmt.Sprintf("RSS fell by %d KiB while the streams were open (the daemon returned memory that earlier work freed): no per-stream figure; run idle on a fresh daemon", before-after)
	}
	return float64(after-before) / float64(n), ""
}

// settledRSS reads pid's VmRSS every 100 ms until two readings differ by
// less than 1% (or 2 s have passed) and returns the last one.
func settledRSS(ctx context.Context, pid int) (int64, error) {
	prev, err := readRSS(pid)
	if err != nil {
		return 0, err
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for range 20 {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-t.C:
		}
		v, err := readRSS(pid)
		if err != nil {
			return 0, err
		}
		if d := v - prev; d*100 < v && -d*100 < v {
			return v, nil
		}
		prev = v
	}
	return prev, nil
}

// readRSS returns a process's VmRSS in KiB.
func readRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Bytes()
		if v, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			v = bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(v), []byte("kB")))
			return strconv.ParseInt(string(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("bench: no VmRSS in /proc/%d/status", pid)
}

// rssSampler samples a process's RSS until stopped, keeping the peak.
type rssSampler struct {
	pid  int
	stop chan struct{}
	done chan struct{}
	peak int64
}

func sampleRSS(pid int, every time.Duration) *rssSampler {
	s := &rssSampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if v, err := readRSS(pid); err == nil && v > s.peak {
				s.peak = v
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// Stop stops sampling and returns the peak, in KiB.
func (s *rssSampler) Stop() int64 {
	close(s.stop)
	<-s.done
	if v, err := readRSS(s.pid); err == nil && v > s.peak {
		s.peak = v
	}
	return s.peak
}

// CPU is the processor time a run used, in seconds: the server's (the
// daemon, when its process is known, or the baseline server, a process of
// its own) and the bench's own, whose clients read every stream.
type CPU struct {
	// PID is the server's process, 0 when unknown.
	PID    int     `json:"pid,omitempty"`
	Server float64 `json:"server,omitempty"`
	Bench  float64 `json:"bench"`
	// ServerNsPerDelivery is Server over the deliveries, in nanoseconds.
	ServerNsPerDelivery float64 `json:"serverNsPerDelivery,omitempty"`
}

// cpuClock reads processor times: the server's from /proc/PID/stat (all
// threads, user and system, in clock ticks of 1/100 s) and this process's
// from getrusage.
type cpuClock struct {
	pid           int
	server, bench float64
}

func startCPU(pid int) *cpuClock {
	c := &cpuClock{pid: pid}
	c.server, c.bench = procCPU(pid), selfCPU()
	return c
}

// stop returns the time used since start.
func (c *cpuClock) stop(deliveries float64) *CPU {
	r := &CPU{Bench: selfCPU() - c.bench, PID: c.pid}
	if c.pid > 0 {
		r.Server = procCPU(c.pid) - c.server
		if deliveries > 0 {
			r.ServerNsPerDelivery = r.Server * 1e9 / deliveries
		}
	}
	return r
}

func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// procCPU returns a process's utime+stime in seconds, 0 if unknown.
func procCPU(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing parenthesis. utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(string(f[11]), 64)
	st, _ := strconv.ParseFloat(string(f[12]), 64)
	return (ut + st) / 100
}
