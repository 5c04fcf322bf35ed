package daemon

import (
	"runtime/debug"
	"testing"
)

func TestMemoryLimitFollowsTheBudgetsUnlessGOMEMLIMITIsSet(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })

	cfg := Defaults()
	cfg.MaxRingBytesTotal, cfg.MaxInflightBodyBytes = 100<<20, 10<<20
	t.Setenv("GOMEMLIMIT", "")
	want := int64(110<<20 + memoryOverhead)
	if got := setMemoryLimit(cfg); got != want {
		t.Fatalf("setMemoryLimit = %d, want %d", got, want)
	}
	if got := debug.SetMemoryLimit(-1); got != want {
		t.Fatalf("runtime memory limit = %d, want %d", got, want)
	}

	debug.SetMemoryLimit(old)
	t.Setenv("GOMEMLIMIT", "1GiB")
	if got := setMemoryLimit(cfg); got != 0 {
		t.Fatalf("with GOMEMLIMIT set, setMemoryLimit = %d, want 0 (left alone)", got)
	}
	if got := debug.SetMemoryLimit(-1); got != old {
		t.Fatalf("with GOMEMLIMIT set, the runtime limit became %d, want %d unchanged", got, old)
	}
}
