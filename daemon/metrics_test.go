package daemon

import (
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
)

// TestMetricsRegistryPassesLint runs client_golang's linter (the checks
// of promtool check metrics) over everything a durable daemon registers:
// the router's, the daemon's and the journal's families and the standard
// collectors, after some traffic so that every family has samples.
func TestMetricsRegistryPassesLint(t *testing.T) {
	dir := t.TempDir()
	cfg := Defaults()
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.KeysFile = filepath.Join(dir, "keys.json")
	d := newDaemon(cfg, Source{File: filepath.Join(dir, "config.toml")}, Options{Version: "test", Logger: slog.New(slog.DiscardHandler)})
	if err := d.open(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		d.hub.Close()
		d.closeJournal()
	}()
	if _, _, err := d.hub.Publish(bustest.SessionID("s"), []bus.Event{{Type: bustest.Type("a:b")}}); err != nil {
		t.Fatal(err)
	}
	d.metrics.reloads.WithLabelValues(reloadOK).Inc()
	problems, err := testutil.GatherAndLint(d.metrics.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	n, err := testutil.GatherAndCount(d.metrics.reg)
	if err != nil || n == 0 {
		t.Errorf("GatherAndCount = %d, %v; want samples", n, err)
	}
}
