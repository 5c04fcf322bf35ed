package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/ipc/wire/grammar"
)

// exportCursor is the last event of a session that JetStream acknowledged.
type exportCursor struct {
	epoch string
	id    uint64
}

func (c exportCursor) encode() []byte { return []byte(c.epoch + "/" + strconv.FormatUint(c.id, 10)) }

func decodeExportCursor(v []byte) (exportCursor, bool) {
	epoch, id, ok := strings.Cut(string(v), "/")
	n, err := strconv.ParseUint(id, 10, 64)
	if !ok || err != nil {
		return exportCursor{}, false
	}
	return exportCursor{epoch, n}, true
}

func exportCursorName(session string) string { return "upstream.export:" + session }

// errSessionGone ends an exporter: its session was deleted.
var errSessionGone = errors.New("session deleted")

// errLagged ends a round: the exporter fell behind its bus and was evicted.
var errLagged = errors.New("fell behind the bus")

// errBehind ends a round: the ring moved past the exporter, which reads
// the journal's backlog again.
var errBehind = errors.New("behind the ring")

// An exporter sends one session's events to the stream.
type exporter struct {
	b       *Bridge
	session string
	subject string
	prev    *exporter // a stopped exporter of the same session, waited for
	ctx     context.Context
	cancel  context.CancelFunc
	fin     chan struct{} // closed when run returns

	mu       sync.Mutex // guards the fields below; a leaf
	acked    exportCursor
	has      bool // acked was read from the journal or set since
	saved    exportCursor
	exported uint64
	lost     uint64
}

func newExporter(b *Bridge, session, subject string, prev *exporter) *exporter {
	e := &exporter{b: b, session: session, subject: subject, prev: prev, fin: make(chan struct{})}
	e.ctx, e.cancel = context.WithCancel(b.ctx)
	return e
}

func (e *exporter) stop() { e.cancel() }

// done reports whether run has returned.
func (e *exporter) done() bool {
	select {
	case <-e.fin:
		return true
	default:
		return false
	}
}

func (e *exporter) cursor() (exportCursor, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.acked, e.has
}

func (e *exporter) run() {
	defer close(e.fin)
	if e.prev != nil {
		<-e.prev.fin
	}
	log := e.b.logger.With("session", e.session)
	v, err := e.b.opts.Cursors.Cursor(exportCursorName(e.session))
	if err != nil {
		log.Error("upstream: cannot read the export cursor", "err", err)
		return
	}
	if c, ok := decodeExportCursor(v); ok {
		e.acked, e.saved, e.has = c, c, true
	}
	if bl := e.b.opts.Backlog; bl != nil {
		// The journal holds what the session owes export since it was
		// first exported: without a cursor of the session's epoch, export
		// starts where the hold does.
		epoch, id, held := bl.HoldExport(e.session, e.acked.epoch, e.acked.id)
		if held && (!e.has || e.acked.epoch != epoch) {
			e.acked, e.has = exportCursor{epoch, id}, true
		}
	}
	backoff := 100 * time.Millisecond
	for {
		if !e.b.ready(e.ctx) {
			e.save()
			return
		}
		err := e.round()
		e.save()
		switch {
		case e.ctx.Err() != nil:
			return
		case errors.Is(err, errSessionGone):
			return
		case errors.Is(err, errLagged), errors.Is(err, errBehind):
			backoff = 100 * time.Millisecond
			continue
		case err != nil:
			e.b.setErr(fmt.Errorf("export %s: %w", e.session, err))
			log.Warn("upstream: export interrupted; resuming from the cursor", "err", err, "cursor", e.acked.id)
			if !sleep(e.ctx, backoff) {
				return
			}
			backoff = min(2*backoff, 5*time.Second)
		default:
			backoff = 100 * time.Millisecond
		}
	}
}

// save writes the acknowledged cursor to the journal if it moved.
func (e *exporter) save() {
	e.mu.Lock()
	c, saved := e.acked, e.saved
	e.mu.Unlock()
	if c == saved {
		return
	}
	if err := e.b.opts.Cursors.PutCursor(exportCursorName(e.session), c.encode()); err != nil {
		e.b.logger.Warn("upstream: cannot write the export cursor", "session", e.session, "err", err)
		return
	}
	e.mu.Lock()
	e.saved = c
	e.mu.Unlock()
	if bl := e.b.opts.Backlog; bl != nil {
		bl.HoldExport(e.session, c.epoch, c.id)
	}
}

