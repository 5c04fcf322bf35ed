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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localbus/localbus/bus"
)

func importCursorName(pattern string) string { return "upstream.import:" + pattern }

// maxImportBatch is the most events published to a mirror at once, with
// one journal append: as many as one local publish may carry, so a
// mirror's readers see no larger batch than its origin's did. A reader
// whose live queue is smaller (the default is 256) may be evicted by such
// a batch while a mirror catches up, and resumes from the ring like any
// slow reader; a mirror that keeps up appends what arrived during the
// last append, far fewer.
const maxImportBatch = 1000

// An importer mirrors the sessions that match one import pattern.
type importer struct {
	b       *Bridge
	pattern string
	filter  string // the consumer's filter subject
	ctx     context.Context
	cancel  context.CancelFunc
	fin     chan struct{}

	mu    sync.Mutex // guards seq; a leaf
	seq   uint64     // the last stream sequence applied
	saved uint64     // the last one written to the journal; only run's goroutine
	at    time.Time  // when it was written
}

// A mirror is the state of one local mirror session.
type mirror struct {
	node, session string // the source
	mu            sync.Mutex
	epoch         string // the source's epoch of the last event applied
	id            uint64 // the source's id of the last event applied
	imported      uint64
	lost, gaps    uint64 // origin ids found missing, and the jumps that skipped them
	known         bool   // epoch and id are set (from the ring or an event)
}

