package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/localbus/localbus/bus"
)

// reloadRequest is POST /api/v1/reload.
func (d *Daemon) reloadRequest(context.Context) error { return d.reload() }

// reload reads the daemon's Source again; an invalid configuration is
// refused and the running one kept. On success every stream gets
// stream:closed (reload) and WebSocket 1001, buses, rings and ids stay, and
// the new values of Reloadable settings apply; the others keep their running
// values until a restart, named in the log.
func (d *Daemon) reload() (err error) {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	if d.stopping {
		return errors.New("reload: the daemon is shutting down")
	}
	defer func() {
		if err != nil {
			d.metrics.reloads.WithLabelValues(reloadRefused).Inc()
			d.log.Error("reload refused; keeping the running configuration", "err", err)
		}
	}()
	d.notify("RELOADING", d.notifier.Reloading())
	defer func() { d.notify("READY", d.notifier.Ready()) }()
	next, err := LoadConfig(d.src)
	if err != nil {
		return err
	}
	restart := keepRestartSettings(d.cfg, &next)
	restart = append(restart, keepUpstreamRestart(d.cfg, &next)...)
	// The file was valid on its own; the configuration that will run is
	// the file's reloadable values with the running ones of the rest
	// (listen_tcp with allow_remote from the file, say), so check that too.
	if err := next.Validate(); err != nil {
		return fmt.Errorf("with the settings that change only on restart kept at their running values: %w", err)
	}
	if len(d.remote) > 0 && !next.AllowRemote {
		return &ConfigError{Key: "allow_remote", Msg: fmt.Sprintf(
			"the daemon serves %s, which is not a loopback address, until it restarts; keep allow_remote = true, or restart without that address",
			strings.Join(d.remote, ", "))}
	}
	if len(restart) > 0 {
		d.log.Warn("these settings change only on restart; keeping their running values", "keys", restart)
	}
	auth, err := newAuth(next)
	if err != nil {
		return err
	}
	if err := d.hub.SetOptions(hubOptions(next)); err != nil {
		return err
	}
	d.noteAutoSessionLimit(next)
	setMemoryLimit(next)
	if d.upstream != nil && next.Upstream != nil {
		if err := d.upstream.SetPatterns(next.Upstream.Export, next.Upstream.Import); err != nil {
			return err
		}
	}
	changed := d.cfg.Diff(next)
	keys := keySummary(auth)
	added, removed, changedKeys := diffKeys(d.keys, keys)
	d.keys = keys
	d.handler.SetOptions(d.handlerOptions(next, auth))
	d.level.Set(next.SlogLevel())
	d.cfg = next
	d.hub.EndStreams(bus.EndReload)
	data, _ := json.Marshal(map[string]any{"time": time.Now().UTC().Format(time.RFC3339Nano)})
	d.hub.Announce(bus.Event{Type: "localbus:reloaded", Data: data})
	d.metrics.reloads.WithLabelValues(reloadOK).Inc()
	// Names only: a key's secret and hash never reach the log.
	d.log.Info("reloaded", "changed", changed, "kept_until_restart", restart,
		"keys", len(keys), "keys_added", added, "keys_removed", removed, "keys_changed", changedKeys)
	d.notifyStatus()
	return nil
}
