package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/daemon/journal"
	"github.com/localbus/localbus/daemon/upstream"
	"github.com/localbus/localbus/ipc"
	"github.com/localbus/localbus/ipc/access"
	"github.com/localbus/localbus/ipc/wire"
	"github.com/localbus/localbus/systemd"
)

// Options are what Run needs besides the configuration.
type Options struct {
	// Version is reported by /api/v1/caps.
	Version string
	// Logger receives the daemon's logs; nil means a logger on stderr at
	// the configured level and format (log_level, log_format), without
	// timestamps under journald.
	Logger *slog.Logger
}

// A Daemon is one run of localbus serve: its listeners, hub and router.
type Daemon struct {
	opts     Options
	src      Source // read again on every reload
	log      *slog.Logger
	level    *slog.LevelVar
	hub      *hub.Hub
	journal  *journal.Journal // nil with durability "memory"
	upstream *upstream.Bridge // nil without an [upstream] table
	handler  *ipc.Handler
	metrics  *daemonMetrics
	notifier *systemd.Notifier
	server   *http.Server
	conns    *connTracker // the server's new and active connections
	// remote are the addresses of the TCP listeners served that are not
	// loopback ones (set by listen): allow_remote must stay on while they
	// are served, reloads included.
	remote []string

	// durability and fsync are the settings the daemon opened with (a
	// reload does not change them), reported by /api/v1/caps.
	durability, fsync string

	reloadMu sync.Mutex // serializes reloads and shutdown; guards cfg, keys and stopping
	cfg      Config
	keys     map[string]string // the keys in use (keySummary), to log what a reload changed
	stopping bool              // shutdown has begun: reloads are refused

	statusMu   sync.Mutex // guards lastStatus
	lastStatus string     // the last STATUS= sent

	notifyFailed atomic.Bool // a notification has failed and been logged
}

// statusInterval is how often the daemon checks whether its STATUS= line
// changed (sessions, subscribers) and tells the service manager if so.
const statusInterval = 2 * time.Second

// Run loads the configuration of src and serves until ctx is done (SIGTERM,
// SIGINT), reloading on SIGHUP and POST /api/v1/reload, then shuts down
// gracefully (SPEC §8). A reload reads src again. An invalid configuration
// is LoadConfig's error, returned before anything starts; a clean shutdown
// returns nil.
func Run(ctx context.Context, src Source, opts Options) (err error) {
	cfg, err := LoadConfig(src)
	if err != nil {
		return err
	}
	d := newDaemon(cfg, src, opts)
	d.logStart()
	// Deferred before cleanup, so it runs after it: the last line.
	defer func() { d.logStop(err) }()
	// The socket first: a second daemon started by mistake is told that
	// another one answers there, before it touches the journal.
	listeners, cleanup, err := d.listen()
	if err != nil {
		return err
	}
	defer cleanup()
	if err := d.open(); err != nil {
		return err
	}
	return d.serve(ctx, listeners)
}

// newDaemon returns a daemon with its logger and notifier, not yet open.
func newDaemon(cfg Config, src Source, opts Options) *Daemon {
	d := &Daemon{opts: opts, src: src, cfg: cfg, notifier: systemd.NewNotifier(), level: new(slog.LevelVar), conns: newConnTracker()}
	d.level.Set(cfg.SlogLevel())
	d.log = opts.Logger
	if d.log == nil {
		d.log = newLogger(os.Stderr, cfg.LogFormat, d.level, underJournald())
	}
	d.metrics = newDaemonMetrics(opts.Version)
	return d
}

// open loads the keys, opens the journal (durability "disk") and restores
// its sessions, and builds the hub, router and HTTP server.
func (d *Daemon) open() error {
	cfg := d.cfg
	auth, err := newAuth(cfg)
	if err != nil {
		return err
	}
	d.keys = keySummary(auth)
	ho := hubOptions(cfg)
	d.noteAutoSessionLimit(cfg)
	setMemoryLimit(cfg)
	d.durability = cfg.Durability
	ho.Logger = d.log
	if cfg.Durability == DurabilityDisk {
		j, err := openJournal(cfg, d.log, d.metrics.syncSeconds)
		if err != nil {
			return err
		}
		d.journal, ho.Journal = j, j
		d.fsync = cfg.Fsync
		d.metrics.addJournal(j)
	}
	h, err := hub.New(ho)
	if err != nil {
		d.closeJournal()
		return err
	}
	d.hub = h
	if cfg.Upstream != nil {
		// Before the router serves: the bridge marks its mirrors read-only.
		var cursors upstream.Cursors = new(upstream.MemCursors)
		if d.journal != nil {
			cursors = d.journal
		}
		br, err := upstream.Start(upstream.Options{Config: *cfg.Upstream, Hub: h, Cursors: cursors, Logger: d.log})
		if err != nil {
			h.Close()
			d.closeJournal()
			return err
		}
		d.upstream = br
	}
	d.handler = ipc.New(d.handlerOptions(cfg, auth))
	d.server = &http.Server{
		Handler:           d.handler,
		ConnContext:       ipc.ConnContext,
		ConnState:         d.conns.hook,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    int(cfg.MaxHeaderBytes),
		ErrorLog:          slog.NewLogLogger(d.log.Handler(), slog.LevelDebug),
	}
	return nil
}

