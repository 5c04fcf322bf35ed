package journal

import "sync"

// hooks are where tests step into a journal's work; nothing in production
// sets them. They are kept by directory, outside Journal and Options, so
// that a test can set them before Open, whose background work starts at
// once, and change them while the journal runs.
type hooks struct {
	// failCheckpoint, if set, makes the database's side of every
	// checkpoint, compaction and trim fail with its error.
	failCheckpoint func() error
	// afterCheckpoint, if set, is called by every checkpoint that copies
	// the segments up to seq, once its transaction is committed (removed
	// false) and once the segments are removed (removed true).
	afterCheckpoint func(seq uint64, removed bool)
	// beforePersist, if set, runs before recovery writes what it found;
	// its error is the write's (ErrDiskFull leaves the journal read-only).
	beforePersist func() error
}

// hooksByDir maps a journal directory to its *hooks.
var hooksByDir sync.Map

// hooks returns the journal's test hooks; nil in production.
func (j *Journal) hooks() *hooks {
	if h, ok := hooksByDir.Load(j.dir); ok {
		return h.(*hooks)
	}
	return nil
}