// round subscribes to the session from the cursor and publishes until
// something fails, the exporter stops or the bus ends the stream.
func (e *exporter) round() error {
	s, ok := e.b.opts.Hub.Session(e.session)
	if !ok {
		return errSessionGone
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	cur, has := e.cursor()
	pub, err := newPublisher(e, e.b.opts.Window)
	if err != nil {
		return err
	}
	defer pub.close()
	acks := make(chan inflight, e.b.opts.Window)
	ackErr := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() { e.readAcks(ctx, pub, acks, ackErr) })
	defer func() {
		close(acks)
		wg.Wait()
	}()

	// Behind the ring, read the journal's backlog until caught up.
	first := true
	if bl := e.b.opts.Backlog; has && bl != nil {
		var batch []*bus.Frame
		for {
			batch = bl.ReadExport(e.session, cur.epoch, cur.id+1, s.Bus.LastID(), backlogBatch, batch[:0])
			if len(batch) == 0 {
				break
			}
			if batch[0].ID > cur.id+1 {
				e.lose(cur.id+1, batch[0].ID-1)
			}
			for _, f := range batch {
				if !f.Reserved() {
					if err := e.publish(ctx, pub, f, exportCursor{cur.epoch, f.ID}, first, acks, ackErr); err != nil {
						return err
					}
					first = false
				}
				cur.id = f.ID
			}
			if ctx.Err() != nil {
				return nil
			}
			if len(batch) < backlogBatch {
				break
			}
		}
		clear(batch)
	}

	opts := bus.SubscribeOptions{Cursor: new(uint64), MaxQueued: grammar.MaxMaxQueued}
	if has {
		*opts.Cursor, opts.Epoch = cur.id, cur.epoch
	}
	sub, err := s.Bus.Subscribe(ctx, opts)
	if errors.Is(err, bus.ErrClosed) {
		return errSessionGone
	}
	if err != nil {
		return err
	}
	defer sub.Close()

	epoch := cur.epoch
	var frames []*bus.Frame
	for {
		select {
		case <-sub.Ready():
		case err := <-ackErr:
			return err
		case <-ctx.Done():
			return nil
		}
		var ended bool
		frames, ended = sub.Take(frames[:0])
		for _, f := range frames {
			switch f.Type {
			case bus.TypeReady:
				var r struct{ Data bus.ReadyData }
				if err := json.Unmarshal(f.JSON(), &r); err != nil {
					return err
				}
				epoch = r.Data.Epoch
			case bus.TypeGap:
				g := gapData(f)
				if e.b.opts.Backlog != nil && has && g.Reason == bus.GapRingEvicted {
					// Evicted from the ring, not lost: the backlog holds it.
					return errBehind
				}
				e.gap(g, cur, has)
			case bus.TypeLagged:
				return errLagged
			case bus.TypeClosed:
				var c struct{ Data bus.ClosedData }
				json.Unmarshal(f.JSON(), &c)
				if c.Data.Reason == string(bus.EndSessionDeleted) {
					// Let the acknowledgements of what was sent arrive.
					close(acks)
					wg.Wait()
					acks = make(chan inflight) // for the deferred close
					return errSessionGone
				}
				return nil
			case bus.TypeReplayed, bus.TypeSlow, bus.TypeError:
			default:
				if f.Reserved() {
					continue
				}
				at := exportCursor{epoch, f.ID}
				if err := e.publish(ctx, pub, f, at, first, acks, ackErr); err != nil {
					return err
				}
				first = false
			}
		}
		clear(frames)
		if ended {
			if sub.End() == bus.EndSessionDeleted {
				return errSessionGone
			}
			return nil
		}
	}
}

// backlogBatch is the most events read from the journal's backlog at once.
const backlogBatch = 1024

// lose counts and logs the ids from..to, which the backlog dropped before
// they were exported.
func (e *exporter) lose(from, to uint64) {
	n := to - from + 1
	e.mu.Lock()
	e.lost += n
	e.mu.Unlock()
	e.b.lost.Add(n)
	e.b.logger.Warn("upstream: events dropped before export (backlog_bytes reached)", "session", e.session,
		"from", from, "to", to, "lost", n)
}

// gapData returns the data of a stream:gap frame.
func gapData(f *bus.Frame) bus.GapData {
	var g struct{ Data bus.GapData }
	json.Unmarshal(f.JSON(), &g)
	return g.Data
}

// gap logs and counts what the ring no longer held, from the gap's data.
func (e *exporter) gap(g bus.GapData, cur exportCursor, has bool) {
	if !has {
		e.b.logger.Info("upstream: first export of a session starts at the oldest event its ring holds", "session", e.session)
		return
	}
	var lost uint64
	if g.Reason == bus.GapRingEvicted && g.EarliestAvailableID != nil {
		lost = *g.EarliestAvailableID - cur.id - 1
	} else if g.Reason == bus.GapRingEvicted {
		lost = g.LastID - cur.id
	}
	e.mu.Lock()
	e.lost += lost
	e.mu.Unlock()
	e.b.lost.Add(lost)
	e.b.logger.Warn("upstream: export resumes past a gap", "session", e.session, "reason", g.Reason,
		"cursor", cur.id, "lost", lost)
}
