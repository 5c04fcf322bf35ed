package ipc_test

import (
	"fmt"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/ipc"
	"github.com/localbus/localbus/ipc/ipctest"
)

// BenchmarkSessionsPage answers one page of 1,000 sessions from the
// middle of 1,000 and of 100,000 sessions: the page's cost should not grow
// with the sessions (SPEC §6; a target of ≤ 2×).
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
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				w := httptest.NewRecorder()
				handler.ServeHTTP(w, httptest.NewRequest("GET", target, nil))
				if w.Code != 200 {
					b.Fatalf("%s = %d %s", target, w.Code, w.Body)
				}
			}
		})
	}
}
