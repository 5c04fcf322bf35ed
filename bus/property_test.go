package bus_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"pgregory.net/rapid"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/ipc/wire/grammar"
)

// spyStore is a Ring that remembers every frame appended, so a test knows
// each event's type and encoded size, and can check that subscribers get
// the very frame the ring holds (serialize once).
type spyStore struct {
	*bus.Ring
	mu     sync.Mutex
	frames []*bus.Frame // index id-1
}

func (s *spyStore) Append(frames []*bus.Frame) error {
	s.mu.Lock()
	s.frames = append(s.frames, frames...)
	s.mu.Unlock()
	return s.Ring.Append(frames)
}

func (s *spyStore) all() []*bus.Frame {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*bus.Frame(nil), s.frames...)
}

// Generators shared by the property tests.
var (
	genType  = rapid.SampledFrom([]string{"a:x", "a:y", "b:x", "c:z"})
	genEntry = rapid.SampledFrom([]string{"a:x", "a:y", "a:*", "b:x", "b:*", "c:z", "c:*"})
)

// drawFilter draws nil (everything) or a filter; within family fam when
// fam is not "".
func drawFilter(t *rapid.T, fam, label string) *bus.Filter {
	if rapid.IntRange(0, 2).Draw(t, label+"Nil") == 0 {
		return nil
	}
	entries := rapid.SliceOfN(genEntry, 1, 3).Draw(t, label)
	if fam != "" {
		entries = append(entries, fam+":*")
		keep := entries[:0]
		for _, e := range entries {
			if bus.FamilyOf(e) == fam {
				keep = append(keep, e)
			}
		}
		entries = keep
	}
	f, err := bus.NewFilter(entries)
	if err != nil {
		t.Fatalf("NewFilter(%v) = %v", entries, err)
	}
	return f
}

// drawEvent draws an event of a known type with data of random size.
func drawEvent(t *rapid.T) bus.Event {
	n := rapid.IntRange(0, 400).Draw(t, "dataLen")
	return bus.Event{Type: bustest.Type(genType.Draw(t, "type")), Data: []byte(`"` + strings.Repeat("d", n) + `"`), Time: fixedTime}
}

// matches is the model's filter: the family restriction, then the filter.
func matches(family string, f *bus.Filter, typ string) bool {
	if family != "" && bus.FamilyOf(typ) != family {
		return false
	}
	for _, e := range f.Types() {
		if e == typ || (strings.HasSuffix(e, ":*") && bus.FamilyOf(e) == bus.FamilyOf(typ)) {
			return true
		}
	}
	return f == nil
}

// mframe is a frame the model expects, in summary's form.
type mframe struct {
	s       string
	frame   *bus.Frame // events: the frame the ring holds
	counted bool
}

// msub is the model of one subscriber.
type msub struct {
	s         *bus.Subscription
	family    string
	filter    *bus.Filter
	maxQueued int
	maxBytes  int64
	queue     []mframe
	live      int
	liveBytes int64
	waiting   bool
	warned    bool
	end       bus.EndReason
	inBus     bool // still registered with the bus
	dropped   bool // Close was called
	lastID    uint64
}

// model is the reference model of one bus, written from SPEC §2 to §4.
type model struct {
	b        *bus.Bus
	store    *spyStore
	limits   bus.Limits
	closed   bool
	events   []*bus.Frame // every event, index id-1
	ring     []*bus.Frame // retained events
	subs     []*msub
	counters bus.Stats // the cumulative counters only
}

func (m *model) lastID() uint64 { return uint64(len(m.events)) }

func (m *model) earliest() uint64 {
	if len(m.ring) == 0 {
		return 0
	}
	return m.ring[0].ID
}

func (m *model) open() int {
	n := 0
	for _, s := range m.subs {
		if s.inBus {
			n++
		}
	}
	return n
}

func (m *model) trimRing() {
	var bytes int64
	for _, f := range m.ring {
		bytes += int64(f.Size())
	}
	for len(m.ring) > m.limits.RingSize || (bytes > m.limits.RingMaxBytes && len(m.ring) > 1) {
		bytes -= int64(m.ring[0].Size())
		m.ring = m.ring[1:]
	}
}

func nullable(id uint64) any {
	if id == 0 {
		return nil
	}
	return id
}

func (s *msub) pushForced(str string) { s.queue = append(s.queue, mframe{s: str}) }

