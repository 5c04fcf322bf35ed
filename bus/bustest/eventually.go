package bustest

import "time"

// Eventually polls cond until it holds, failing the test with what once
// within has passed. It is the one polling helper of the tests: a wait for
// a state that no event announces (a subscriber count, a log line, a
// process's exit), always bounded. The polling interval starts at a
// millisecond and doubles up to 20 ms.
func Eventually(tb TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(within)
	interval := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(interval) // polling, bounded by the deadline; not synchronisation
		interval = min(2*interval, 20*time.Millisecond)
	}
}

// Showing returns tb, whose Fatalf adds what state returns then: a wait
// with Eventually that runs out shows the state it waited on (a process's
// stderr, a terminal's screen).
func Showing(tb TB, state func() string) TB { return showing{tb, state} }

type showing struct {
	TB
	state func() string
}

func (s showing) Fatalf(format string, args ...any) {
	s.TB.Helper()
	s.TB.Fatalf(format+"; now:\n%s", append(args, s.state())...)
}
