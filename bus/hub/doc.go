// Package hub is the session registry: the named buses of a daemon, its
// global bus, and the one publish path that puts every event on both.
//
// A Hub owns its buses. Publishing to a session appends the events to the
// session's bus and then their copies to the global bus, under a
// per-session lock so that a global subscriber sees each session's events
// in seq order. Creating and deleting a session emit
// localbus:session-opened and localbus:session-closed on the global bus.
//
// The daemon creates one Hub at start, changes its limits on reload and
// ends its streams on reload and shutdown; the router (package ipc) only
// looks sessions up, publishes and subscribes. Create and the publishes
// take a [bus.SessionID] and events whose [bus.Type] the caller parsed,
// and check neither again; lookups ([Hub.Session], [Hub.Delete]) take the
// id as text, since an id no session has is simply not found.
//
// # Files
//
//   - hub.go: [Hub], [Options], [New] and [Hub.Close].
//   - registry.go: [Session], [Hub.Create], [Hub.Delete], the tombstones.
//   - publish.go: [Hub.PublishAs] and its variants, the global copy.
//   - expire.go: [Hub.ExpireIdle], [Hub.ExpireConsumers].
//   - budget.go: the rings' byte budget, [Hub.TrimRings] (water-filling).
//   - totals.go: [Hub.Totals] and [Hub.Subscribers], for metrics.
//   - rates.go: [Hub.SampleRates] and [Hub.Rates], the publish and
//     delivery rates of every session and of the daemon.
//   - pages.go: [Hub.Page], the sessions in id order for a listing, and
//     the consumers' figures ([Hub.ConsumerFigures]).
//   - reload.go: [Hub.SetOptions].
//   - journal.go: what the hub asks of its storage ([Journal] and its
//     optional capabilities).
//   - idempotency.go: [Hub.PublishOnce] and the remembered [Result]s.
//   - shares.go: the fair shares of the hub's pools, [AutoSessionLimit].
//   - consumers.go: a session's consumers ([ConsumerSet]; SPEC §2.4):
//     attach and takeover, the move to a new epoch, acks, max_consumers,
//     consumer_ttl; each Session has one, kept by a [ConsumerJournal] or
//     in memory.
//   - lease.go: a stream's hold on its consumer ([Lease]): replacement,
//     the auto position (Wrote, Sync) and the stream's end.
//
// # The global copy
//
// [Hub.Publish] stages a batch on the session's bus with
// [bus.Bus.Stage] (ids assigned, the journal record written, the frames
// kept), then stages a [bus.Batch] of those frames as Copies on the global
// bus, which
// builds each copy from its frame's bytes, and only then waits, with
// [bus.Bus.Finish] on both, for the records to be durable. No lock is held
// across that wait, so concurrent publishers, to one session or to many,
// share a sync (group commit), and each bus delivers its batches in id
// order once they are durable. Invariants:
//
//   - A copy is the session event's envelope, byte for byte, with the global
//     bus's "id" and a "seq" (the session's id) after "session": data,
//     timestamp and originator are the session event's bytes, never encoded
//     again.
//   - A copy carries its [bus.CopyOf] (session, the session bus's epoch,
//     seq) from the moment it is built, and only copies do: announcements
//     and the daemon's other localbus:* events carry none. A journal logs a
//     copy as a reference to the session's event it names, and the
//     epoch keeps a session deleted and created again from being taken for
//     the old one.
//   - Every event a session's bus accepted through Publish gets at most one
//     copy, and exactly one unless the global bus refused the batch (it is
//     closed, or its journal failed, say a full disk): the session keeps
//     its events; the global bus never held them, so no client misses a
//     global id.
//   - A session's event is on its bus, and its journal record written,
//     before its copy gets a global id; the copy's record follows it in the
//     log, so the copy is durable (and shown to anyone) only once the
//     session's event is. A session's copies reach the global bus in seq
//     order, each publish's copies on consecutive global ids.
//
// # Locks
//
// Hub.mu guards the session map and settings; creating a session holds it
// while the journal opens the session's store (Journal.OpenBus) and the
// session's bus is made, and nothing else calls out under it.
// Session.publishMu is held from the session bus's stage through the global
// one, never while waiting for durability; nothing takes it while holding
// another lock, and a publisher never takes a second session's. ExpireIdle
// holds it while it checks the session is idle and takes it out of the map
// and closes its bus. So the order is:
//
//	Hub.mu -> the journal (OpenBus, the new bus's store)
//	Session.publishMu -> Hub.mu (ExpireIdle)
//	Session.publishMu -> session bus.Bus.mu -> its store
//	Session.publishMu -> global bus.Bus.mu -> the global store -> session stores (journal refs)
//	bus.Bus.mu -> bus.Subscription.mu (package bus)
//	Hub.Delete: Session.publishMu (alone, once the bus is closed) -> the journal (Delete)
//
// # Deleting
//
// A session being deleted leaves a tombstone in the hub until the journal
// has forgotten it: a publish or Create of its id waits for the delete to
// end, so the id created again is a new session with a new epoch and never
// the deleted one's store.
//
// # Expiry
//
// A session a publish created, with no publish for Options.AutoSessionTTL
// and no subscriber, is deleted by ExpireIdle, which the daemon calls on a
// ticker; its localbus:session-closed carries reason "expired". Sessions
// made by Create never expire, and neither does one whose consumer has
// events pending (it has not acknowledged them). ExpireConsumers, on the
// same ticker, forgets the consumers that had no stream for
// Options.ConsumerTTL.
//
// # Consumers
//
// A ConsumerSet's lock is held across its store's writes (a consumer's
// record, a synced database transaction in the journal), so one
// consumer's writes land in order; a stream's writer reports its position
// under ack mode auto with Lease.Wrote, an atomic store that takes no
// lock, and stores it with Lease.Sync at most once a second.
package hub