// pushLive is SPEC §2.2 for one live event.
func (s *msub) pushLive(f *bus.Frame, c *bus.Stats) {
	ev := mframe{s: sprintf("%s#%d", f.Type, f.ID), frame: f}
	if s.waiting && len(s.queue) == 0 {
		s.queue = append(s.queue, ev) // handed to the waiting writer: not counted
		s.waiting = false
		c.Delivered++
		return
	}
	size := int64(f.Size())
	if s.live > 0 && s.live+1 > s.maxQueued {
		s.evict(map[string]any{"reason": "queue_overflow"})
		c.EvictedQueue++
		return
	}
	if s.live > 0 && s.liveBytes+size > s.maxBytes {
		s.evict(map[string]any{"reason": "queue_bytes_overflow", "eventBytes": size})
		c.EvictedBytes++
		return
	}
	ev.counted = true
	s.queue = append(s.queue, ev)
	s.live++
	s.liveBytes += size
	c.Delivered++
	if !s.warned && (4*s.live >= 3*s.maxQueued || 4*s.liveBytes >= 3*s.maxBytes) {
		s.warned = true
		c.SlowWarnings++
		s.pushForced(render(bus.TypeSlow, map[string]any{
			"queued": s.live, "maxQueued": s.maxQueued, "queuedBytes": s.liveBytes, "maxQueuedBytes": s.maxBytes,
		}))
	}
}

func (s *msub) evict(d map[string]any) {
	d["queueSize"], d["maxQueued"], d["queuedBytes"], d["maxQueuedBytes"] = s.live, s.maxQueued, s.liveBytes, s.maxBytes
	s.pushForced(render(bus.TypeLagged, d))
	s.end, s.inBus = bus.EndLagged, false
}

func (s *msub) close(reason bus.EndReason) {
	s.pushForced(render(bus.TypeClosed, map[string]any{"reason": string(reason), "retryMs": "R"}))
	s.end, s.inBus = reason, false
}

func (m *model) publish(t *rapid.T) {
	n := rapid.IntRange(1, 3).Draw(t, "batch")
	events := make([]bus.Event, n)
	for i := range events {
		events[i] = drawEvent(t)
	}
	bad := rapid.IntRange(0, 19).Draw(t, "bad") == 0
	if bad {
		events[rapid.IntRange(0, n-1).Draw(t, "badAt")].Type = bus.TypeReloaded // the daemon's: refused without Batch.Daemon
	}
	first, last, err := m.b.Publish(events...)
	switch {
	case m.closed:
		if !errors.Is(err, bus.ErrClosed) && !(bad && bus.IsInputError(err)) {
			t.Fatalf("Publish on a closed bus = %v, want ErrClosed", err)
		}
		return
	case bad:
		if !isInputError(err, "type") || first != 0 || last != 0 {
			t.Fatalf("Publish(bad batch) = %d, %d, %v; want an *InputError", first, last, err)
		}
		return
	case err != nil:
		t.Fatalf("Publish = %v", err)
	}
	if first != m.lastID()+1 || last != m.lastID()+uint64(n) {
		t.Fatalf("Publish = %d, %d; want %d, %d", first, last, m.lastID()+1, m.lastID()+uint64(n))
	}
	frames := m.store.all()[len(m.events):]
	if len(frames) != n {
		t.Fatalf("store got %d frames, want %d", len(frames), n)
	}
	m.events = append(m.events, frames...)
	m.ring = append(m.ring, frames...)
	m.trimRing()
	m.counters.Published += uint64(n)
	for _, s := range m.subs {
		for _, f := range frames {
			if !s.inBus {
				break
			}
			if matches(s.family, s.filter, f.Type) {
				s.pushLive(f, &m.counters)
			}
		}
	}
}

// flood publishes many events in a row, to fill queues.
func (m *model) flood(t *rapid.T) {
	for range rapid.IntRange(5, 25).Draw(t, "flood") {
		m.publish(t)
	}
}

