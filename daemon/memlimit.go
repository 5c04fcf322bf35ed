package daemon

import (
	"os"
	"runtime/debug"
)

// memoryOverhead is what the daemon may use beyond its configured budgets:
// code, goroutine stacks, connection buffers, subscriber queues, the
// database's pages and the garbage collector's slack.
const memoryOverhead = 256 << 20

// setMemoryLimit sets the Go runtime's soft memory limit to what cfg budgets
// for events (the rings of every bus together, and request bodies being read
// at once) plus memoryOverhead, so that garbage left by evicted and trimmed
// events is collected before the process grows past its budgets, rather than
// whenever the heap has doubled. An operator's GOMEMLIMIT wins. It returns
// the limit set, or 0 when it left the runtime's alone.
func setMemoryLimit(cfg Config) int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	limit := cfg.MaxRingBytesTotal + cfg.MaxInflightBodyBytes + memoryOverhead
	debug.SetMemoryLimit(limit)
	return limit
}
