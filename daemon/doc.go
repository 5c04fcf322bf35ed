// Package daemon is localbus serve: it turns a configuration into a running
// process and owns that process's lifetime. It loads the configuration and
// the keys, makes or inherits the listeners, opens the journal, builds the
// session registry (package bus/hub) and the router (package ipc), and runs
// them until a signal ends them. It reloads on SIGHUP and on
// POST /api/v1/reload, tells the service manager where it stands
// (sd_notify, package systemd), and shuts down gracefully (SPEC §8).
//
// The daemon holds no events and answers no request itself: the buses live
// in bus and bus/hub, the routes in ipc, the storage in daemon/journal.
// What it owns is the wiring between them and the order in which they start,
// change and stop.
//
// # Configuration
//
// [Settings] is the settings table: one [Setting] per key of the file, each
// with its kind, default, flag usage, environment variable, whether it is a
// path, and whether a reload can change it. Everything that handles
// settings works from it: the TOML loader, the serve flags (built in
// cmd/localbus, since this package does not depend on a command-line
// library), and reload. [Config] holds the values, [Defaults] the defaults,
// [Config.Validate] the checks.
//
// [LoadConfig] reads a [Source]: the file, plus the values the user set by
// flag and the settings' environment variables, all as plain data. Flags win
// over variables, which win over the file. Every error concerning a key is
// a [*ConfigError] naming the key and where the value came from (the file,
// "--ring-size" or "$LOCALBUS_SOCKET"); all of them are reported at once.
//
// # Files
//
//   - daemon.go: [Run] and the start: the journal, the hub, the keys and the
//     router's options, built from a [Config].
//   - serve.go: the listeners, the serving goroutines, session expiry.
//   - reload.go: the reload sequence; reload_keys.go the one list of the
//     keys a reload applies ([Setting.Reloadable]), the [upstream] table's
//     included.
//   - shutdown.go: the shutdown sequence.
//   - status.go: STATUS= and the sd_notify messages.
//   - rates.go: the rates' one-second samples and GET /api/v1/status's
//     figures of the process.
//   - observe.go: the logger and the daemon's metrics (reloads, the
//     journal's figures, the process and Go runtime).
//   - memlimit.go: the Go runtime's memory limit, from the rings' and
//     bodies' budgets.
//   - consumers.go: the journal as the hub's [hub.ConsumerJournal].
//   - listen.go: the daemon's own Unix socket and the connection tracker
//     that shutdown waits on.
//   - config.go: [Config], [Defaults] and the settings table.
//   - config_load.go: [Source] and [LoadConfig], the TOML file and the set
//     values; config_file.go (config_file_unix.go, config_file_other.go)
//     reads the file without blocking (a FIFO there is an error, not a
//     hang); config_upstream.go decodes and checks the [upstream] table.
//   - config_validate.go: [Config.Validate].
//   - config_defaults.go: [DefaultsFile], a configuration file listing
//     every key with its default.
//   - paths.go: the default paths, which depend on the user and environment.
//   - memlimit.go: the Go runtime's soft memory limit, from the rings' and
//     the request bodies' budgets (an operator's GOMEMLIMIT wins).
//
// # Start
//
// [Run] does, in this order:
//
//  1. LoadConfig(src). An invalid configuration is returned before anything
//     starts.
//  2. The logger (text on stderr unless Options.Logger is set), whose level
//     a reload can change, and the sd_notify notifier.
//  3. The listeners. Under socket activation (LISTEN_FDS) the inherited ones,
//     by FileDescriptorName (unix, tcp), which the daemon never creates or
//     unlinks; listen_tcp is then ignored with a warning, and an inherited
//     TCP socket not on a loopback address needs allow_remote. Otherwise its
//     own socket: a missing directory is made 0750 with group socket_group,
//     a live daemon answering on the path is an error that says so, a stale
//     socket file is replaced, the socket is created with socket_mode (the
//     umask set around bind) and given socket_group without following a
//     link; then listen_tcp, if set.
//     The socket comes first so that a second daemon started by mistake is
//     told another one answers there before it touches the journal.
//  4. The keys file (an unreadable or invalid one, one others may read or
//     own, a link or a FIFO stops the start), the journal with durability "disk" (state_dir made
//     0700; its sessions restored into the hub), the hub, the router and the
//     http.Server.
//  5. Serving: one goroutine per listener, the watchdog, the SIGHUP handler;
//     then READY=1, STATUS= and the "ready" log line.
//
// # Goroutines
//
//   - The goroutine that called Run runs the signal loop: it waits for the
//     context to end (SIGTERM and SIGINT end it; cmd/localbus sets that up),
//     for a listener to fail, or for SIGHUP, which it answers by reloading in
//     place. It then runs the shutdown sequence.
//   - One per listener runs http.Server.Serve; net/http starts one goroutine
//     per connection from there, and the router's handlers run on those.
//   - One runs the watchdog (WATCHDOG=1 at half of WATCHDOG_USEC); it returns
//     at once when no watchdog is asked for. With NOTIFY_SOCKET set, another
//     keeps STATUS= current every two seconds.
//   - Per stream, in package ipc: once an SSE (HTTP/1) or WebSocket stream has
//     taken its connection over from net/http, the request's goroutine
//     returns and the stream runs on goroutines of its own: a writer that takes
//     frames from the subscription, and a reader that notices the client
//     leaving (and, for WebSocket, reads its control frames). An SSE stream
//     that cannot take its connection over (HTTP/2) runs on the request's
//     goroutine. Package ipc's doc has the details.
//   - The journal runs its checkpoint loop, and with fsync "interval" its
//     sync loop, until it is closed.
//   - A reload asked for with POST /api/v1/reload runs on that request's
//     goroutine.
//
// # Who owns a connection
//
// net/http owns every connection until a stream takes it over (hijacks it).
// Until then the daemon's connection tracker (listen.go) follows it through
// the http.Server's ConnState hook, so that shutdown can wait for its
// request. Once hijacked, net/http and the tracker forget it, and
// http.Server.Shutdown and Close neither wait for it nor close it: the
// stream's goroutines in ipc own it, write to it, and close it when the
// stream ends. The router counts such streams until they are over, and
// ipc.Handler.Wait is how shutdown waits for them; what ends them is the hub
// ending their subscriptions (Hub.EndStreams), which makes the writer send
// the terminal stream:closed frame (and WebSocket close 1001) and return.
//
// # Lock order
//
// The daemon's own locks, outermost first:
//
//  1. Daemon.reloadMu serializes reloads with each other and with the start
//     of shutdown, and guards the running Config and the stopping flag. A
//     reload calls into the hub, the router, the journal (through the hub)
//     and the notifier while holding it.
//  2. Daemon.statusMu guards the last STATUS= sent; it is taken under
//     reloadMu by a reload, and alone by the status goroutine. The figures
//     it reports are read from the hub before it is taken.
//  3. connTracker.mu is a leaf, taken by the ConnState hook and by shutdown.
//
// The hub's, buses' and journal's locks all come after these, and neither
// hub nor router calls back into the daemon while holding one of theirs:
// the only call back is the router's Reload option, made from a request's
// goroutine that holds nothing.
//
// # Reload
//
// SIGHUP, systemctl reload (which sends SIGHUP) and POST /api/v1/reload all
// run the same sequence, under reloadMu:
//
//  1. Refuse if shutdown has begun.
//  2. RELOADING=1 with MONOTONIC_USEC=; READY=1 follows at the end whatever
//     happens.
//  3. LoadConfig again with the Source the daemon started from: the file as
//     it is now, under the flags and environment variables of the start. An
//     invalid configuration is refused: the running one is kept, the error
//     is logged (SIGHUP) or answered to the caller (POST).
//  4. planReload decides everything before anything changes: one loop over
//     the settings table and the [upstream] keys, against the one list of
//     reloadable keys (reload_keys.go), keeps the running value of every
//     other key and names the ones whose new value differed (the reply's
//     restartNeeded, and one warning, "these settings change only on
//     restart"); the result is validated as a whole, the keys file is read
//     again and the hub's options are checked. Any failure refuses the
//     reload with nothing changed.
//  5. applyReload applies the plan; none of its steps can fail.
//  6. The hub takes the new limits (every bus at once; a session created
//     with its own ring size keeps it), the router its new options (new
//     streams get the new keepalive), the logger its level.
//  7. Every stream gets stream:closed with reason "reload" and every
//     WebSocket closes with 1001. Buses, ids and rings stay, so a client
//     that resumes with its last id loses nothing and sees no duplicate.
//  8. localbus:reloaded on the global bus, the "reloaded" log line, STATUS=.
//
// # Shutdown
//
// When the context ends (or a listener fails):
//
//  1. Under reloadMu, so that a reload in progress finishes first and none
//     starts after: mark the daemon as stopping and read shutdown_timeout.
//     Everything below happens within it.
//  2. STOPPING=1 and the "shutting down" log line.
//  3. The router drains: new streams are refused with 503, /readyz turns
//     false, streaming publishes stop after the lines they have read.
//  4. Keep-alives off, and every listener closed: nothing new is accepted.
//     Connections still in a listener's backlog are reset; under socket
//     activation they wait for the next start.
//  5. Every stream gets stream:closed with reason "shutdown" and WebSocket
//     1001, and again every 50 ms for a stream that subscribed just before
//     the drain, while another goroutine waits, in turn, for every request
//     that reached the daemon to be answered (the connection tracker,
//     giving a connection accepted just before the listeners closed a
//     second to send its request), for http.Server.Shutdown, and for every
//     stream to return (ipc.Handler.Wait).
//  6. Past shutdown_timeout: a warning, the requests' contexts are
//     cancelled and the http.Server closed. Requests do not get Run's
//     context, so the signal itself never cuts a stream before it was told
//     why.
//  7. The hub closes its buses (a stream still open then ends), the journal
//     checkpoints and marks a clean shutdown, the goroutines above are
//     waited for, and the listeners are closed again: the daemon's own
//     socket file is unlinked, an inherited one never. Run returns nil, and
//     localbus serve exits 0.
package daemon
