package upstream_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/localbus/localbus/daemon/daemontest"
)

// TestMain checks for leaked goroutines and removes the daemon binary the
// benchmark built.
func TestMain(m *testing.M) { goleak.VerifyTestMain(cleanupM{m}) }

type cleanupM struct{ m *testing.M }

func (c cleanupM) Run() int {
	defer daemontest.Cleanup()
	return c.m.Run()
}