// syncImportersLocked starts an importer per new pattern and stops those
// of removed ones. b.mu must be held.
func (b *Bridge) syncImportersLocked() {
	if b.closed {
		return
	}
	want := map[string]bool{}
	for _, p := range b.pat.Load().imports {
		want[p] = true
	}
	for p, im := range b.importers {
		if !want[p] {
			im.cancel()
			delete(b.importers, p)
		}
	}
	for p := range want {
		if _, ok := b.importers[p]; ok {
			continue
		}
		node, _, _ := strings.Cut(p, "/")
		filter := SubjectPrefix + ".>"
		if !strings.ContainsAny(node, `*?[\`) {
			filter = SubjectPrefix + "." + node + ".>"
		}
		im := &importer{b: b, pattern: p, filter: filter, fin: make(chan struct{})}
		im.ctx, im.cancel = context.WithCancel(b.ctx)
		b.importers[p] = im
		b.wg.Go(im.run)
	}
}

func (im *importer) run() {
	defer close(im.fin)
	log := im.b.logger.With("import", im.pattern)
	v, err := im.b.opts.Cursors.Cursor(importCursorName(im.pattern))
	if err != nil {
		log.Error("upstream: cannot read the import cursor", "err", err)
		return
	}
	if v != nil {
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			log.Warn("upstream: bad import cursor; reading the stream from its start", "cursor", string(v))
		}
		im.seq, im.saved = n, n
	}
	backoff := 100 * time.Millisecond
	for {
		if !im.b.ready(im.ctx) {
			im.save()
			return
		}
		from := im.seq
		err := im.round()
		im.save()
		if im.ctx.Err() != nil {
			return
		}
		if err != nil {
			im.b.setErr(fmt.Errorf("import %s: %w", im.pattern, err))
			log.Warn("upstream: import interrupted; resuming from the cursor", "err", err, "seq", im.seq)
		}
		if im.seq != from {
			backoff = 100 * time.Millisecond // the round made progress
		}
		if !sleep(im.ctx, backoff) {
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// round reads the stream from the cursor until something fails or the
// importer stops, with a pull consumer of its own that takes no
// acknowledgements. It asks for what the stream holds past the last
// message without waiting (up to maxImportBatch), applies it, and asks
// again; only when nothing is there does it wait, for one message. So a
// mirror that keeps up takes what arrived while it appended the last
// batch in one pull, and NATS sends it at once, rather than each message
// as it is stored. A message missing from the consumer's sequence (lost
// on the way) ends the round, and the next starts again from the cursor.
func (im *importer) round() error {
	cfg := jetstream.ConsumerConfig{
		FilterSubject: im.filter, DeliverPolicy: jetstream.DeliverAllPolicy, AckPolicy: jetstream.AckNonePolicy,
		MemoryStorage: true, InactiveThreshold: time.Minute,
	}
	if im.seq > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, im.seq+1
	}
	// The round ends when the connection's state changes: a consumer of
	// its own may be gone with a restarted server.
	im.b.mu.Lock()
	changed := im.b.connWait
	im.b.mu.Unlock()
	rctx, stop := context.WithCancel(im.ctx)
	defer stop()
	go func() {
		select {
		case <-changed:
			stop()
		case <-rctx.Done():
		}
	}()
	ctx, cancel := context.WithTimeout(rctx, im.b.opts.AckTimeout)
	cons, err := im.b.js.CreateConsumer(ctx, im.b.cfg.Stream, cfg)
	cancel()
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), im.b.opts.AckTimeout)
		defer cancel()
		im.b.js.DeleteConsumer(ctx, im.b.cfg.Stream, cons.CachedInfo().Name) // else it expires
	}()
	batch := make([]jetstream.Msg, 0, maxImportBatch)
	seqs := make([]uint64, 0, maxImportBatch)
	var delivered uint64 // the consumer's sequence of the last message
	for {
		batch, seqs = batch[:0], seqs[:0]
		mb, err := cons.FetchNoWait(maxImportBatch)
		if err != nil {
			return err
		}
		for m := range mb.Messages() {
			batch = append(batch, m)
		}
		if err := mb.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return err
		}
		if len(batch) == 0 {
			wait, cancel := context.WithTimeout(rctx, importWait)
			m, err := cons.Next(jetstream.FetchContext(wait))
			cancel()
			switch {
			case im.ctx.Err() != nil:
				return nil
			case rctx.Err() != nil:
				return errConnChanged
			case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
				// Nothing came: is the consumer still there?
				ctx, cancel := context.WithTimeout(rctx, im.b.opts.AckTimeout)
				_, err := cons.Info(ctx)
				cancel()
				if err != nil {
					return err
				}
				continue
			case err != nil:
				return err
			}
			batch = append(batch, m)
		}
		for _, m := range batch {
			md, err := m.Metadata()
			if err != nil {
				return err
			}
			if md.Sequence.Consumer != delivered+1 {
				return fmt.Errorf("message %d of the consumer missing (got %d)", delivered+1, md.Sequence.Consumer)
			}
			delivered = md.Sequence.Consumer
			seqs = append(seqs, md.Sequence.Stream)
		}
		if err := im.apply(batch, seqs); err != nil {
			return err
		}
	}
}

// importWait is the longest an importer waits for a message in one pull.
const importWait = 10 * time.Second

// incoming is one message decoded.
type incoming struct {
	seq    uint64
	mirror bus.SessionID
	origin bus.RemoteOrigin
	ev     bus.Event
}

// apply publishes a batch of messages, whose stream sequences are seqs,
// to their mirrors, in order, then writes the cursor.
func (im *importer) apply(batch []jetstream.Msg, seqs []uint64) error {
	var run []bus.Event // consecutive events of one mirror
	var runMirror *mirror
	var runID bus.SessionID
	var lastSeq uint64
	flush := func() error {
		if len(run) == 0 {
			return nil
		}
		if _, _, err := im.b.opts.Hub.PublishMirror(runID, run); err != nil {
			return fmt.Errorf("mirror %s: %w", runID, err)
		}
		last := run[len(run)-1].Origin
		var lost, gaps uint64
		for _, e := range run {
			if o := e.Origin; o.LostFrom != 0 {
				lost, gaps = lost+o.LostTo-o.LostFrom+1, gaps+1
				im.b.logger.Warn("upstream: the origin of a mirror lost events; readers get a stream:gap (upstream_lost)",
					"mirror", runID.String(), "epoch", o.Epoch, "from", o.LostFrom, "to", o.LostTo)
			}
		}
		runMirror.mu.Lock()
		runMirror.epoch, runMirror.id, runMirror.known = last.Epoch, last.ID, true
		runMirror.imported += uint64(len(run))
		runMirror.lost += lost
		runMirror.gaps += gaps
		runMirror.mu.Unlock()
		im.b.importLost.Add(lost)
		im.b.importGaps.Add(gaps)
		im.b.imported.Add(uint64(len(run)))
		run = run[:0]
		return nil
	}
	for i, m := range batch {
		in, ok := im.decode(m)
		in.seq = seqs[i]
		if ok && im.b.matchImport(in.origin.Node, in.origin.Session) {
			mr := im.b.mirrorFor(in.mirror.String(), in.origin)
			if runMirror != mr {
				if err := flush(); err != nil {
					return err
				}
				runMirror, runID = mr, in.mirror
			}
			var pending *bus.RemoteOrigin // the run's last, which mr does not know yet
			if len(run) > 0 {
				pending = run[len(run)-1].Origin
			}
			switch act, prev := mr.decide(in.origin, pending); act {
			case applyEvent:
				in.ev.Origin = withLoss(in.origin, prev)
				run = append(run, in.ev)
			case resetMirror:
				if err := flush(); err != nil {
					return err
				}
				im.b.resetMirror(in.mirror.String(), mr, in.origin)
				in.ev.Origin = withLoss(in.origin, 0)
				run = append(run, in.ev)
			case skipEvent:
			}
			if len(run) >= maxImportBatch {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		lastSeq = in.seq
	}
	if err := flush(); err != nil {
		return err
	}
	if lastSeq > 0 {
		im.mu.Lock()
		im.seq = lastSeq
		im.mu.Unlock()
		if time.Since(im.at) >= im.b.opts.CursorInterval {
			im.save()
		}
	}
	return nil
}

// save writes the import cursor to the journal if it moved. It is written
// at most every CursorInterval while messages flow, and when a round
// ends: a mirror skips what it already holds, so a cursor behind costs a
// re-read, never a duplicate.
func (im *importer) save() {
	im.mu.Lock()
	seq := im.seq
	im.mu.Unlock()
	if seq == im.saved {
		return
	}
	if err := im.b.opts.Cursors.PutCursor(importCursorName(im.pattern), []byte(strconv.FormatUint(seq, 10))); err != nil {
		im.b.logger.Warn("upstream: cannot write the import cursor", "import", im.pattern, "err", err)
		return
	}
	im.saved, im.at = seq, time.Now()
}

// decode reads a message (all but its stream sequence); ok is false (and
// the message skipped) when it is not an event of another node that makes
// a valid mirror.
func (im *importer) decode(m jetstream.Msg) (in incoming, ok bool) {
	parts := strings.Split(m.Headers().Get("Nats-Msg-Id"), "/")
	if len(parts) != 4 {
		return in, false
	}
	id, err := strconv.ParseUint(parts[3], 10, 64)
	if err != nil || parts[0] == im.b.cfg.Node {
		return in, false
	}
	in.origin = bus.RemoteOrigin{Node: parts[0], Session: parts[1], ID: id, Epoch: parts[2]}
	var ok2 bool
	if in.mirror, ok2 = mirrorName(in.origin.Node, in.origin.Session); !ok2 {
		im.b.logger.Warn("upstream: remote session makes no valid local session id; skipped", "node", in.origin.Node, "session", in.origin.Session)
		return in, false
	}
	if in.ev, ok = decodeEnvelope(m.Data()); !ok {
		im.b.logger.Warn("upstream: message is not an envelope; skipped", "subject", m.Subject())
		return in, false
	}
	return in, true
}

// matchImport reports whether session of node matches an import pattern.
func (b *Bridge) matchImport(node, session string) bool {
	return node != b.cfg.Node && matchAny(b.pat.Load().imports, node+"/"+session)
}

// What a mirror does with an incoming event.
const (
	applyEvent = iota
	skipEvent
	resetMirror
)

// decide says what to do with an event of the mirror's source: skip it if
// the mirror already has it, reset the mirror if the source's epoch
// changed, else apply it. pending, when not nil, is the origin of the
// last event on its way to the mirror, which counts as the mirror's last.
// prev is the source's id of the mirror's last event in o's epoch, 0 for
// none: the origin ids between prev and o.ID are lost.
func (mr *mirror) decide(o bus.RemoteOrigin, pending *bus.RemoteOrigin) (act int, prev uint64) {
	mr.mu.Lock()
	known, epoch, id := mr.known, mr.epoch, mr.id
	mr.mu.Unlock()
	if pending != nil {
		known, epoch, id = true, pending.Epoch, pending.ID
	}
	switch {
	case !known:
		return applyEvent, 0
	case o.Epoch == epoch && o.ID <= id:
		return skipEvent, id
	case o.Epoch != epoch:
		return resetMirror, 0
	}
	return applyEvent, id
}

// withLoss returns the origin of an event applied after the source's id
// prev (0 for none), recording the ids between them, if any, as lost
// (SPEC §12): an epoch's ids start at 1, so a mirror that starts at a
// later id, too, has lost what came before it.
func withLoss(o bus.RemoteOrigin, prev uint64) *bus.RemoteOrigin {
	if o.ID > prev+1 {
		o.LostFrom, o.LostTo = prev+1, o.ID-1
	}
	return &o
}

// mirrorFor returns the state of mirror id, reading the origin of its last
// event from its ring the first time.
func (b *Bridge) mirrorFor(id string, o bus.RemoteOrigin) *mirror {
	b.mu.Lock()
	mr, ok := b.mirrors[id]
	if !ok {
		mr = &mirror{node: o.Node, session: o.Session}
		b.mirrors[id] = mr
	}
	b.mu.Unlock()
	if ok {
		return mr
	}
	if s, ok := b.opts.Hub.Session(id); ok {
		if f := s.Bus.LastFrame(); f != nil {
			var env bus.Envelope
			if json.Unmarshal(f.JSON(), &env) == nil && env.Origin != nil {
				mr.epoch, mr.id, mr.known = env.Origin.Epoch, env.Origin.ID, true
			}
		}
	}
	return mr
}

// resetMirror starts the mirror over on a new epoch of its own: its
// streams end as on a reload, so that readers come back and resume, and
// find an epoch they did not see (stream:gap, epoch_reset).
func (b *Bridge) resetMirror(id string, mr *mirror, o bus.RemoteOrigin) {
	mr.mu.Lock()
	old := mr.epoch
	mr.known = false
	mr.mu.Unlock()
	b.logger.Warn("upstream: the source of a mirror started a new epoch; the mirror starts over on a new epoch too",
		"mirror", id, "oldEpoch", old, "newEpoch", o.Epoch)
	if s, ok := b.opts.Hub.Session(id); ok {
		s.Bus.EndStreams(bus.EndReload)
		if err := b.opts.Hub.Delete(id); err != nil {
			b.logger.Warn("upstream: deleting the old mirror", "mirror", id, "err", err)
		}
	}
}
