package ipc

import (
	"fmt"
	"net/http"
	"syscall"
	"testing"

	"github.com/localbus/localbus/daemon/journal"
)

func TestAsErrorMapsJournalErrors(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantCode   string
	}{
		{"disk full", fmt.Errorf("%w: %w", journal.ErrDiskFull, syscall.ENOSPC), http.StatusInsufficientStorage, "disk_full"},
		{"journal closed", journal.ErrClosed, http.StatusServiceUnavailable, "shutting_down"},
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
