package hub

import (
	"math"
	"sync/atomic"
	"time"
)

// RateWindow is how far back the rates reach (SPEC §6: events/s over the
// last 10 s).
const RateWindow = 10 * time.Second

// rateSamples is how many one-second samples a window keeps: the newest
// and the ten before it.
const rateSamples = 11

// rateWindow turns two cumulative counters into rates: SampleRates adds a
// sample a second and stores the rates over the window; readers load them.
// An idle bus keeps no samples (only the last counters seen), so a hundred
// thousand idle sessions cost a few words each. The samples and the last
// counters are the sampler's alone.
type rateWindow struct {
	samples *[rateSamples]rateSample // nil while the counters do not move
	n, next int8
	// last is the newest sample; without samples, the first one of the
	// counters' idle stretch (they have not moved since last.at).
	last rateSample
	seen int64 // the newest sample's time, Unix nanoseconds

	publish, deliver atomic.Uint64 // math.Float64bits of the rates
}

type rateSample struct {
	at                   int64 // Unix nanoseconds
	published, delivered uint64
}

// add records the counters at now and stores the rates since the oldest
// sample within RateWindow.
func (w *rateWindow) add(now time.Time, published, delivered uint64) {
	cur := rateSample{at: now.UnixNano(), published: published, delivered: delivered}
	if w.samples == nil {
		prev := w.last
		if prev.at == 0 || (prev.published == published && prev.delivered == delivered) {
			if prev.at == 0 {
				w.last = cur
			}
			w.seen = cur.at
			return // idle since w.last.at: the rates stay 0
		}
		// The counters held still from prev.at until the previous sample
		// (seen): the window starts with those two, at most RateWindow back.
		w.samples = new([rateSamples]rateSample)
		prev.at = max(prev.at, cur.at-int64(RateWindow))
		w.samples[0], w.n, w.next = prev, 1, 1
		if w.seen > prev.at {
			prev.at = w.seen
			w.samples[1], w.n, w.next = prev, 2, 2
		}
	}
	w.seen = cur.at
	w.last = cur
	w.samples[w.next] = cur
	w.next = (w.next + 1) % rateSamples
	w.n = min(w.n+1, rateSamples)
	at := func(i int8) rateSample { return w.samples[(w.next-i+rateSamples)%rateSamples] }
	oldest := at(w.n)
	for i := w.n; i > 1; i-- {
		oldest = at(i)
		if cur.at-oldest.at <= int64(RateWindow+RateWindow/20) {
			break
		}
	}
	w.publish.Store(math.Float64bits(rate(oldest.published, published, cur.at-oldest.at)))
	w.deliver.Store(math.Float64bits(rate(oldest.delivered, delivered, cur.at-oldest.at)))
	if oldest.published == published && oldest.delivered == delivered && cur.at-oldest.at >= int64(RateWindow) {
		// Nothing moved over the whole window: idle again, since oldest.
		w.samples, w.n, w.next = nil, 0, 0
		w.last = oldest
	}
}

// rate is the events/s from counter a to b over ns nanoseconds; 0 when the
// counter went back (a deleted session's figures moving to the totals).
func rate(a, b uint64, ns int64) float64 {
	if ns <= 0 || b < a {
		return 0
	}
	return float64(b-a) / (float64(ns) / 1e9)
}

// rates returns the events/s published and delivered over the window, 0
// before two samples.
func (w *rateWindow) rates() (publish, deliver float64) {
	return math.Float64frombits(w.publish.Load()), math.Float64frombits(w.deliver.Load())
}

// Rates returns the events/s the session's bus published and delivered
// (live frames queued to its subscribers) over the last RateWindow, as of
// the last SampleRates; 0 before two samples.
func (s *Session) Rates() (publish, deliver float64) { return s.rates.rates() }

// Rates returns the daemon's totals: events/s published to every session
// and delivered by every bus (the global bus's streams included), over the
// last RateWindow, as of the last SampleRates.
func (h *Hub) Rates() (publish, deliver float64) { return h.rates.rates() }

// SampleRates takes the one-second sample of every session's counters and
// of the totals, and updates the rates. The daemon calls it once a second
// from one goroutine; calls must not overlap. It reads two atomic counters
// per bus and adds nothing to the publish path.
func (h *Hub) SampleRates(now time.Time) {
	h.mu.Lock()
	pub, del := h.retired.Published, h.retired.Delivered
	h.mu.Unlock()
	for _, s := range h.all() {
		p, d := s.Bus.Counters()
		s.rates.add(now, p, d)
		pub += p
		del += d
	}
	_, gd := h.global.Counters()
	h.rates.add(now, pub, del+gd)
}
