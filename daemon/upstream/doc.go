// Package upstream is the optional bridge between a localbus daemon and a
// NATS JetStream stream (SPEC §12): it exports the events of chosen
// sessions to the stream, and mirrors other nodes' sessions in as
// read-only local sessions. Without an [upstream] table in the config the
// daemon never starts it and nothing is dialled.
//
// Start with Start, which takes a Config, the hub it serves and the
// journal's cursors, and returns a running Bridge; Close stops it. The
// page upstream.md beside this file is the user's guide, with a two-host
// example.
//
// # Export
//
// One goroutine per exported session (export.go) reads the session from
// the export cursor (the epoch and id last acknowledged by JetStream), so
// an event is exported only once it is on its bus, which with fsync
// "always" is after it is durable. Each event goes to subject
// localbus.<node>.<session> with header Nats-Msg-Id
// <node>/<session>/<epoch>/<id>, its payload the event's envelope.
// publish.go sends them as core NATS publishes, each with a reply subject
// of its own, and reads JetStream's acknowledgements on one subscription,
// in publish order (what JetStream's asynchronous publish does, without
// its cost per event). Up to a window of publishes are in flight; the
// cursor advances over a contiguous run of acknowledgements only, and is
// written to the journal at most every CursorInterval and when the
// exporter stops. On any failure (a lost connection, a refused,
// misordered or unanswered publish) the round ends and the next resumes
// from the cursor: what may have been stored meanwhile is sent again and
// JetStream's de-duplication drops it. The connection buffers nothing
// while it is down, so a connection's stored publishes are always a prefix
// of what was sent on it, and the first publish of a round waits for its
// acknowledgement before the next is sent: together these keep the stream
// in id order. Publishing to the bus never waits for any of this.
//
// The journal holds what export owes beyond the ring (Options.Backlog):
// every event of a session the export patterns name, from its first
// (HoldBacklog, before the hub restores the sessions, and Bridge.Start and
// SetPatterns after), until the exporter moves the hold to its cursor
// (Journal.HoldExport), up to backlog_bytes for every session together.
// An exporter without a cursor of the session's epoch starts where the
// hold does. Each round first reads the backlog from the cursor on
// (Journal.ReadExport) until it has caught up, then subscribes to the
// ring from the last event it sent, and goes back to the backlog when the
// ring moves past it. Events the backlog dropped are counted as lost and
// logged with their range.
//
// # Import
//
// One goroutine per import pattern reads the stream with an ordered
// consumer, from the import cursor (the last stream sequence applied, in
// the journal) on. Each message becomes an event of the local session
// <node>.<session>, published through Hub.PublishMirror in batches, with
// the origin (node, session, id, epoch) in its envelope. A mirror knows
// the origin of its last event from its own ring, so a message applied
// before a crash but after the cursor was last written is recognised and
// skipped: nothing is imported twice. When the next origin id is not the
// one after the mirror's last (or a mirror starts past id 1), the origin
// lost events: the event that follows them carries the loss in its origin
// (bus.RemoteOrigin.LostFrom, LostTo), and the bus announces it to each
// reader with stream:gap, upstream_lost. When the source's epoch changes,
// the mirror's streams end (stream:closed, reason reload), the session is
// deleted and created again on a new epoch, so every reader that resumes
// gets stream:gap with reason epoch_reset.
//
// # Goroutines and locks
//
// A Bridge owns: the NATS connection's goroutines (nats.go), a scanner
// that starts and stops exporters as sessions appear and patterns change,
// one goroutine per exporter (plus its acknowledgement reader), and one
// per import pattern (plus its message reader). Close cancels them all and
// waits. The patterns are swapped whole (an atomic pointer), since every
// publish to the hub reads them to refuse mirrors. Bridge.mu guards the
// exporter, importer and mirror maps and the connection state;
// exporter.mu, importer.mu and mirror.mu are leaves, never held while
// taking Bridge.mu.
package upstream