// openJournal opens the journal in cfg.StateDir (SPEC §11), creating the
// directory 0700; one the daemon did not create must be its own and not
// writable by others (SPEC §7).
func openJournal(cfg Config, log *slog.Logger, syncSeconds journal.Observer) (*journal.Journal, error) {
	if err := journal.PrepareDir(cfg.StateDir); err != nil {
		return nil, fmt.Errorf("state_dir: %w", err)
	}
	j, err := journal.Open(journal.Options{
		Dir: filepath.Join(cfg.StateDir, "journal"), Sync: cfg.Fsync, SyncInterval: cfg.FsyncInterval, Logger: log,
		SyncSeconds: syncSeconds,
	})
	if err != nil {
		return nil, err
	}
	log.Info("journal open", "dir", cfg.StateDir, "fsync", cfg.Fsync, "sessions", len(j.Sessions()))
	return j, nil
}

// closeJournal checkpoints the journal and marks a clean shutdown.
func (d *Daemon) closeJournal() {
	if d.journal == nil {
		return
	}
	if err := d.journal.Close(); err != nil {
		d.log.Error("closing the journal", "err", err)
	}
}

// noteAutoSessionLimit logs that cfg's max_auto_sessions is above half of
// max_sessions, and so lowered to that half (SPEC §2): publishers always
// leave an admin room to create sessions.
func (d *Daemon) noteAutoSessionLimit(cfg Config) {
	if limit, lowered := hub.AutoSessionLimit(cfg.MaxSessions, cfg.MaxAutoSessions); lowered {
		d.log.Warn("max_auto_sessions is above half of max_sessions; lowered to that half",
			"max_auto_sessions", cfg.MaxAutoSessions, "max_sessions", cfg.MaxSessions, "limit", limit)
	}
}

func hubOptions(cfg Config) hub.Options {
	return hub.Options{
		Limits: bus.Limits{
			RingSize: cfg.RingSize, RingMaxBytes: cfg.RingMaxBytes, MaxQueued: cfg.MaxQueued,
			MaxQueuedBytes: cfg.MaxQueuedBytes, MaxSubscribers: cfg.MaxSubscribers,
		},
		MaxSessions:       cfg.MaxSessions,
		MaxAutoSessions:   cfg.MaxAutoSessions,
		PeerShare:         cfg.PeerShare,
		MaxRingBytesTotal: cfg.MaxRingBytesTotal,
		AutoSessionTTL:    cfg.AutoSessionTTL,
		AutoCreate:        cfg.AutoCreateSessions,
		IdempotencyWindow: cfg.IdempotencyWindow,
	}
}

// newAuth builds the access policy of cfg (SPEC §7), reading the keys
// file. An unreadable or invalid keys file, or one others may read, is an
// error: the daemon does not start, and a reload keeps the running policy.
func newAuth(cfg Config) (*ipc.Auth, error) {
	keys, err := access.Load(cfg.KeysFile)
	if err != nil {
		return nil, err
	}
	peerScopes, err := access.ParseScopes(cfg.UnixPeerScopes)
	if err != nil {
		return nil, fmt.Errorf("unix_peer_scopes: %w", err)
	}
	return &ipc.Auth{
		Keys:             keys,
		RequireKeyOnUnix: cfg.UnixAuth == UnixAuthKey,
		DaemonUID:        uint32(os.Getuid()),
		PeerScopes:       peerScopes,
		AllowedOrigins:   cfg.AllowedOrigins,
		AllowedHosts:     cfg.AllowedHosts,
	}, nil
}

func (d *Daemon) handlerOptions(cfg Config, auth *ipc.Auth) ipc.Options {
	o := d.baseHandlerOptions(cfg, auth)
	if br := d.upstream; br != nil {
		o.Upstream = func() any { return br.Status() }
		o.Metrics = append(o.Metrics, br.Collector())
	}
	return o
}

