// Package bus is the in-memory core of localbus: one Bus per session (and one
// for the whole daemon), each with monotonic event ids, a bounded replay ring,
// and per-subscriber queues with backpressure. It does no I/O: the router in
// package ipc only writes the bytes that the bus hands it.
//
// # Where to start
//
// [New] makes a bus; [Bus.Publish] assigns ids and fans an event out;
// [Bus.Subscribe] registers a [Subscription] whose writer loops on
// [Subscription.Ready] and [Subscription.Take]. [Frame] is the unit handed to
// writers: an event or a reserved stream:* frame, already encoded.
//
// # Files
//
//   - bus.go: [Bus], [Options], [New], [Bus.Close].
//   - limits.go: the defaults and [Limits], which a reload may change.
//   - publish.go: stage, commit and deliver a batch.
//   - globalcopy.go: the global bus's copies of session events.
//   - subscribe.go: [Bus.Subscribe], resume and replay, [Bus.EndStreams].
//   - subscription.go: a subscriber's queue and [Subscription.Take].
//   - ring.go, budget.go: the replay ring and its byte budget.
//   - stats.go: [Stats].
//   - frame.go, reserved.go, compact.go, validate.go, filter.go: frames,
//     the stream:* frames and their data, compaction of event data,
//     the parsed input values and type filters.
//
// # Input
//
// What a client names is parsed where it comes in, once, into a value only
// its parser builds: [ParseSessionID] makes a [SessionID], [ParseType] a
// [Type] (never of a reserved family: the daemon's own types are
// [TypeSessionOpened], [TypeSessionClosed] and [TypeReloaded], which only
// a [Batch] with Daemon takes), [ParseFamily] a [Family]. The bus, and the
// hub above it, take those values and check nothing of them again; what
// a publish still checks is the event's data, which it compacts.
//
// # Encoding
//
// An event is encoded once, at publish, into a single byte slice that holds the
// complete Server-Sent Events frame; the JSON envelope that WebSocket sends is
// a sub-slice of it ([Frame.SSE], [Frame.JSON]). Every subscriber and every
// replay shares those bytes. Reserved frames (stream:ready, stream:gap, ...)
// are built per subscriber by the functions in frame.go; they never carry an
// id, so they never move a client's cursor. The global bus's copy of a
// session's event is not encoded again: a [Batch] of [Copies] builds it from
// the bytes of the frame that [Staged.Frames] returned, and the copy
// carries its [CopyOf] ([Frame.CopyOf]), so storage can tell what it copies
// without reading its bytes. The JSON grammar the bus accepts for event
// data is package ipc/wire/grammar's scanner, which compact.go compacts
// with and the router's publish decoder uses too; that package, the
// standard library only, is the one the bus imports outside its own.
//
// # Ordering
//
// Ids are assigned under the bus lock, in publish order, starting at 1 and
// never reused. Subscribe registers the subscriber and queues its replay under
// the same lock, so a live event can neither overtake the replay nor be
// delivered twice: a resuming subscriber receives every retained event after
// its cursor, then stream:replayed, then live events, each exactly once and in
// id order.
//
// # Subscriber duties
//
// A subscriber's writer must wait on Ready, call Take, write what it got, and
// stop when Take reports that the stream ended (the terminal frame, if any, is
// the last one returned). Close (or cancelling the context given to
// Subscribe) removes the subscriber at once and drops whatever it had queued.
// A writer that reads through a consumer under ack mode auto reports
// [Subscription.Through] once it has written what Take returned: the id up
// to which the stream passed every event, those its filter skipped
// included. [Subscription.EndReplaced] ends a stream whose consumer
// another stream took over, with a final stream:closed.
//
// # Backpressure
//
// Publish never blocks on a subscriber. Each subscriber has a bounded queue of
// live frames, limited by count (maxQueued) and by bytes (maxQueuedBytes).
// Replayed and reserved frames are forced: they bypass both limits and never
// count toward them. When live frames reach 75% of either limit the
// subscriber gets one stream:slow frame; the warning re-arms only once both
// fall to 37.5% or below. A live push that would exceed a limit evicts the
// subscriber: it receives a terminal stream:lagged frame and is removed from
// the bus. The events it missed stay in the ring, so reconnecting with its last
// id recovers them without a gap. When the live queue is empty, a single frame
// larger than maxQueuedBytes is accepted; a second live frame behind it evicts.
//
// A frame handed to a writer that was already waiting (its last Take returned
// nothing) costs no accounting: it is on its way out, not queued.
//
// # Invariants
//
//   - lastId only increases; an id is burned only by an event that entered the ring.
//   - A subscriber's live count and bytes are never negative, and are zero when its queue is empty.
//   - Each subscriber receives event ids strictly increasing; a missing event that
//     its filter would match is always announced by stream:gap or stream:lagged.
//   - A mirrored event that records a loss at its origin ([Frame.Lost], in its
//     envelope) is preceded, for every subscriber that gets anything after its
//     cursor, by stream:gap (upstream_lost), whatever the subscriber's filter.
//   - Lock order: Bus.mu, then Subscription.mu. Nothing takes Bus.mu while holding
//     a Subscription.mu.
package bus
