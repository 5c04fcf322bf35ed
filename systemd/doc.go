// Package systemd talks to the service manager: socket activation, sd_notify
// and the watchdog, and it carries the unit files. It is the only package
// that imports github.com/coreos/go-systemd/v22.
//
// Everything here degrades to nothing outside systemd: without LISTEN_FDS
// there are no inherited listeners, without NOTIFY_SOCKET notifications are
// silent, without WATCHDOG_USEC there is no watchdog. The daemon can call
// every function unconditionally.
//
// # Socket activation
//
// [Listeners] returns the sockets the service manager passed in, keyed by
// FileDescriptorName= ([NameUnix], [NameTCP]), and unsets LISTEN_* so nothing
// takes them twice. The service manager owns those sockets' files: the daemon
// never creates, chmods or unlinks them.
//
// # Notifications and the watchdog
//
// A [Notifier] sends READY=1, STATUS=, RELOADING=1 (with MONOTONIC_USEC=),
// STOPPING=1 and WATCHDOG=1. The usual sequence is Ready once serving;
// Reloading then Ready around a reload; Stopping when shutdown begins.
// [RunWatchdog] sends WATCHDOG=1 at half the configured interval until its
// context is done; it blocks, so the daemon runs it in a goroutine it waits
// for.
//
// # Unit files
//
// The package embeds localbus.socket and localbus.service for the system
// service manager, and user/localbus.socket and user/localbus.service for the
// per-user one (systemctl --user). The service is Type=notify, reloads with
// SIGHUP, has a 30 s watchdog, restarts on failure, keeps its journal in
// StateDirectory=localbus and is sandboxed; the user variant keeps to the
// sandboxing settings a user service manager can apply. [Units] renders them
// for a given executable, [UnitDir] says where they go and [Install] writes
// them. The files are usable as shipped, with ExecStart= running
// [DefaultBinary]. [UnitsForGroup] renders the system units for a static
// socket group, as the .deb and .rpm install them (SocketGroup=localbus, the
// service's dynamic user named [ServiceUser], and comments that say so); a
// packaged binary, stamped by scripts/package, renders them so from [Units]
// too, so its "localbus systemd print" shows what the package installed.
package systemd