func (m *model) subscribe(t *rapid.T) {
	var opts bus.SubscribeOptions
	switch rapid.IntRange(0, 4).Draw(t, "cursorKind") {
	case 0: // live only
		opts.CursorIgnored = rapid.Bool().Draw(t, "ignored")
	case 1:
		opts.Cursor = ptr[uint64](grammar.MaxCursor)
	case 2: // anywhere
		opts.Cursor = ptr(rapid.Uint64Range(0, m.lastID()+2).Draw(t, "cursor"))
	default: // inside the ring, where resuming is seamless
		low := max(m.earliest(), 1) - 1
		opts.Cursor = ptr(rapid.Uint64Range(low, m.lastID()).Draw(t, "cursor"))
	}
	opts.Epoch = rapid.SampledFrom([]string{"", testEpoch, "other"}).Draw(t, "epoch")
	family := rapid.SampledFrom([]string{"", "", "", "a", "b"}).Draw(t, "family")
	if family != "" {
		opts.Family = bustest.Family(t, family)
	}
	opts.Filter = drawFilter(t, family, "filter")
	if rapid.Bool().Draw(t, "ownMaxQueued") {
		opts.MaxQueued = rapid.IntRange(grammar.MinMaxQueued, 20).Draw(t, "maxQueued")
	}
	s, err := m.b.Subscribe(context.Background(), opts)
	switch {
	case m.closed:
		if !errors.Is(err, bus.ErrClosed) {
			t.Fatalf("Subscribe on a closed bus = %v, want ErrClosed", err)
		}
		return
	case m.open() >= m.limits.MaxSubscribers:
		if !errors.Is(err, bus.ErrSubscriberLimit) {
			t.Fatalf("Subscribe past the limit = %v, want ErrSubscriberLimit", err)
		}
		return
	case err != nil:
		t.Fatalf("Subscribe(%+v) = %v", opts, err)
	}
	t.Cleanup(s.Close)
	ms := &msub{s: s, family: family, filter: opts.Filter, maxQueued: opts.MaxQueued, maxBytes: m.limits.MaxQueuedBytes, inBus: true}
	if ms.maxQueued == 0 {
		ms.maxQueued = m.limits.MaxQueued
	}
	m.subs = append(m.subs, ms)

	ready := map[string]any{
		"lastId": m.lastID(), "earliestId": nullable(m.earliest()), "epoch": testEpoch,
		"types": opts.Filter.Types(), "maxQueued": ms.maxQueued, "cursor": nil,
	}
	if opts.Filter == nil && family != "" {
		ready["types"] = []string{family + ":*"}
	}
	switch {
	case opts.Cursor != nil:
		ready["cursor"] = *opts.Cursor
	case !opts.CursorIgnored:
		ready["cursor"] = m.lastID()
	}
	ms.pushForced(render(bus.TypeReady, ready))
	if opts.Cursor == nil {
		return
	}
	cursor, from := *opts.Cursor, *opts.Cursor+1
	gap := ""
	switch {
	case cursor > m.lastID() || (opts.Epoch != "" && opts.Epoch != testEpoch):
		gap, from = "epoch_reset", 0
		m.counters.GapEpochReset++
	case len(m.ring) == 0 && cursor < m.lastID(), len(m.ring) > 0 && m.earliest() > cursor+1:
		gap = "ring_evicted"
		m.counters.GapRingEvicted++
	}
	if gap != "" {
		ms.pushForced(render(bus.TypeGap, map[string]any{
			"reason": gap, "lastDeliveredId": cursor, "earliestAvailableId": nullable(m.earliest()), "lastId": m.lastID(),
		}))
	}
	count, last := 0, uint64(0)
	for _, f := range m.ring {
		if f.ID >= from && matches(ms.family, ms.filter, f.Type) {
			ms.queue = append(ms.queue, mframe{s: sprintf("%s#%d", f.Type, f.ID), frame: f})
			count++
			last = f.ID
		}
	}
	m.counters.Replayed += uint64(count)
	ms.pushForced(render(bus.TypeReplayed, map[string]any{"replayedCount": count, "lastReplayedEventId": nullable(last)}))
}

func (m *model) pick(t *rapid.T) *msub {
	if len(m.subs) == 0 {
		t.Skip("no subscriber")
	}
	return m.subs[rapid.IntRange(0, len(m.subs)-1).Draw(t, "sub")]
}

func (m *model) take(t *rapid.T) { m.takeFrom(t, m.pick(t)) }

// catchUp is a writer that drains its queue and then waits: the second Take
// finds nothing, so the next live frame is handed over uncounted.
func (m *model) catchUp(t *rapid.T) {
	s := m.pick(t)
	m.takeFrom(t, s)
	m.takeFrom(t, s)
}

