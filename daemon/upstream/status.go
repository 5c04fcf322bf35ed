package upstream

import (
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/localbus/localbus/ipc/wire"
)

// Status is what `localbus status` shows of the bridge, the body of GET
// /api/v1/upstream.
type Status = wire.UpstreamStatus

// ExportStatus is one exported session.
type ExportStatus = wire.UpstreamExport

// MirrorStatus is one mirror.
type MirrorStatus = wire.UpstreamMirror

// Status returns the bridge's state.
func (b *Bridge) Status() Status {
	st := Status{Node: b.cfg.Node, Stream: b.cfg.Stream, URLs: redact(b.cfg.URLs), Connected: b.nc.IsConnected()}
	if st.Connected {
		st.Server = redactURL(b.nc.ConnectedUrl())
	}
	b.mu.Lock()
	st.LastError, st.Exported, st.Imported, st.Lost = b.lastErr, b.exported.Load(), b.imported.Load(), b.lost.Load()
	st.ImportLost, st.ImportGaps = b.importLost.Load(), b.importGaps.Load()
	pat := b.pat.Load()
	st.Export, st.Import = slices.Clone(pat.export), slices.Clone(pat.imports)
	exporters := make(map[string]*exporter, len(b.exporters))
	for id, e := range b.exporters {
		exporters[id] = e
	}
	mirrors := make(map[string]*mirror, len(b.mirrors))
	for id, m := range b.mirrors {
		mirrors[id] = m
	}
	b.mu.Unlock()
	for id, e := range exporters {
		s, ok := b.opts.Hub.Session(id)
		if !ok {
			continue
		}
		es := ExportStatus{Session: id, LastID: s.Bus.LastID()}
		c, _ := e.cursor()
		es.ExportedID, es.Epoch = c.id, c.epoch
		e.mu.Lock()
		es.Lost = e.lost
		e.mu.Unlock()
		if bl := b.opts.Backlog; bl != nil {
			es.BacklogBytes = bl.ExportBacklog(id)
			st.BacklogBytes += es.BacklogBytes
		}
		if c.epoch == s.Bus.Epoch() && c.id <= es.LastID {
			es.Lag = es.LastID - c.id
		} else {
			es.Lag = es.LastID
		}
		st.Lag += es.Lag
		st.Sessions = append(st.Sessions, es)
	}
	for id, m := range mirrors {
		ms := MirrorStatus{Session: id, Node: m.node, Source: m.session}
		m.mu.Lock()
		ms.Epoch, ms.ID, ms.Imported, ms.Lost, ms.Gaps = m.epoch, m.id, m.imported, m.lost, m.gaps
		m.mu.Unlock()
		if s, ok := b.opts.Hub.Session(id); ok {
			ms.LastID = s.Bus.LastID()
		}
		st.Mirrors = append(st.Mirrors, ms)
	}
	slices.SortFunc(st.Sessions, func(a, b ExportStatus) int { return strings.Compare(a.Session, b.Session) })
	slices.SortFunc(st.Mirrors, func(a, b MirrorStatus) int { return strings.Compare(a.Session, b.Session) })
	return st
}

var (
	descConnected  = prometheus.NewDesc("localbus_upstream_connected", "1 when the upstream bridge is connected to NATS.", nil, nil)
	descLag        = prometheus.NewDesc("localbus_upstream_export_lag_events", "Events of an exported session not yet acknowledged by JetStream.", []string{"session"}, nil)
	descBacklog    = prometheus.NewDesc("localbus_upstream_backlog_bytes", "What the journal keeps of an exported session beyond its ring, for events JetStream has not acknowledged.", []string{"session"}, nil)
	descExported   = prometheus.NewDesc("localbus_upstream_exported_total", "Events exported and acknowledged by JetStream.", nil, nil)
	descImported   = prometheus.NewDesc("localbus_upstream_imported_total", "Events imported into mirrors.", nil, nil)
	descLost       = prometheus.NewDesc("localbus_upstream_lost_total", "Events of exported sessions dropped before JetStream acknowledged them (past backlog_bytes, or on a full disk).", nil, nil)
	descImportLost = prometheus.NewDesc("localbus_upstream_import_lost_total", "Origin ids that mirrors found missing (their readers get stream:gap, upstream_lost).", nil, nil)
	descImportGaps = prometheus.NewDesc("localbus_upstream_import_gaps_total", "Jumps in origin ids that mirrors recorded as a loss, each one stream:gap (upstream_lost) for their readers.", nil, nil)
)

// Collector returns the bridge's Prometheus metrics, read at each scrape.
func (b *Bridge) Collector() prometheus.Collector { return collector{b} }

type collector struct{ b *Bridge }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descConnected, descLag, descBacklog, descExported, descImported, descLost, descImportLost, descImportGaps} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	st := c.b.Status()
	connected := 0.0
	if st.Connected {
		connected = 1
	}
	ch <- prometheus.MustNewConstMetric(descConnected, prometheus.GaugeValue, connected)
	for _, s := range st.Sessions {
		ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(s.Lag), s.Session)
		ch <- prometheus.MustNewConstMetric(descBacklog, prometheus.GaugeValue, float64(s.BacklogBytes), s.Session)
	}
	ch <- prometheus.MustNewConstMetric(descExported, prometheus.CounterValue, float64(st.Exported))
	ch <- prometheus.MustNewConstMetric(descImported, prometheus.CounterValue, float64(st.Imported))
	ch <- prometheus.MustNewConstMetric(descLost, prometheus.CounterValue, float64(st.Lost))
	ch <- prometheus.MustNewConstMetric(descImportLost, prometheus.CounterValue, float64(st.ImportLost))
	ch <- prometheus.MustNewConstMetric(descImportGaps, prometheus.CounterValue, float64(st.ImportGaps))
}

// MemCursors keeps cursors in memory, for a daemon without a journal.
type MemCursors struct {
	mu sync.Mutex
	m  map[string][]byte
}

// Cursor implements Cursors.
func (c *MemCursors) Cursor(name string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.m[name]), nil
}

// PutCursor implements Cursors.
func (c *MemCursors) PutCursor(name string, value []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string][]byte{}
	}
	if value == nil {
		delete(c.m, name)
	} else {
		c.m[name] = slices.Clone(value)
	}
	return nil
}
