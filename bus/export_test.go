package bus

// Doors for the tests of package bus_test, which drive the variants of
// Stage directly.

// PublishDaemon publishes the daemon's own events (Batch.Daemon).
func (b *Bus) PublishDaemon(events ...Event) (first, last uint64, err error) {
	st, err := b.Stage(Batch{Events: events, Daemon: true})
	if err != nil {
		return 0, 0, err
	}
	return st.First, st.Last, b.Finish(st)
}

// StageFrames is Stage with KeepFrames, appending to dst.
func (b *Bus) StageFrames(dst []*Frame, events ...Event) ([]*Frame, Staged, error) {
	st, err := b.Stage(Batch{Events: events, KeepFrames: true, Frames: dst})
	if err != nil {
		return dst, Staged{}, err
	}
	return st.Frames, st, nil
}

// PublishFrames is Publish that returns the frames, appended to dst (dst
// on error).
func (b *Bus) PublishFrames(dst []*Frame, events ...Event) ([]*Frame, error) {
	frames, st, err := b.StageFrames(dst, events...)
	if err != nil {
		return dst, err
	}
	if err := b.Finish(st); err != nil {
		return dst, err
	}
	return frames, nil
}

// PublishCopies publishes copies on the global bus (Batch.Copies).
func (b *Bus) PublishCopies(batches ...Copies) (first, last uint64, err error) {
	st, err := b.Stage(Batch{Copies: batches})
	if err != nil {
		return 0, 0, err
	}
	return st.First, st.Last, b.Finish(st)
}
