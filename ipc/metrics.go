package ipc

import (
	"net/http"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/bus/share"
	"github.com/localbus/localbus/ipc/access"
)

// metrics are the router's Prometheus metrics (GET /metrics): bus figures
// read from the hub at scrape time, and what the router counts itself:
// publish latency, requests by route and status, refusals by reason. They
// live in Options.Registry, beside whatever else the daemon registers
// there; each Handler without one has a registry of its own.
type metrics struct {
	publishSeconds prometheus.Histogram
	requests       *prometheus.CounterVec
	refusals       *prometheus.CounterVec
	shareRefusals  *prometheus.CounterVec
	// By transport (sse, ws): streams opened and closed, and the bytes
	// their writers sent.
	streamsOpened *prometheus.CounterVec
	streamsClosed *prometheus.CounterVec
	streamBytes   *prometheus.CounterVec
	// acks counts consumers' acknowledgements answered, on the WebSocket
	// and by POST (no label per consumer: names are the clients').
	acks    prometheus.Counter
	handler http.Handler

	// counters caches the children of requests and refusals, so that
	// counting a request does not hash its labels.
	counters sync.Map // metricKey → prometheus.Counter
}

// metricKey names a child of requests (kind 0), refusals (kind 1) or
// shareRefusals (kind 2).
type metricKey struct {
	kind int
	a, b string
}

func newMetrics(h *Handler, reg *prometheus.Registry) *metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &metrics{
		publishSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "localbus_publish_duration_seconds",
			Help:    "Time from a publish request's decoded body to its events being queued to every subscriber.",
			Buckets: []float64{.00001, .00003, .0001, .0003, .001, .003, .01, .03, .1, .3, 1},
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "localbus_http_requests_total",
			Help: "HTTP requests answered, by route (\"other\" for none) and status code; a stream is counted when its handler returns.",
		}, []string{"route", "code"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "localbus_refusals_total",
			Help: "Requests refused, by reason (auth, limit, bad_input, disk_full, unavailable, internal) and error code.",
		}, []string{"reason", "code"}),
		shareRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "localbus_share_refusals_total",
			Help: "Draws on a pool with fair shares refused, by pool (body_bytes, tickets, auto_sessions, subscribers, streams, consumers) and share (peer: the peer held its share; pool: the pool was full).",
		}, []string{"pool", "share"}),
		streamsOpened: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "localbus_streams_opened_total",
			Help: "Streams opened, by transport (sse, ws); a stream refused in-band is not counted.",
		}, []string{"transport"}),
		streamsClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "localbus_streams_closed_total",
			Help: "Streams closed, by transport and end (shutdown, reload, session_deleted, lagged, cancelled: the client left or the write failed, replaced: another stream took its consumer over, ...).",
		}, []string{"transport", "end"}),
		streamBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "localbus_stream_bytes_written_total",
			Help: "Bytes written to streams, by transport: frames, control replies and their framing.",
		}, []string{"transport"}),
		acks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "localbus_consumer_acks_total",
			Help: "Acknowledgements of explicit consumers answered once stored, on the WebSocket and by POST.",
		}),
	}
	for _, t := range []string{transportSSE, transportWS} {
		m.streamsOpened.WithLabelValues(t)
		m.streamBytes.WithLabelValues(t)
		for _, end := range []bus.EndReason{bus.EndShutdown, bus.EndReload, bus.EndSessionDeleted, bus.EndLagged, bus.EndCancelled, bus.EndReplaced} {
			m.streamsClosed.WithLabelValues(t, string(end))
		}
	}
	// Every pool's series from the start, so a rate over them is defined
	// before the first refusal.
	for _, pool := range []string{PoolBodyBytes, access.PoolTickets, hub.PoolAutoSessions, bus.PoolSubscribers, PoolStreams, hub.PoolConsumers} {
		for _, k := range []share.Kind{share.ByShare, share.ByPool} {
			m.shareRefusals.WithLabelValues(pool, k.String())
		}
	}
	reg.MustRegister(m.publishSeconds, m.requests, m.refusals, m.shareRefusals, m.streamsOpened, m.streamsClosed, m.streamBytes, m.acks, busCollector{h})
	reg.MustRegister(h.options().Metrics...)
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return m
}

// request counts one answered request.
func (m *metrics) request(route string, status int) {
	m.counter(metricKey{0, route, strconv.Itoa(status)}).Inc()
}

// refused counts one refused request.
func (m *metrics) refused(reason, code string) {
	m.counter(metricKey{1, reason, code}).Inc()
}

// shareRefused counts one draw a pool with fair shares refused.
func (m *metrics) shareRefused(r *share.Refusal) {
	m.counter(metricKey{2, r.Pool, r.Kind.String()}).Inc()
}