func (d *Daemon) baseHandlerOptions(cfg Config, auth *ipc.Auth) ipc.Options {
	return ipc.Options{
		Hub:                  d.hub,
		Authenticate:         auth.Authenticate,
		AllowedOrigins:       cfg.AllowedOrigins,
		MaxStreams:           cfg.MaxSubscribersTotal,
		MaxEventBytes:        cfg.MaxEventBytes,
		MaxHeaderBytes:       cfg.MaxHeaderBytes,
		MaxBodyBytes:         cfg.MaxBodyBytes,
		MaxInflightBodyBytes: cfg.MaxInflightBodyBytes,
		PeerShare:            cfg.PeerShare,
		Keepalive:            cfg.Keepalive,
		Reload:               d.reloadRequest,
		Version:              d.opts.Version,
		KeysFile:             absPath(cfg.KeysFile),
		Logger:               d.log,
		Registry:             d.metrics.reg,
		Caps: wire.Limits{
			RingSize: cfg.RingSize, RingMaxBytes: cfg.RingMaxBytes, MaxQueued: cfg.MaxQueued,
			MaxQueuedBytes: cfg.MaxQueuedBytes, MaxSubscribers: cfg.MaxSubscribers, MaxSessions: cfg.MaxSessions,
		},
		Durability: d.durability, Fsync: d.fsync,
	}
}

// absPath returns p made absolute, or p when that fails.
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// listen returns the listeners to serve: inherited ones under socket
// activation, else the daemon's own socket (and TCP address, if set).
// cleanup closes them; an own socket file is unlinked then, an inherited one
// never.
func (d *Daemon) listen() (ls []net.Listener, cleanup func(), err error) {
	inherited, activated, err := systemd.Listeners()
	if err != nil {
		return nil, nil, err
	}
	cleanup = func() {
		for _, l := range ls {
			l.Close()
		}
	}
	if activated {
		for name, group := range inherited {
			for _, l := range group {
				d.log.Info("using activated socket", "name", name, "addr", l.Addr().String())
				ls = append(ls, l)
			}
		}
		// An inherited TCP socket is held to the rule of listen_tcp
		// (SPEC §7): loopback only, unless allow_remote is set.
		d.remote = nonLoopback(ls)
		if len(d.remote) > 0 && !d.cfg.AllowRemote {
			cleanup()
			return nil, nil, fmt.Errorf("activated TCP socket on %s is not on a loopback address; set allow_remote to serve it, or bind it to 127.0.0.1 or ::1 in the socket unit",
				strings.Join(d.remote, ", "))
		}
		if d.cfg.ListenTCP != "" && len(inherited[systemd.NameTCP]) == 0 {
			d.log.Warn("listen_tcp is ignored under socket activation; add a ListenStream= with FileDescriptorName=tcp to the socket unit",
				"listen_tcp", d.cfg.ListenTCP)
		}
		return ls, cleanup, nil
	}
	u, stale, err := listenUnix(d.cfg.Socket, d.cfg.SocketMode, d.cfg.SocketGroup)
	if err != nil {
		return nil, nil, err
	}
	if stale {
		d.log.Info("replaced a stale socket that nothing listened on", "socket", d.cfg.Socket)
	}
	ls = append(ls, u)
	d.log.Info("listening", "socket", d.cfg.Socket, "mode", fmt.Sprintf("%04o", d.cfg.SocketMode))
	if d.cfg.ListenTCP != "" {
		t, err := net.Listen("tcp", d.cfg.ListenTCP)
		if err != nil {
			cleanup()
			return nil, nil, fmt.Errorf("listen_tcp: %w", err)
		}
		ls = append(ls, t)
		d.log.Info("listening", "tcp", t.Addr().String())
	}
	d.remote = nonLoopback(ls)
	return ls, cleanup, nil
}

// serve runs the HTTP server on every listener until ctx is done, handling
// SIGHUP as reload, then shuts down.
func (d *Daemon) serve(ctx context.Context, listeners []net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Requests do not get ctx: the signal that ends it must not cut streams
	// off before shutdown has told them why (stream:closed). Their context
	// ends when shutdown is over, or when its time is up.
	base, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	d.server.BaseContext = func(net.Listener) context.Context { return base }

	var wg sync.WaitGroup
	serveErr := make(chan error, len(listeners))
	for _, l := range listeners {
		wg.Go(func() {
			// Shutdown closes the listeners itself, before it calls
			// http.Server.Shutdown.
			err := d.server.Serve(l)
			if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
				serveErr <- err
			}
		})
	}
	wg.Go(func() {
		if err := systemd.RunWatchdog(ctx, d.notifier, nil); err != nil {
			d.log.Warn("watchdog", "err", err)
		}
	})
	wg.Go(func() { d.expireSessions(ctx) })
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	d.notify("READY", d.notifier.Ready())
	d.notifyStatus()
	d.log.Info("ready", "version", d.opts.Version)
	if d.notifier.Enabled() {
		wg.Go(func() { d.reportStatus(ctx) })
	}

	var err error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err = <-serveErr:
			d.log.Error("serve", "err", err)
			break loop
		case <-hup:
			d.reload() // logged by reload
		}
	}
	d.shutdown(listeners, cancelRequests)
	cancel()
	wg.Wait()
	return err
}

