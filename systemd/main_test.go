package systemd

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/localbus/localbus/bus/bustest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	bustest.Eventually(t, timeout, what, cond)
}
