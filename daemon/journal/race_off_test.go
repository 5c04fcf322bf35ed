//go:build !race

package journal_test

// raceOn reports whether the race detector is on: the slowest tests then
// do a fraction of their work.
const raceOn = false
