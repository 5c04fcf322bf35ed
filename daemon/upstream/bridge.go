package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/hub"
)

// Hub is what the bridge needs of the daemon's session registry;
// *hub.Hub implements it.
type Hub interface {
	// Sessions returns every session.
	Sessions() []*hub.Session
	// Session returns the session named id.
	Session(id string) (*hub.Session, bool)
	// PublishMirror publishes to a mirror, creating it when missing.
	PublishMirror(id bus.SessionID, events []bus.Event) (first, last uint64, err error)
	// Delete deletes a session.
	Delete(id string) error
	// SetReadOnly makes Publish refuse the sessions readOnly names.
	SetReadOnly(readOnly func(id string) bool)
}

// Cursors is where the bridge keeps its positions durably;
// *journal.Journal implements it. A daemon without a journal passes an
// in-memory one (MemCursors), so export and import start over after a
// restart.
type Cursors interface {
	// Cursor returns the value stored under name, nil if none.
	Cursor(name string) ([]byte, error)
	// PutCursor stores value under name.
	PutCursor(name string, value []byte) error
}

// Backlog is the journal's export backlog (SPEC §12): the events of an
// exported session that NATS has not confirmed, kept beyond its ring;
// *journal.Journal implements it.
type Backlog interface {
	// SetBacklogBytes bounds every session's backlog together.
	SetBacklogBytes(n int64)
	// SetExported names the sessions whose backlog is held: from their
	// oldest retained event, from their first for one created later.
	SetExported(match func(session string) bool)
	// HoldExport moves session's hold to id of epoch (the last event
	// NATS confirmed) if epoch is the session's, and returns the hold in
	// force: the session's epoch and the id after which its events are
	// owed; held is false when the session's backlog is not held.
	HoldExport(session, epoch string, id uint64) (holdEpoch string, holdID uint64, held bool)
	// ReadExport appends up to max of session's retained events from id
	// from up to id upTo (the last its bus shows) to into; the first is
	// after from when the backlog lost the events between.
	ReadExport(session, epoch string, from, upTo uint64, max int, into []*bus.Frame) []*bus.Frame
	// ExportBacklog returns what session's backlog takes on disk.
	ExportBacklog(session string) int64
}

// HoldBacklog tells bl what export owes under cfg (filled and valid): the
// bound, and which sessions are exported, so that it holds their events
// from their first. Start does it too; a daemon calls it after opening
// its journal and before restoring the sessions, so that the backlog an
// earlier run held survives the restore.
func HoldBacklog(cfg Config, bl Backlog) {
	bl.SetBacklogBytes(cfg.BacklogBytes)
	p := &patterns{export: cfg.Export, imports: cfg.Import}
	bl.SetExported(func(id string) bool { return p.exports(cfg.Node, id) })
}

// Defaults of Options.
const (
	DefaultWindow         = 1024
	DefaultCursorInterval = 100 * time.Millisecond
	DefaultScanInterval   = 200 * time.Millisecond
	DefaultAckTimeout     = 5 * time.Second
)

// Options configure Start.
type Options struct {
	// Config is the [upstream] table, filled (Config.Fill) and valid.
	// Required.
	Config Config
	// Hub is the session registry to export from and import into. Required.
	Hub Hub
	// Cursors keeps the export and import cursors. Required.
	Cursors Cursors
	// Backlog keeps what export owes beyond the rings; nil keeps
	// nothing beyond them (no journal).
	Backlog Backlog
	// Logger receives the bridge's log lines; nil means slog.Default().
	Logger *slog.Logger
	// Window is the most publishes an exporter has in flight; default 1024.
	Window int
	// CursorInterval is the longest an acknowledged export waits before
	// its cursor is written; default 100 ms.
	CursorInterval time.Duration
	// ScanInterval is how often new sessions are looked for; default 200 ms.
	ScanInterval time.Duration
	// AckTimeout bounds the wait for one publish's acknowledgement;
	// default 5 s.
	AckTimeout time.Duration
	// ReconnectWait is the pause between two dials of the servers;
	// default 250 ms.
	ReconnectWait time.Duration
}

// A Bridge exports sessions to, and imports them from, a JetStream stream.
// Its methods are safe for concurrent use.
type Bridge struct {
	opts   Options
	cfg    Config // Node, Stream and connection settings: fixed
	logger *slog.Logger
	nc     *nats.Conn
	js     jetstream.JetStream

	ctx    context.Context // the bridge's lifetime; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	kick   chan struct{} // wakes the scanner

	pat        atomic.Pointer[patterns] // the export and import patterns in force
	exported   atomic.Uint64            // events acknowledged by JetStream, all sessions
	imported   atomic.Uint64            // events published to mirrors
	lost       atomic.Uint64            // events of exported sessions dropped before NATS confirmed them
	importLost atomic.Uint64            // origin ids mirrors found missing (upstream_lost)
	importGaps atomic.Uint64            // the jumps in origin ids that skipped them

	mu           sync.Mutex // guards the fields below; taken before exporter.mu
	exporters    map[string]*exporter
	importers    map[string]*importer
	mirrors      map[string]*mirror   // by local session id
	stopped      map[string]*exporter // exporters stopped, maybe still running, by session
	unexportable map[string]bool      // sessions whose id makes no subject, logged once
	connGen      uint64               // incremented at each (re)connect
	streamGen    uint64               // connGen when the stream was last found or created
	connWait     chan struct{}        // closed and replaced when the connection state changes
	lastErr      string
	closed       bool
}