func (m *metrics) counter(k metricKey) prometheus.Counter {
	if c, ok := m.counters.Load(k); ok {
		return c.(prometheus.Counter)
	}
	vec := m.requests
	switch k.kind {
	case 1:
		vec = m.refusals
	case 2:
		vec = m.shareRefusals
	}
	c, _ := m.counters.LoadOrStore(k, vec.WithLabelValues(k.a, k.b))
	return c.(prometheus.Counter)
}

// busCollector reads the hub's totals on each scrape.
type busCollector struct{ h *Handler }

// Slow warning reasons, the reason label of localbus_slow_warnings_total:
// which live figure reached 75% of its limit.
const (
	slowQueue      = "queue"
	slowQueueBytes = "queue_bytes"
)

var (
	descPublished  = prometheus.NewDesc("localbus_events_published_total", "Events that got an id.", []string{"bus"}, nil)
	descDelivered  = prometheus.NewDesc("localbus_frames_delivered_total", "Live events queued to subscribers.", []string{"bus"}, nil)
	descEvicted    = prometheus.NewDesc("localbus_subscribers_evicted_total", "Subscribers evicted as slow readers (stream:lagged), by reason.", []string{"bus", "reason"}, nil)
	descSlow       = prometheus.NewDesc("localbus_slow_warnings_total", "stream:slow warnings sent, by the figure that reached 75% (queue: frames, queue_bytes: bytes).", []string{"bus", "reason"}, nil)
	descGaps       = prometheus.NewDesc("localbus_gaps_served_total", "stream:gap frames sent, by reason: to resuming clients, and (upstream_lost) before a mirrored event whose origin lost events.", []string{"bus", "reason"}, nil)
	descReplayed   = prometheus.NewDesc("localbus_events_replayed_total", "Events queued by replays to resuming clients.", []string{"bus"}, nil)
	descSubs       = prometheus.NewDesc("localbus_subscribers", "Subscribers now.", []string{"bus"}, nil)
	descRingEvents = prometheus.NewDesc("localbus_ring_events", "Events held in replay rings.", []string{"bus"}, nil)
	descRingBytes  = prometheus.NewDesc("localbus_ring_bytes", "Encoded bytes held in replay rings.", []string{"bus"}, nil)
	descSessions   = prometheus.NewDesc("localbus_sessions", "Sessions now.", nil, nil)
	descForgotten  = prometheus.NewDesc("localbus_idempotency_keys_forgotten_total", "Idempotency keys forgotten before their window ended to make room, by share (peer: past the peer's share; pool: past the pool's limit).", []string{"share"}, nil)
	descConsumers  = prometheus.NewDesc("localbus_consumers", "Consumers of every session now.", nil, nil)
	descPending    = prometheus.NewDesc("localbus_consumer_pending_events", "Events after the acknowledged ids of every consumer, added up.", nil, nil)
)

func (c busCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPublished, descDelivered, descEvicted, descSlow, descGaps, descReplayed, descSubs, descRingEvents, descRingBytes, descSessions, descForgotten, descConsumers, descPending} {
		ch <- d
	}
}

func (c busCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.h.options().Hub.Totals()
	ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(t.Count))
	byShare, byPool := c.h.options().Hub.KeysForgotten()
	ch <- prometheus.MustNewConstMetric(descForgotten, prometheus.CounterValue, float64(byShare), share.ByShare.String())
	ch <- prometheus.MustNewConstMetric(descForgotten, prometheus.CounterValue, float64(byPool), share.ByPool.String())
	consumers, pending := c.h.options().Hub.ConsumerFigures()
	ch <- prometheus.MustNewConstMetric(descConsumers, prometheus.GaugeValue, float64(consumers))
	ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(pending))
	for _, b := range []struct {
		label string
		st    *bus.Stats
	}{{"session", &t.Sessions}, {"global", &t.Global}} {
		counter := func(d *prometheus.Desc, v uint64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{b.label}, labels...)...)
		}
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, b.label)
		}
		counter(descPublished, b.st.Published)
		counter(descDelivered, b.st.Delivered)
		counter(descEvicted, b.st.EvictedQueue, bus.LagQueueOverflow)
		counter(descEvicted, b.st.EvictedBytes, bus.LagQueueBytesOverflow)
		counter(descSlow, b.st.SlowWarnings-b.st.SlowBytes, slowQueue)
		counter(descSlow, b.st.SlowBytes, slowQueueBytes)
		counter(descGaps, b.st.GapRingEvicted, bus.GapRingEvicted)
		counter(descGaps, b.st.GapEpochReset, bus.GapEpochReset)
		counter(descGaps, b.st.GapUpstreamLost, bus.GapUpstreamLost)
		counter(descReplayed, b.st.Replayed)
		gauge(descSubs, float64(b.st.Subscribers))
		gauge(descRingEvents, float64(b.st.RingLen))
		gauge(descRingBytes, float64(b.st.RingBytes))
	}
}
