package daemon

import (
	"runtime/debug"
	"testing"
)

func TestMemoryLimitFollowsTheBudgetsUnlessGOMEMLIMITIsSet(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })

	for _, c := range []struct{ rings, bodies, want int64 }{
		{1 << 30, 64 << 20, 1<<30 + 256<<20 + 64<<20}, // the defaults: a quarter of the rings
		{256 << 20, 64 << 20, 384 << 20},              // a quarter of 256 MiB is the least overhead
		{100 << 20, 10 << 20, 110<<20 + minMemoryOverhead},
		{4 << 30, 64 << 20, 5<<30 + 64<<20},
	} {
		cfg := Defaults()
		cfg.MaxRingBytesTotal, cfg.MaxInflightBodyBytes = c.rings, c.bodies
		if got := memoryLimit(cfg); got != c.want {
			t.Errorf("memoryLimit(rings %d, bodies %d) = %d, want %d", c.rings, c.bodies, got, c.want)
		}
	}

	cfg := Defaults()
	cfg.MaxRingBytesTotal, cfg.MaxInflightBodyBytes = 100<<20, 10<<20
	t.Setenv("GOMEMLIMIT", "")
	want := int64(110<<20 + minMemoryOverhead)
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