// Start validates opts, marks the mirrors read-only in the hub and starts
// the bridge. It does not wait for NATS: the connection is made, and
// remade after any outage, in the background.
func Start(opts Options) (*Bridge, error) {
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	if opts.Hub == nil || opts.Cursors == nil {
		return nil, errors.New("upstream: no hub or cursors")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Window <= 0 {
		opts.Window = DefaultWindow
	}
	if opts.CursorInterval <= 0 {
		opts.CursorInterval = DefaultCursorInterval
	}
	if opts.ScanInterval <= 0 {
		opts.ScanInterval = DefaultScanInterval
	}
	if opts.AckTimeout <= 0 {
		opts.AckTimeout = DefaultAckTimeout
	}
	if opts.ReconnectWait <= 0 {
		opts.ReconnectWait = 250 * time.Millisecond
	}
	b := &Bridge{
		opts: opts, cfg: opts.Config, logger: opts.Logger.With("upstream", opts.Config.Stream),
		kick:         make(chan struct{}, 1),
		exporters:    map[string]*exporter{},
		importers:    map[string]*importer{},
		mirrors:      map[string]*mirror{},
		stopped:      map[string]*exporter{},
		unexportable: map[string]bool{},
		connWait:     make(chan struct{}),
	}
	b.pat.Store(&patterns{export: opts.Config.Export, imports: opts.Config.Import})
	if opts.Backlog != nil {
		opts.Backlog.SetBacklogBytes(opts.Config.BacklogBytes)
		opts.Backlog.SetExported(b.exports)
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	opts.Hub.SetReadOnly(b.isMirror)

	nopts := []nats.Option{
		nats.Name("localbus " + b.cfg.Node),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(opts.ReconnectWait),
		// Nothing is buffered while disconnected: a publish then fails at
		// once, and its exporter resumes from its cursor once connected.
		// Buffered publishes could reach the server behind a lost one.
		nats.ReconnectBufSize(-1),
		nats.ConnectHandler(func(nc *nats.Conn) { b.connChanged(nc, true) }),
		nats.ReconnectHandler(func(nc *nats.Conn) { b.connChanged(nc, true) }),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err != nil {
				b.setErr(fmt.Errorf("disconnected: %w", err))
			}
			b.connChanged(nc, false)
		}),
	}
	if c := b.cfg.Creds; c != "" {
		nopts = append(nopts, nats.UserCredentials(c))
	}
	if b.cfg.TLSCert != "" {
		nopts = append(nopts, nats.ClientCert(b.cfg.TLSCert, b.cfg.TLSKey))
	}
	if b.cfg.TLSCA != "" {
		nopts = append(nopts, nats.RootCAs(b.cfg.TLSCA))
	}
	nc, err := nats.Connect(strings.Join(b.cfg.URLs, ","), nopts...)
	if err != nil {
		b.cancel()
		opts.Hub.SetReadOnly(nil)
		return nil, fmt.Errorf("upstream: %w", err)
	}
	b.nc = nc
	b.js, err = jetstream.New(nc, jetstream.WithDefaultTimeout(opts.AckTimeout))
	if err != nil {
		nc.Close()
		b.cancel()
		opts.Hub.SetReadOnly(nil)
		return nil, fmt.Errorf("upstream: %w", err)
	}
	if nc.IsConnected() {
		b.connChanged(nc, true)
	}
	b.logger.Info("upstream: started", "node", b.cfg.Node, "url", redact(b.cfg.URLs), "export", opts.Config.Export, "import", opts.Config.Import)
	b.mu.Lock()
	b.syncImportersLocked()
	b.mu.Unlock()
	b.wg.Go(b.scanLoop)
	return b, nil
}

// Node returns this daemon's node name.
func (b *Bridge) Node() string { return b.cfg.Node }

// SetPatterns replaces the export and import patterns (on reload):
// exporters of sessions that no longer match stop, importers of removed
// patterns stop, new ones start. The patterns must be valid: a reload
// checks them with Config.Validate before it changes anything, so
// SetPatterns cannot fail, and it panics on patterns Validate refuses, as a
// caller's bug.
func (b *Bridge) SetPatterns(export, imports []string) {
	c := b.cfg
	c.Export, c.Import = export, imports
	if err := c.Validate(); err != nil {
		panic("upstream: SetPatterns with patterns Validate refuses: " + err.Error())
	}
	b.mu.Lock()
	b.pat.Store(&patterns{export: export, imports: imports})
	b.syncImportersLocked()
	b.mu.Unlock()
	if b.opts.Backlog != nil {
		// Holds sessions newly exported, releases those no longer.
		b.opts.Backlog.SetExported(b.exports)
	}
	b.wake()
	b.logger.Info("upstream: patterns changed", "export", export, "import", imports)
}

