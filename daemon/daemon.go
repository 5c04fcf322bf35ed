package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

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
		d.journal, ho.Journal = j, hubJournal{j}
		d.fsync = cfg.Fsync
		d.metrics.addJournal(j)
		if cfg.Upstream != nil {
			// Before the hub restores the sessions: the journal keeps
			// what export still owes of them beyond their rings.
			upstream.HoldBacklog(*cfg.Upstream, j)
		}
	}
	h, err := hub.New(ho)
	if err != nil {
		d.closeJournal()
		return err
	}
	d.hub = h
	if cfg.Upstream != nil {
		// Before the router serves: the bridge marks its mirrors read-only.
		uo := upstream.Options{Config: *cfg.Upstream, Hub: h, Cursors: new(upstream.MemCursors), Logger: d.log}
		if d.journal != nil {
			uo.Cursors, uo.Backlog = d.journal, d.journal
		}
		br, err := upstream.Start(uo)
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
		MaxSessions:         cfg.MaxSessions,
		MaxAutoSessions:     cfg.MaxAutoSessions,
		PeerShare:           cfg.PeerShare,
		MaxRingBytesTotal:   cfg.MaxRingBytesTotal,
		AutoSessionTTL:      cfg.AutoSessionTTL,
		AutoCreate:          cfg.AutoCreateSessions,
		IdempotencyWindow:   cfg.IdempotencyWindow,
		IdempotencyMaxBytes: cfg.IdempotencyMaxBytes,
		MaxConsumers:        cfg.MaxConsumers,
		ConsumerTTL:         cfg.ConsumerTTL,
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

// handlerOptions are the router's Options at start.
func (d *Daemon) handlerOptions(cfg Config, auth *ipc.Auth) ipc.Options {
	o := ipc.Options{
		Hub:         d.hub,
		Reload:      d.reloadRequest,
		AdminStatus: d.adminStatus,
		Version:     d.opts.Version,
		Logger:      d.log,
		Registry:    d.metrics.reg,
		Durability:  d.durability, Fsync: d.fsync,
		Settings: d.handlerSettings(cfg, auth),
	}
	if br := d.upstream; br != nil {
		o.Upstream = func() any { return br.Status() }
		o.Metrics = append(o.Metrics, br.Collector())
	}
	return o
}

// handlerSettings are what a reload gives the router: the keys' policy and
// the reloadable settings of cfg.
func (d *Daemon) handlerSettings(cfg Config, auth *ipc.Auth) ipc.Settings {
	return ipc.Settings{
		Authenticate:         auth.Authenticate,
		AllowedOrigins:       cfg.AllowedOrigins,
		MaxStreams:           cfg.MaxSubscribersTotal,
		MaxEventBytes:        cfg.MaxEventBytes,
		MaxHeaderBytes:       cfg.MaxHeaderBytes,
		MaxBodyBytes:         cfg.MaxBodyBytes,
		MaxInflightBodyBytes: cfg.MaxInflightBodyBytes,
		PeerShare:            cfg.PeerShare,
		Keepalive:            cfg.Keepalive,
		KeysFile:             absPath(cfg.KeysFile),
		Caps: wire.Limits{
			RingSize: cfg.RingSize, RingMaxBytes: cfg.RingMaxBytes, MaxQueued: cfg.MaxQueued,
			MaxQueuedBytes: cfg.MaxQueuedBytes, MaxSubscribers: cfg.MaxSubscribers, MaxConsumers: cfg.MaxConsumers,
			MaxSessions: cfg.MaxSessions,
		},
	}
}

// absPath returns p made absolute, or p when that fails.
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
