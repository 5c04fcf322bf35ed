// Package journal keeps localbus's buses on disk, so that events, ids and
// epochs survive a restart (SPEC §11). A Journal is one directory under
// state_dir; every bus of the daemon (the sessions and the global bus) is a
// Store in it, and a Store is the bus.Store the bus appends to and replays
// from.
//
// Start with Open, then OpenBus for the global bus ("") and for every id
// that Sessions lists; Close writes the clean-shutdown mark.
//
// # Files
//
// A file per job: journal.go (Options, Open, Close, Stats); the log,
// record.go (its records and the database's chunks), segment.go (a
// mapped segment), wal.go (segments, group commit) and log.go (a bus's
// append and its wait for durability); recovery, recover.go (what Open
// reads, and persist, what it then writes), database.go (opening the
// database, loadState: the one reading of the buses' settings), format.go
// (formats and their upgrades), logread.go (the one reader of the log and
// its verdict on a segment's tail), replay.go (the one replay of the log)
// readonly.go (when the disk has no room for recovery's writes) and
// readonly_empty.go (nor for a database in a state dir that holds nothing);
// checkpoint.go (copying the log into the database), compact.go (when to,
// and the log's bound); registry.go (the buses: settings, OpenBus,
// Delete); store.go (a bus's Store and its window); refs.go (the global
// bus's references); keys.go, keys_upgrade.go and cursor.go (idempotency keys, bridge
// cursors); consumer.go (the consumers of a session, SPEC §2.4);
// backlog.go (the export backlog: events an upstream exporter has not had
// confirmed, kept beyond the ring from the moment a session is exported
// and across restarts, up to a bound, oldest first to go, and first to
// give way on a full disk); dbcheck.go (checking a
// database before bbolt opens it);
// files.go (opening files safely); dbpages_linux.go (the database's
// pages a checkpoint read, out of the resident set); hooks.go (where tests
// step in).
//
// # Layout
//
// The directory holds a bbolt database, journal.db, and a write-ahead log
// of segment files, wal-NNNNNNNNNNNNNNNN.log, each mapped into memory and
// allocated on disk ahead of the records written into it (64 KiB at first,
// at least doubling each time), so an idle journal takes little room. Appending a batch copies one log
// record (a length, a CRC-32C and the batch's events) into the current
// segment, with no system call for small ones. The global bus's records
// refer to the session records they copy instead of repeating the events,
// by what each copy names (bus.Frame.CopyOf, refs.go), so a
// publish writes its events once. The database holds,
// per bus: its session id, epoch, ring size and last id, and its retained
// events in chunks of consecutive ids keyed by the first, each chunk
// carrying a CRC-32C and each event its type and JSON envelope, so a frame
// is rebuilt with bus.NewFrame and no JSON parsing. A bucket "cursors"
// holds the named positions of bridges to other systems (Cursor,
// PutCursor: the upstream bridge's export and import cursors), each
// written in a transaction of its own, never through the log. A bucket
// "consumers" (format 2) holds each session's consumers under its bus
// number: name, ack mode, acknowledged id and its epoch, created and last
// active (Consumers, PutConsumer, DeleteConsumer), each put a synced
// transaction of its own; deleting a session deletes them with it. A
// bucket "keys" holds the sessions' idempotency keys; from format 3 a
// keyed publish (Store.AppendKeyed) writes its key in its events' log
// record, and the checkpoint that removes the record's segment copies the
// key into the bucket in its transaction (keys.go; keys_upgrade.go
// converts the keys of earlier formats). While sessions are exported
// (SetExported), a file "reserve" of 256 KiB is kept beside them: on a
// full disk it is removed to give the database room to free the export
// backlog's space, then made again.
//
// # Compaction and checkpoints
//
// The log, not the database, holds what is published and soon evicted.
// Once the log is over its bound (logBound: twice what the rings
// retain, less the database file, at least half a segment; or twice
// CheckpointBytes if set), the background deletes from the database what
// retention dropped, then removes the log's oldest segments whose events
// the buses have mostly evicted, copying into the database (in one
// transaction) only what they still retain (compact). On Close, and every
// CheckpointInterval when nothing was appended since the last tick (every
// tick with CheckpointBytes set), a checkpoint copies everything and
// removes every segment (Checkpoint). Either way the global bus's
// retained events whose records are in the segments removed, or refer into
// them, are copied too, which keeps its references resolvable (refs.go).
//
// # Durability
//
// With SyncAlways, Append returns once its record is on stable storage;
// concurrent appends share one fdatasync (group commit), and one write: an
// append reserves its record's room in the segment and copies it into the
// log's pending buffer, and the goroutine that syncs writes every pending
// record with one pwrite before its fdatasync, outside every bus's lock
// (wal.go). A publish's session record and its global copy's record, and
// the records of every publish that shares the sync, reach the file in
// that one write. A bus calls
// AppendDeferred under its lock and WaitDurable after releasing it, so
// concurrent publishers to one bus share the sync too, and the bus shows
// the events only once they are durable (bus.DeferredStore). With SyncInterval a background goroutine syncs every interval;
// the record is written to the kernel before Append returns, so a process
// crash loses nothing, and a power loss at most one interval. SyncNever
// leaves syncing to checkpoints and the kernel.
//
// # Recovery
//
// Open reads the state dir once, in memory, and then makes the disk agree
// with what it read (recovery, persist). It reads the database's state
// (loadState), the buses' stored chunks (scan) and the log: one reader,
// readSegment, maps each segment, cuts it into its whole records and
// judges what follows them, once (judgeTail), and one replay, replayLog,
// applies the records to the buses' windows (their sizes; the events stay
// in the mapped segments, and a frame is built when a replay first reaches
// it). The database and the log's segments are left as they are, so that
// the daemon serves without first copying the log. A checkpoint in the
// background then copies the segments, one transaction each, and removes
// each one only once the database holds its events durably: a crash
// meanwhile replays what is left.
//
// A bad record in the newest segment that nothing whole follows, and that
// does not look like a whole record damaged in place, is a torn tail: it
// is cut off and logged with what it held, and epochs are kept (with
// SyncAlways nothing acknowledged was in it). Any other bad record, or a
// whole one that refers to events the log does not hold, is corruption:
// everything after it is dropped and every bus gets a new epoch, so no id
// a client may have seen is reused under the epoch it saw it in. A stored
// chunk whose checksum does not match is dropped with every older event of
// its bus, whose epoch changes, as does a bus whose stored events are
// missing. Without the clean-shutdown mark, a journal last run with
// SyncInterval or SyncNever gives every bus a new epoch, since
// acknowledged events may be lost. A database that cannot be read (its
// structure is checked before bbolt opens it, every read of it is guarded
// against panics and memory faults, and its values are checked as they
// are read) is moved aside as journal.db.corrupt-TIME, and the journal
// starts from what the log holds, every bus on a new epoch.
//
// What recovery then writes (persist), in order: in one transaction, the
// format, the sync mode, no clean mark, the damaged chunks' deletion and
// the new epochs; then the log's bad tail cut off, the kept segments
// synced, and a new segment. When that fails for lack of space, Open still
// succeeds, read-only: the journal serves what the recovery restored,
// writes nothing, and every append fails with ErrDiskFull. Read-only is
// only that flag of the one recovery, so its verdicts are the writable
// ones. An append retries persist at most once a second; a new epoch
// chosen in memory is written before anything else, so no id is assigned
// under an epoch that is not on disk.
//
// # Formats
//
// The database records its format (format.go). A state dir of an older
// format is upgraded in place when it is opened, and the upgrade logged;
// one of a newer format is refused with a *FormatError, naming both, before
// anything in it is touched. testdata holds a state dir of every format,
// which a test opens.
//
// # Retention and memory
//
// A Store keeps the bus's retained window like bus.Ring does (count and
// bytes) and deletes what it evicts from the database at the next
// compaction or checkpoint, so disk use stays within about twice what the
// rings retain plus a segment, and bbolt's own pages. Events restored at Open are
// read from disk only when a replay first reaches them, which keeps
// start-up fast.
//
// # Locks
//
// Journal.mu is taken before Store.mu, Store.mu before the log's locks
// (wal.waitMu, released before a sync, then wal.syncMu before wal.mu). The global bus's Store.mu is taken before a
// session's (refsFor), never the other way. The bus calls Store methods with its own
// lock held, so the bus lock comes first of all. Shedding export backlogs
// (shedMu) takes one store's lock at a time, with none held before it,
// and before ckptMu when a full disk makes them give way; holdMu, which
// guards the stores that hold a backlog, is taken after Store.mu.
package journal
