package daemon

import (
	"os"
	"runtime/debug"
)

// minMemoryOverhead is the least the daemon may use beyond its configured
// budgets: code, goroutine stacks, connection buffers, subscriber queues,
// what the rings' frames cost beyond their bytes, and the garbage
// collector's slack.
const minMemoryOverhead = 64 << 20

// memoryLimit is the Go runtime's soft memory limit for cfg: what it
// budgets for events (the rings of every bus together, and request bodies
// being read at once) plus a quarter of the rings' budget, at least
// minMemoryOverhead, for everything else. With the default 1 GiB of rings
// that is the 256 MiB the daemon allowed whatever the rings' budget; a
// smaller budget now makes a smaller daemon: with 256 MiB of rings and the
// default 64 MiB of bodies the limit is 384 MiB, and the resident set of a
// daemon whose rings are full stays within 1.5 × the rings + 64 MiB
// (memory_test.go measures it).
func memoryLimit(cfg Config) int64 {
	return cfg.MaxRingBytesTotal + max(cfg.MaxRingBytesTotal/4, minMemoryOverhead) + cfg.MaxInflightBodyBytes
}

// setMemoryLimit sets the Go runtime's soft memory limit to memoryLimit,
// so that garbage left by evicted and trimmed events is collected before
// the process grows past its budgets, rather than whenever the heap has
// doubled. An operator's GOMEMLIMIT wins. It returns the limit set, or 0
// when it left the runtime's alone.
func setMemoryLimit(cfg Config) int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	limit := memoryLimit(cfg)
	debug.SetMemoryLimit(limit)
	return limit
}
