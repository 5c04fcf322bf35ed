package ipc

import (
	"fmt"
	"net/http"
	"syscall"
	"testing"

	"github.com/localbus/localbus/bus"
)

// TestAsErrorMapsStoreErrors pins the statuses of the errors a bus.Store
// may return, however the store wrapped them: the router knows them from
// bus alone, not from the journal that returns them.
func TestAsErrorMapsStoreErrors(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantCode   string
	}{
		{"disk full", fmt.Errorf("%w: %w", bus.ErrDiskFull, syscall.ENOSPC), http.StatusInsufficientStorage, "disk_full"},
		{"disk full, wrapped again", fmt.Errorf("session s: %w", fmt.Errorf("%w: %w", bus.ErrDiskFull, syscall.EDQUOT)), http.StatusInsufficientStorage, "disk_full"},
		{"store closed", bus.ErrStoreClosed, http.StatusServiceUnavailable, "shutting_down"},
		{"store closed, wrapped", fmt.Errorf("append: %w", bus.ErrStoreClosed), http.StatusServiceUnavailable, "shutting_down"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := asError(tt.err)
			if e.Status != tt.wantStatus || e.Code != tt.wantCode {
				t.Errorf("asError(%v) = %d %s, want %d %s", tt.err, e.Status, e.Code, tt.wantStatus, tt.wantCode)
			}
		})
	}
}