// expireSessions deletes idle sessions a publish created (auto_session_ttl,
// SPEC §2) every expiryInterval of the ttl in force, until ctx is done.
// The hub logs each one and announces it on the global bus.
func (d *Daemon) expireSessions(ctx context.Context) {
	for {
		t := time.NewTimer(expiryInterval(d.hub.AutoSessionTTL()))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case now := <-t.C:
			d.hub.ExpireIdle(now)
		}
	}
}

// expiryInterval is how often sessions are checked for expiry under ttl:
// a tenth of it, at most a minute (also when expiry is off, so that a
// reload turning it on takes effect within a minute).
func expiryInterval(ttl time.Duration) time.Duration {
	if ttl <= 0 {
		return time.Minute
	}
	return min(ttl/10, time.Minute)
}

// shutdown stops accepting, ends every stream with stream:closed (shutdown)
// and WebSocket 1001, lets in-flight requests finish and waits for streams,
// all within shutdown_timeout. Past it, it calls cancelRequests and closes
// what is left.
func (d *Daemon) shutdown(listeners []net.Listener, cancelRequests context.CancelFunc) {
	// Under reloadMu, so that a reload in progress finishes first (its
	// READY=1 must not follow STOPPING=1) and none starts after.
	d.reloadMu.Lock()
	d.stopping = true
	timeout := d.cfg.ShutdownTimeout
	d.reloadMu.Unlock()
	d.notify("STOPPING", d.notifier.Stopping())
	d.log.Info("shutting down")
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	d.handler.Drain()
	if d.upstream != nil {
		// Stops exporting and importing, and writes the cursors, while
		// the buses are still open.
		d.upstream.Close()
	}
	// Stop accepting, and close each connection after its answer.
	// Connections still in a listener's backlog are refused (reset); under
	// socket activation they wait for the next start.
	d.server.SetKeepAlivesEnabled(false)
	for _, l := range listeners {
		l.Close()
	}
	done := make(chan error, 1)
	go func() {
		// http.Server.Shutdown closes a connection whose request it reads
		// after it began without answering it, so let every request that
		// reached the daemon arrive and be answered first.
		err := d.conns.quiet(ctx, newConnGrace)
		if err == nil {
			// The listeners are closed already.
			if err = d.server.Shutdown(ctx); errors.Is(err, net.ErrClosed) {
				err = nil
			}
		}
		if err == nil {
			err = d.handler.Wait(ctx)
		}
		done <- err
	}()
	// A stream that got past the handler's drain check just before Drain
	// subscribes after the first EndStreams; end such latecomers as well,
	// until every stream is gone.
	d.hub.EndStreams(bus.EndShutdown)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var err error
wait:
	for {
		select {
		case err = <-done:
			break wait
		case <-tick.C:
			d.hub.EndStreams(bus.EndShutdown)
		}
	}
	if err != nil {
		d.log.Warn("shutdown timed out; closing what is left", "timeout", timeout)
		cancelRequests()
		d.server.Close()
	}
	d.hub.Close()
	d.closeJournal()
}

// notifyStatus tells the service manager what the daemon holds, if that
// changed since it last did.
func (d *Daemon) notifyStatus() {
	status := fmt.Sprintf("%d sessions, %d subscribers", d.hub.Len(), d.hub.Subscribers())
	d.statusMu.Lock()
	defer d.statusMu.Unlock()
	if status == d.lastStatus {
		return
	}
	d.lastStatus = status
	d.notify("STATUS", d.notifier.Status(status))
}

// reportStatus keeps STATUS= current until ctx is done.
func (d *Daemon) reportStatus(ctx context.Context) {
	t := time.NewTicker(statusInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.notifyStatus()
		}
	}
}

// notify logs err, the failure of a notification to the service manager.
// The daemon goes on serving: the manager acts on what it did not hear (a
// start or reload timeout, a missed watchdog). Only the first failure is
// logged as a warning; NOTIFY_SOCKET does not change, so the rest would say
// the same.
func (d *Daemon) notify(what string, err error) {
	if err == nil {
		return
	}
	level := slog.LevelDebug
	if d.notifyFailed.CompareAndSwap(false, true) {
		level = slog.LevelWarn
	}
	d.log.Log(context.Background(), level, "cannot notify the service manager", "state", what, "err", err)
}

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
	d.hub.Global().PublishDaemon(bus.Event{Type: "localbus:reloaded", Data: data})
	d.metrics.reloads.WithLabelValues(reloadOK).Inc()
	// Names only: a key's secret and hash never reach the log.
	d.log.Info("reloaded", "changed", changed, "kept_until_restart", restart,
		"keys", len(keys), "keys_added", added, "keys_removed", removed, "keys_changed", changedKeys)
	d.notifyStatus()
	return nil
}
