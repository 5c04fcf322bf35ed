package ipc

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/localbus/localbus/bus"
)

// metrics are the router's Prometheus metrics (GET /metrics): bus figures
// read from the hub at scrape time, and the publish latency the router
// measures. Each Handler has its own registry.
type metrics struct {
	publishSeconds prometheus.Histogram
	handler        http.Handler
}

func newMetrics(h *Handler) *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{
		publishSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "localbus_publish_duration_seconds",
			Help:    "Time from a publish request's decoded body to its events being queued to every subscriber.",
			Buckets: []float64{.00001, .00003, .0001, .0003, .001, .003, .01, .03, .1, .3, 1},
		}),
	}
	reg.MustRegister(m.publishSeconds, busCollector{h})
	reg.MustRegister(h.options().Metrics...)
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return m
}

// busCollector reads the hub's totals on each scrape.
type busCollector struct{ h *Handler }

var (
	descPublished  = prometheus.NewDesc("localbus_events_published_total", "Events that got an id.", []string{"bus"}, nil)
	descDelivered  = prometheus.NewDesc("localbus_frames_delivered_total", "Live events queued to subscribers.", []string{"bus"}, nil)
	descEvicted    = prometheus.NewDesc("localbus_subscribers_evicted_total", "Subscribers evicted as slow readers (stream:lagged), by reason.", []string{"bus", "reason"}, nil)
	descSlow       = prometheus.NewDesc("localbus_slow_warnings_total", "stream:slow warnings sent.", []string{"bus"}, nil)
	descGaps       = prometheus.NewDesc("localbus_gaps_served_total", "stream:gap frames sent to resuming clients, by reason.", []string{"bus", "reason"}, nil)
	descReplayed   = prometheus.NewDesc("localbus_events_replayed_total", "Events queued by replays to resuming clients.", []string{"bus"}, nil)
	descSubs       = prometheus.NewDesc("localbus_subscribers", "Subscribers now.", []string{"bus"}, nil)
	descRingEvents = prometheus.NewDesc("localbus_ring_events", "Events held in replay rings.", []string{"bus"}, nil)
	descRingBytes  = prometheus.NewDesc("localbus_ring_bytes", "Encoded bytes held in replay rings.", []string{"bus"}, nil)
	descSessions   = prometheus.NewDesc("localbus_sessions", "Sessions now.", nil, nil)
)

func (c busCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPublished, descDelivered, descEvicted, descSlow, descGaps, descReplayed, descSubs, descRingEvents, descRingBytes, descSessions} {
		ch <- d
	}
}

func (c busCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.h.options().Hub.Totals()
	ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(t.Count))
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
		counter(descSlow, b.st.SlowWarnings)
		counter(descGaps, b.st.GapRingEvicted, bus.GapRingEvicted)
		counter(descGaps, b.st.GapEpochReset, bus.GapEpochReset)
		counter(descReplayed, b.st.Replayed)
		gauge(descSubs, float64(b.st.Subscribers))
		gauge(descRingEvents, float64(b.st.RingLen))
		gauge(descRingBytes, float64(b.st.RingBytes))
	}
}