func (m *model) takeFrom(t *rapid.T, s *msub) {
	frames, ended := s.s.Take(nil)
	envs := bustest.DecodeAll(t, frames)
	got := summary(t, envs)
	if s.dropped {
		if len(frames) != 0 || !ended {
			t.Fatalf("Take after Close = %v, %v; want nothing, ended", got, ended)
		}
		return
	}
	var want []string
	for _, f := range s.queue {
		want = append(want, f.s)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("Take =\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
	for i, f := range frames {
		if !f.Reserved() {
			if f != s.queue[i].frame {
				t.Fatalf("event %d is not the ring's frame: encoded twice", f.ID)
			}
			if f.ID <= s.lastID {
				t.Fatalf("event %d after %d: ids must increase", f.ID, s.lastID)
			}
			s.lastID = f.ID
		}
	}
	if ended != (s.end != bus.EndNone) {
		t.Fatalf("Take ended = %v, want %v", ended, s.end != bus.EndNone)
	}
	s.queue, s.live, s.liveBytes = nil, 0, 0
	if s.warned && 8*s.live <= 3*s.maxQueued && 8*s.liveBytes <= 3*s.maxBytes {
		s.warned = false
	}
	s.waiting = len(frames) == 0 && !ended
}

func (m *model) closeSub(t *rapid.T) {
	s := m.pick(t)
	s.s.Close()
	if s.end == bus.EndNone {
		s.end = bus.EndCancelled
	}
	s.inBus, s.dropped = false, true
	s.queue, s.live, s.liveBytes = nil, 0, 0
}

func (m *model) setFilter(t *rapid.T) {
	s := m.pick(t)
	fam := ""
	if rapid.Bool().Draw(t, "withinFamily") {
		fam = s.family
	}
	f := drawFilter(t, fam, "newFilter")
	err := s.s.SetFilter(f)
	if s.family != "" && !f.Within(s.family) {
		if !isInputError(err, "types") {
			t.Fatalf("SetFilter(%v) outside family %s = %v, want *InputError", f.Types(), s.family, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("SetFilter(%v) = %v", f.Types(), err)
	}
	s.filter = f
}

func (m *model) endStreams(t *rapid.T) {
	reason := rapid.SampledFrom([]bus.EndReason{bus.EndShutdown, bus.EndReload}).Draw(t, "reason")
	m.b.EndStreams(reason)
	for _, s := range m.subs {
		if s.inBus {
			s.close(reason)
		}
	}
}

func (m *model) closeBus(t *rapid.T) {
	if rapid.IntRange(0, 4).Draw(t, "reallyClose") != 0 {
		t.Skip("close the bus rarely")
	}
	m.b.Close()
	if !m.closed {
		for _, s := range m.subs {
			if s.inBus {
				s.close(bus.EndSessionDeleted)
			}
		}
	}
	m.closed = true
}

func (m *model) setLimits(t *rapid.T) {
	l := drawLimits(t)
	if err := m.b.SetLimits(l); err != nil {
		t.Fatalf("SetLimits(%+v) = %v", l, err)
	}
	m.limits = l
	m.trimRing()
}

func drawLimits(t *rapid.T) bus.Limits {
	return bus.Limits{
		RingSize:       rapid.IntRange(1, 30).Draw(t, "ringSize"),
		RingMaxBytes:   rapid.SampledFrom([]int64{64 << 20, 500, 2000, 8000}).Draw(t, "ringMaxBytes"),
		MaxQueued:      rapid.IntRange(16, 20).Draw(t, "defaultMaxQueued"),
		MaxQueuedBytes: rapid.SampledFrom([]int64{2 << 20, 300, 1000, 3000}).Draw(t, "maxQueuedBytes"),
		MaxSubscribers: rapid.IntRange(1, 6).Draw(t, "maxSubscribers"),
	}
}

// check compares every figure the bus reports with the model.
func (m *model) check(t *rapid.T) {
	st := m.b.Stats()
	if st.LastID != m.lastID() || st.EarliestID != m.earliest() || st.RingLen != len(m.ring) || st.Subscribers != m.open() {
		t.Fatalf("Stats: lastId %d earliest %d ringLen %d subscribers %d; model %d %d %d %d",
			st.LastID, st.EarliestID, st.RingLen, st.Subscribers, m.lastID(), m.earliest(), len(m.ring), m.open())
	}
	c := m.counters
	if st.Published != c.Published || st.Delivered != c.Delivered || st.SlowWarnings != c.SlowWarnings ||
		st.EvictedQueue != c.EvictedQueue || st.EvictedBytes != c.EvictedBytes || st.GapRingEvicted != c.GapRingEvicted ||
		st.GapEpochReset != c.GapEpochReset || st.Replayed != c.Replayed {
		t.Fatalf("Stats counters %+v, model %+v", st, c)
	}
	for i, s := range m.subs {
		got := s.s.Stats()
		checkSubStats(t, got)
		want := bus.SubscriptionStats{Queued: len(s.queue), Live: s.live, LiveBytes: s.liveBytes, Warned: s.warned, End: s.end}
		if s.dropped {
			want.Warned = got.Warned // irrelevant once closed
		}
		if got != want {
			t.Fatalf("subscriber %d: Stats() = %+v, model %+v", i, got, want)
		}
	}
}

// checkSubStats pins the live counter invariants of one snapshot.
func checkSubStats(t interface{ Fatalf(string, ...any) }, st bus.SubscriptionStats) {
	if st.Live < 0 || st.LiveBytes < 0 || st.Live > st.Queued || (st.Queued == 0 && (st.Live != 0 || st.LiveBytes != 0)) {
		t.Fatalf("subscription Stats() = %+v: live counters negative, above the queue, or not zero on an empty queue", st)
	}
}

// TestBusMatchesModel runs random sequences of publish, subscribe (random
// cursors, epochs, families, filters), take, close, filter changes, limit
// changes, EndStreams and Close against a model of SPEC §2 to §4, comparing
// every frame every subscriber takes and every figure the bus reports.
func TestBusMatchesModel(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		l := drawLimits(t)
		store := &spyStore{Ring: bus.NewRing(1, 1)}
		b, err := bus.New(bus.Options{Session: bustest.SessionID("s"), Epoch: testEpoch, Store: store,
			RingSize: l.RingSize, RingMaxBytes: l.RingMaxBytes, MaxQueued: l.MaxQueued,
			MaxQueuedBytes: l.MaxQueuedBytes, MaxSubscribers: l.MaxSubscribers})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		m := &model{b: b, store: store, limits: l}
		t.Repeat(map[string]func(*rapid.T){
			"publish":    m.publish,
			"flood":      m.flood,
			"subscribe":  m.subscribe,
			"take":       m.take,
			"catchUp":    m.catchUp,
			"closeSub":   m.closeSub,
			"setFilter":  m.setFilter,
			"setLimits":  m.setLimits,
			"endStreams": m.endStreams,
			"closeBus":   m.closeBus,
			"":           m.check,
		})
	})
}

// readerKind is how a concurrent reader behaves.
type readerKind int

const (
	fastReader   readerKind = iota // takes on every signal
	yieldReader                    // yields the processor between takes
	gatedReader                    // takes nothing until publishing is over
	cancelReader                   // cancels its context after some frames
	closeReader                    // calls Close after some frames
)

type readerPlan struct {
	kind      readerKind
	after     int // frames before cancel or Close
	cursor    *uint64
	family    string
	filter    *bus.Filter
	maxQueued int
}

type readerResult struct {
	plan    readerPlan
	frames  []*bus.Frame
	ended   bool
	end     bus.EndReason
	stopped bool // it cancelled its context or called Close
	err     error
}

// TestConcurrentInterleavings runs publishers and readers of every kind at
// once and checks what each reader got: ids strictly increasing, no event
// twice, nothing that matches its filter missing unless stream:gap or
// stream:lagged says so, live counters sane at every look, and no goroutine
// left behind.
func TestConcurrentInterleavings(t *testing.T) {
	// Not parallel: it checks for leaked goroutines after each run.
	rapid.Check(t, func(t *rapid.T) {
		before := goleak.IgnoreCurrent()
		store := &spyStore{Ring: bus.NewRing(1, 1)}
		ringSize := rapid.IntRange(5, 200).Draw(t, "ringSize")
		b, err := bus.New(bus.Options{Session: bustest.SessionID("s"), Epoch: testEpoch, Store: store, RingSize: ringSize,
			MaxQueuedBytes: rapid.SampledFrom([]int64{2 << 20, 5000}).Draw(t, "maxQueuedBytes"), MaxSubscribers: 64})
		if err != nil {
			t.Fatal(err)
		}
		publishN := rapid.IntRange(0, 30).Draw(t, "prePublished")
		for range publishN {
			if _, _, err := b.Publish(drawEvent(t)); err != nil {
				t.Fatal(err)
			}
		}
		var batches [][]bus.Event
		for range rapid.IntRange(1, 3).Draw(t, "publishers") {
			batches = append(batches, rapid.SliceOfN(rapid.Custom(drawEvent), 1, 150).Draw(t, "events"))
		}
		var plans []readerPlan
		for range rapid.IntRange(1, 8).Draw(t, "readers") {
			p := readerPlan{
				kind:      readerKind(rapid.IntRange(0, 4).Draw(t, "kind")),
				after:     rapid.IntRange(0, 40).Draw(t, "after"),
				family:    rapid.SampledFrom([]string{"", "", "a"}).Draw(t, "family"),
				maxQueued: rapid.IntRange(16, 64).Draw(t, "maxQueued"),
			}
			p.filter = drawFilter(t, p.family, "filter")
			if rapid.Bool().Draw(t, "resume") {
				p.cursor = ptr(rapid.Uint64Range(0, uint64(publishN)+5).Draw(t, "cursor"))
			}
			plans = append(plans, p)
		}
		final := rapid.SampledFrom([]bus.EndReason{bus.EndSessionDeleted, bus.EndReload, bus.EndShutdown}).Draw(t, "final")

		gate := make(chan struct{})
		results := make([]readerResult, len(plans))
		var readers, subscribed, publishers sync.WaitGroup
		start := make(chan struct{})
		for i, p := range plans {
			subscribed.Add(1)
			readers.Go(func() { results[i] = read(b, p, start, gate, subscribed.Done) })
		}
		for _, events := range batches {
			publishers.Go(func() {
				<-start
				for len(events) > 0 {
					n := min(len(events), 1+len(events)%3)
					if _, _, err := b.Publish(events[:n]...); err != nil {
						panic(err) // never: the bus is open and the events valid
					}
					events = events[n:]
				}
			})
		}
		close(start) // readers subscribe while publishers publish
		publishers.Wait()
		subscribed.Wait()
		close(gate)
		if final == bus.EndSessionDeleted {
			b.Close()
		} else {
			b.EndStreams(final)
			b.Close()
		}
		if !waitTimeout(&readers, wait) {
			t.Fatalf("readers did not finish within %v", wait)
		}
		events := store.all()
		for i, r := range results {
			checkReader(t, i, r, events, final)
		}
		if st := b.Stats(); st.Subscribers != 0 || st.LastID != uint64(len(events)) {
			t.Fatalf("after the end: Subscribers %d, LastID %d; want 0, %d", st.Subscribers, st.LastID, len(events))
		}
		if err := goleak.Find(before); err != nil {
			t.Fatalf("goroutines left behind: %v", err)
		}
	})
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// read is one reader goroutine: it subscribes once start is closed, calls
// subscribed, then behaves as its plan says until its stream ends.
func read(b *bus.Bus, p readerPlan, start, gate <-chan struct{}, subscribed func()) (r readerResult) {
	r.plan = p
	<-start
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var fam bus.Family
	if p.family != "" {
		fam, _ = bus.ParseFamily(p.family) // drawn from valid names
	}
	s, err := b.Subscribe(ctx, bus.SubscribeOptions{Cursor: p.cursor, Family: fam, Filter: p.filter, MaxQueued: p.maxQueued})
	subscribed()
	if err != nil {
		r.err = err
		return r
	}
	defer s.Close()
	if p.kind == gatedReader {
		<-gate
	}
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	for {
		var frames []*bus.Frame
		frames, r.ended = s.Take(nil)
		r.frames = append(r.frames, frames...)
		if st := s.Stats(); st.Live < 0 || st.LiveBytes < 0 || st.Live > st.Queued || (st.Queued == 0 && (st.Live != 0 || st.LiveBytes != 0)) {
			r.err = errors.New("bad live counters: " + sprintf("%+v", st))
			return r
		}
		if r.ended {
			r.end = s.End()
			return r
		}
		if !r.stopped && len(r.frames) >= p.after {
			switch p.kind {
			case cancelReader:
				cancel()
				r.stopped = true
			case closeReader:
				s.Close()
				r.stopped = true
			}
		}
		if p.kind == yieldReader {
			for range 1 + len(r.frames)%7 {
				runtime.Gosched()
			}
		}
		select {
		case <-s.Ready():
		case <-timeout.C:
			r.err = errors.New("stream did not end in time")
			return r
		}
	}
}

// checkReader checks one reader's frames against every event published.
func checkReader(t *rapid.T, i int, r readerResult, events []*bus.Frame, final bus.EndReason) {
	fail := func(format string, args ...any) {
		var types []string
		for _, f := range r.frames {
			types = append(types, sprintf("%s#%d", f.Type, f.ID))
		}
		t.Fatalf("reader %d (%+v): %s\nframes: %v", i, r.plan, sprintf(format, args...), types)
	}
	if r.err != nil {
		fail("%v", r.err)
	}
	if !r.ended {
		fail("stream did not end")
	}
	envs := bustest.DecodeAll(t, r.frames)
	if len(envs) == 0 {
		// Cancelled before its first Take: Close drops stream:ready too.
		if !r.stopped {
			fail("no frames, end %q", r.end)
		}
		return
	}
	if envs[0].Type != bus.TypeReady {
		fail("first frame %s, want stream:ready", envs[0].Type)
	}
	ready := bustest.Data[bus.ReadyData](t, envs[0])
	next := ready.LastID + 1 // the first id this reader must get
	if c := r.plan.cursor; c != nil {
		next = *c + 1
	}
	resuming := r.plan.cursor != nil
	replayDone := !resuming
	replayed, lastID := 0, uint64(0)
	idx := 0 // events[idx:] are still to be seen or skipped
	for k, e := range envs[1:] {
		k++
		switch e.Type {
		case bus.TypeGap:
			if k != 1 || !resuming {
				fail("stream:gap at frame %d", k)
			}
			g := bustest.Data[bus.GapData](t, e)
			if g.EarliestAvailableID != nil {
				next = *g.EarliestAvailableID
			} else {
				next = g.LastID + 1
			}
			continue
		case bus.TypeReplayed:
			if replayDone {
				fail("stream:replayed twice or on a live-only stream")
			}
			d := bustest.Data[bus.ReplayedData](t, e)
			if d.ReplayedCount != replayed || (replayed > 0 && (d.LastReplayedEventID == nil || *d.LastReplayedEventID != lastID)) {
				fail("stream:replayed %+v after %d events ending at %d", d, replayed, lastID)
			}
			replayDone = true
			continue
		case bus.TypeSlow:
			continue
		case bus.TypeLagged, bus.TypeClosed:
			if k != len(envs)-1 {
				fail("terminal %s at frame %d of %d", e.Type, k, len(envs))
			}
			continue
		case bus.TypeReady, bus.TypeError:
			fail("unexpected %s at frame %d", e.Type, k)
		}
		if e.ID <= lastID {
			fail("event %d after %d", e.ID, lastID)
		}
		if e.ID < next {
			fail("event %d, but the stream starts after %d: the client had it", e.ID, next-1)
		}
		if !matches(r.plan.family, r.plan.filter, e.Type) {
			fail("event %d of type %s does not match the filter", e.ID, e.Type)
		}
		// Everything matching from next up to this event must have come.
		for idx < len(events) && events[idx].ID < e.ID {
			f := events[idx]
			if f.ID >= next && matches(r.plan.family, r.plan.filter, f.Type) {
				fail("event %d (%s) missing before %d, and no stream:gap or stream:lagged says so", f.ID, f.Type, e.ID)
			}
			idx++
		}
		idx++
		lastID = e.ID
		if !replayDone {
			replayed++
		}
	}
	term := envs[len(envs)-1].Type
	if r.stopped {
		// Close drops what was queued, the terminal frame included, but
		// not the reason the stream had already ended for.
		if r.end != bus.EndCancelled && r.end != bus.EndLagged && r.end != final {
			fail("End() = %q after cancelling", r.end)
		}
		return
	}
	switch r.end {
	case bus.EndLagged:
		if term != bus.TypeLagged {
			fail("end lagged without stream:lagged")
		}
	case final:
		if term != bus.TypeClosed || bustest.Data[bus.ClosedData](t, envs[len(envs)-1]).Reason != string(final) {
			fail("end %s without its stream:closed", final)
		}
		// The stream ran to the end: nothing matching may be missing at all.
		for ; idx < len(events); idx++ {
			if f := events[idx]; f.ID >= next && matches(r.plan.family, r.plan.filter, f.Type) {
				fail("event %d (%s) missing at the end of a stream closed with %s", f.ID, f.Type, final)
			}
		}
	default:
		fail("End() = %q", r.end)
	}
	if resuming && !replayDone {
		fail("resumed without stream:replayed")
	}
}
