package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/ipc"
)

// reloadRequest is POST /api/v1/reload: it returns the changed keys that
// wait for a restart.
func (d *Daemon) reloadRequest(context.Context) ([]string, error) { return d.reload() }

// A reloadPlan is everything a reload will apply, decided and checked
// before anything changes: applying it cannot fail (nats-server's reload
// decides first, then applies, the same way).
type reloadPlan struct {
	// next is the configuration that will run: the file's reloadable
	// values with the running ones of the rest.
	next Config
	// restartNeeded are the changed keys that wait for a restart.
	restartNeeded []string
	auth          *ipc.Auth
	hub           hub.Options
}

// reload reads the daemon's Source again; an invalid configuration is
// refused and the running one kept. On success every stream gets
// stream:closed (reload) and WebSocket 1001, buses, rings and ids stay, and
// the new values of reloadable keys apply; the others keep their running
// values until a restart, named in the log and returned.
func (d *Daemon) reload() (restartNeeded []string, err error) {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	if d.stopping {
		return nil, errors.New("reload: the daemon is shutting down")
	}
	defer func() {
		if err != nil {
			d.metrics.reloads.WithLabelValues(reloadRefused).Inc()
			d.log.Error("reload refused; keeping the running configuration", "err", err)
		}
	}()
	d.notify("RELOADING", d.notifier.Reloading())
	defer func() { d.notify("READY", d.notifier.Ready()) }()
	plan, err := d.planReload()
	if err != nil {
		return nil, err
	}
	d.applyReload(plan)
	return plan.restartNeeded, nil
}

// planReload loads the configuration and keys again and checks everything
// the reload will apply; it changes nothing.
func (d *Daemon) planReload() (reloadPlan, error) {
	next, err := LoadConfig(d.src)
	if err != nil {
		return reloadPlan{}, err
	}
	restart := keepRestartValues(d.cfg, &next)
	// The file was valid on its own; the configuration that will run is
	// the file's reloadable values with the running ones of the rest
	// (listen_tcp with allow_remote from the file, say), so check that too.
	if err := next.Validate(); err != nil {
		return reloadPlan{}, fmt.Errorf("with the settings that change only on restart kept at their running values: %w", err)
	}
	if len(d.remote) > 0 && !next.AllowRemote {
		return reloadPlan{}, &ConfigError{Key: "allow_remote", Msg: fmt.Sprintf(
			"the daemon serves %s, which is not a loopback address, until it restarts; keep allow_remote = true, or restart without that address",
			strings.Join(d.remote, ", "))}
	}
	auth, err := newAuth(next)
	if err != nil {
		return reloadPlan{}, err
	}
	opts := hubOptions(next)
	if err := opts.Validate(); err != nil {
		return reloadPlan{}, err
	}
	return reloadPlan{next: next, restartNeeded: restart, auth: auth, hub: opts}, nil
}

// applyReload applies a plan planReload checked; nothing in it fails.
func (d *Daemon) applyReload(p reloadPlan) {
	next := p.next
	if len(p.restartNeeded) > 0 {
		d.log.Warn("these settings change only on restart; keeping their running values", "keys", p.restartNeeded)
	}
	d.hub.SetOptions(p.hub)
	d.noteAutoSessionLimit(next)
	setMemoryLimit(next)
	if d.upstream != nil && next.Upstream != nil {
		// next.Validate checked the patterns.
		d.upstream.SetPatterns(next.Upstream.Export, next.Upstream.Import)
	}
	changed := d.cfg.Diff(next)
	keys := keySummary(p.auth)
	added, removed, changedKeys := diffKeys(d.keys, keys)
	d.keys = keys
	d.handler.SetSettings(d.handlerSettings(next, p.auth))
	d.level.Set(next.SlogLevel())
	d.cfg = next
	d.hub.EndStreams(bus.EndReload)
	data, _ := json.Marshal(map[string]any{"time": time.Now().UTC().Format(time.RFC3339Nano)})
	d.hub.Announce(bus.Event{Type: bus.TypeReloaded, Data: data})
	d.metrics.reloads.WithLabelValues(reloadOK).Inc()
	// Names only: a key's secret and hash never reach the log.
	d.log.Info("reloaded", "changed", changed, "kept_until_restart", p.restartNeeded,
		"keys", len(keys), "keys_added", added, "keys_removed", removed, "keys_changed", changedKeys)
	d.notifyStatus()
}
