package ipc_test

import (
	"fmt"
	"log/slog"
	"net/http/httptest"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/ipc"
	"github.com/localbus/localbus/ipc/ipctest"
)

// BenchmarkSessionsPage answers one page of 1,000 sessions from the
// middle of 1,000 and of 100,000 sessions: the page's cost should not grow
// with the sessions (SPEC §6; a target of ≤ 2×). cpu-ns/op is the
// process's processor time per page, the garbage collector's included: on
// a machine other work keeps busy it moves less than the time per page,
// which counts the moments another process has the core.
func BenchmarkSessionsPage(b *testing.B) {
	for _, n := range []int{1000, 100_000} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			h, err := hub.New(hub.Options{MaxSessions: n, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			for i := range n {
				if _, err := h.Create(bustest.SessionID(fmt.Sprintf("s-%06d", i)), 1); err != nil {
					b.Fatal(err)
				}
			}
			handler := ipc.New(ipc.Options{Hub: h, Settings: ipc.Settings{Authenticate: ipctest.AllowAll}})
			after := fmt.Sprintf("s-%06d", n/2-500)
			if n == 1000 {
				after = ""
			}
			target := "/api/v1/sessions?limit=1000&after=" + after
			if after == "" {
				target = "/api/v1/sessions?limit=1000"
			}
			runtime.GC() // not the set-up's garbage
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU()
			for b.Loop() {
				w := httptest.NewRecorder()
				handler.ServeHTTP(w, httptest.NewRequest("GET", target, nil))
				if w.Code != 200 {
					b.Fatalf("%s = %d %s", target, w.Code, w.Body)
				}
			}
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is the processor time this process has used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