// isMirror reports whether id names a mirror: <node>.<session> of another
// node matching an import pattern.
func (b *Bridge) isMirror(id string) bool { return b.pat.Load().mirror(b.cfg.Node, id) }

// exports reports whether session id is exported.
func (b *Bridge) exports(id string) bool { return b.pat.Load().exports(b.cfg.Node, id) }

// patterns are the export and import patterns in force: read on every
// publish (isMirror), so they are swapped whole, never changed.
type patterns struct {
	export, imports []string
}

// mirror reports whether id names a mirror on node: <node>.<session> of
// another node matching an import pattern.
func (p *patterns) mirror(node, id string) bool {
	n, session, ok := strings.Cut(id, ".")
	return ok && n != node && matchAny(p.imports, n+"/"+session)
}

// exports reports whether session id is exported from node: it matches
// an export pattern, is no mirror and makes a subject.
func (p *patterns) exports(node, id string) bool {
	if !matchAny(p.export, id) || p.mirror(node, id) {
		return false
	}
	_, ok := subject(node, id)
	return ok
}

// Close stops every exporter and importer, writes their cursors and
// closes the connection. It returns once every goroutine has stopped.
// Mirrors stay read-only. It is idempotent.
func (b *Bridge) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
	b.nc.Close()
}

func (b *Bridge) wake() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

func (b *Bridge) setErr(err error) {
	b.mu.Lock()
	b.lastErr = err.Error()
	b.mu.Unlock()
}

// connChanged records a change of the connection's state and wakes every
// goroutine waiting for one.
func (b *Bridge) connChanged(nc *nats.Conn, up bool) {
	b.mu.Lock()
	if up {
		b.connGen++
	}
	close(b.connWait)
	b.connWait = make(chan struct{})
	b.mu.Unlock()
	if up {
		b.logger.Info("upstream: connected", "server", redactURL(nc.ConnectedUrl()))
	} else {
		b.logger.Warn("upstream: disconnected")
	}
}

// ready waits until the bridge is connected and the stream exists. It
// returns false when ctx ends first.
func (b *Bridge) ready(ctx context.Context) bool {
	for {
		b.mu.Lock()
		wait, gen, sgen := b.connWait, b.connGen, b.streamGen
		b.mu.Unlock()
		if b.nc.IsConnected() {
			if sgen == gen {
				return true
			}
			if err := b.ensureStream(ctx); err == nil {
				b.mu.Lock()
				if b.connGen == gen {
					b.streamGen = gen
				}
				b.mu.Unlock()
				continue
			} else if ctx.Err() == nil {
				b.setErr(err)
				b.logger.Warn("upstream: stream not ready", "stream", b.cfg.Stream, "err", err)
				if !sleep(ctx, time.Second) {
					return false
				}
				continue
			}
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return false
		}
	}
}

// ensureStream finds the stream or creates it.
func (b *Bridge) ensureStream(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, b.opts.AckTimeout)
	defer cancel()
	_, err := b.js.Stream(ctx, b.cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = b.js.CreateStream(ctx, jetstream.StreamConfig{
			Name:     b.cfg.Stream,
			Subjects: []string{SubjectPrefix + ".>"},
			Storage:  jetstream.FileStorage,
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			err = nil
		}
		if err == nil {
			b.logger.Info("upstream: created stream", "stream", b.cfg.Stream)
		}
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", b.cfg.Stream, err)
	}
	return nil
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// scanLoop starts an exporter for every session that matches an export
// pattern and stops those that no longer do.
func (b *Bridge) scanLoop() {
	t := time.NewTicker(b.opts.ScanInterval)
	defer t.Stop()
	for {
		b.scan()
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		case <-b.kick:
		}
	}
}

func (b *Bridge) scan() {
	sessions := b.opts.Hub.Sessions()
	want := map[string]bool{}
	pat := b.pat.Load()
	for _, s := range sessions {
		if matchAny(pat.export, s.ID) && !pat.mirror(b.cfg.Node, s.ID) {
			want[s.ID] = true
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	for id, e := range b.stopped {
		if e.done() {
			delete(b.stopped, id)
		}
	}
	for id, e := range b.exporters {
		if !want[id] || e.done() {
			e.stop()
			delete(b.exporters, id)
			// A new exporter of the same session waits for this one, so
			// that its cursor is final before the new one reads it.
			b.stopped[id] = e
		}
	}
	for id := range want {
		if _, ok := b.exporters[id]; ok {
			continue
		}
		subj, ok := subject(b.cfg.Node, id)
		if !ok {
			if !b.unexportable[id] {
				b.unexportable[id] = true
				b.logger.Warn("upstream: session id makes no NATS subject (an empty token); not exported", "session", id)
			}
			continue
		}
		e := newExporter(b, id, subj, b.stopped[id])
		delete(b.stopped, id)
		b.exporters[id] = e
		b.wg.Go(e.run)
	}
}

// redact is redactURL of each of urls.
func redact(urls []string) []string {
	out := make([]string, len(urls))
	for i, s := range urls {
		out[i] = redactURL(s)
	}
	return out
}
