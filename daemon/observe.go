package daemon

import (
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/localbus/localbus/daemon/journal"
	"github.com/localbus/localbus/ipc"
)

// newLogger returns the daemon's logger on w (SPEC §8): text or JSON lines
// by cfg.LogFormat, at level. Under journald (JOURNAL_STREAM set) lines
// carry no time of their own: the journal stamps each one.
func newLogger(w io.Writer, format string, level slog.Leveler, journald bool) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if journald {
		opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}
	}
	if format == LogFormatJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// underJournald reports whether stderr goes to the systemd journal.
func underJournald() bool { return os.Getenv("JOURNAL_STREAM") != "" }

// daemonMetrics are the metrics the daemon adds to the router's (see
// ipc.Options.Registry): build info, reloads, the journal's figures and
// the standard process and Go runtime collectors.
type daemonMetrics struct {
	reg         *prometheus.Registry
	reloads     *prometheus.CounterVec
	syncSeconds prometheus.Histogram
}

func newDaemonMetrics(version string) *daemonMetrics {
	m := &daemonMetrics{
		reg: prometheus.NewRegistry(),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "localbus_reloads_total",
			Help: "Configuration reloads (SIGHUP, POST /api/v1/reload), by result: ok, or refused (the running configuration kept).",
		}, []string{"result"}),
		syncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "localbus_journal_fsync_duration_seconds",
			Help:    "Time each fsync of the journal's log took.",
			Buckets: []float64{.0001, .0003, .001, .003, .01, .03, .1, .3, 1, 3},
		}),
	}
	m.reloads.WithLabelValues(reloadOK)
	m.reloads.WithLabelValues(reloadRefused)
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "localbus_build_info",
		Help:        "Always 1: the version of localbus and of Go it was built with, as labels.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
	})
	buildInfo.Set(1)
	m.reg.MustRegister(m.reloads, buildInfo,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Results of a reload, the result label of localbus_reloads_total.
const (
	reloadOK      = "ok"
	reloadRefused = "refused"
)

// addJournal registers the journal's figures, read at each scrape, and
// the fsync latency histogram it feeds (journal.Options.SyncSeconds).
func (m *daemonMetrics) addJournal(j *journal.Journal) {
	m.reg.MustRegister(m.syncSeconds, journalCollector{j})
}

// journalCollector reads a journal's Stats at each scrape.
type journalCollector struct{ j *journal.Journal }

var (
	descJournalLog         = prometheus.NewDesc("localbus_journal_log_bytes", "Bytes of the journal's log not yet checkpointed into the database.", nil, nil)
	descJournalDB          = prometheus.NewDesc("localbus_journal_db_bytes", "Size of the journal's database file.", nil, nil)
	descJournalDisk        = prometheus.NewDesc("localbus_journal_disk_bytes", "Bytes the journal takes on disk: the database and the log segments, preallocated space included.", nil, nil)
	descJournalCheckpoints = prometheus.NewDesc("localbus_journal_checkpoints_total", "Checkpoints and compactions of the journal's log into its database, by result (ok, error).", []string{"result"}, nil)
	descJournalDiskFull    = prometheus.NewDesc("localbus_journal_disk_full_total", "Publishes refused because the journal's disk was full (507 disk_full).", nil, nil)
)

func (c journalCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descJournalLog, descJournalDB, descJournalDisk, descJournalCheckpoints, descJournalDiskFull} {
		ch <- d
	}
}

func (c journalCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.j.Stats()
	ch <- prometheus.MustNewConstMetric(descJournalLog, prometheus.GaugeValue, float64(st.LogBytes))
	ch <- prometheus.MustNewConstMetric(descJournalDB, prometheus.GaugeValue, float64(st.DBBytes))
	ch <- prometheus.MustNewConstMetric(descJournalDisk, prometheus.GaugeValue, float64(st.BytesOnDisk))
	ch <- prometheus.MustNewConstMetric(descJournalCheckpoints, prometheus.CounterValue, float64(st.Checkpoints), "ok")
	ch <- prometheus.MustNewConstMetric(descJournalCheckpoints, prometheus.CounterValue, float64(st.CheckpointErrors), "error")
	ch <- prometheus.MustNewConstMetric(descJournalDiskFull, prometheus.CounterValue, float64(st.DiskFull))
}

// logStart logs what the daemon runs with: the configuration file (and
// whether it exists: an absent one means defaults), the state directory
// and the keys file.
func (d *Daemon) logStart() {
	file := d.src.File
	if file == "" {
		file = DefaultConfigPath()
	}
	_, err := os.Stat(file)
	attrs := []any{"version", d.opts.Version, "config", file, "config_found", err == nil,
		"keys_file", d.cfg.KeysFile, "durability", d.cfg.Durability}
	if d.cfg.Durability == DurabilityDisk {
		attrs = append(attrs, "state_dir", d.cfg.StateDir, "fsync", d.cfg.Fsync)
	}
	d.log.Info("starting", attrs...)
}

// logStop is the daemon's last line.
func (d *Daemon) logStop(err error) {
	if err != nil {
		d.log.Error("stopped", "err", err)
		return
	}
	d.log.Info("stopped")
}

// keySummary maps the name of each key of a's keyring to what a reload
// compares of it: its scopes and creation time (a key revoked and added
// again under its name is another key). Never a key or a hash.
func keySummary(a *ipc.Auth) map[string]string {
	m := map[string]string{}
	if a == nil || a.Keys == nil {
		return m
	}
	for _, k := range a.Keys.List() {
		m[k.Name] = k.Scopes.String() + " " + k.Created.UTC().Format(time.RFC3339)
	}
	return m
}

// diffKeys returns the names of the keys in next and not in prev (added),
// in prev and not in next (removed), and in both but different (changed),
// each sorted.
func diffKeys(prev, next map[string]string) (added, removed, changed []string) {
	for name, v := range next {
		old, ok := prev[name]
		switch {
		case !ok:
			added = append(added, name)
		case old != v:
			changed = append(changed, name)
		}
	}
	for name := range prev {
		if _, ok := next[name]; !ok {
			removed = append(removed, name)
		}
	}
	slices.Sort(added)
	slices.Sort(removed)
	slices.Sort(changed)
	return added, removed, changed
}
