// Package client is the Go client of localbus: it dials the daemon's Unix
// socket or a TCP URL, follows streams across reconnections without losing
// or repeating an event, and publishes events. The localbus command is
// built on it.
//
// # Connecting
//
// The zero Client dials DefaultSocketPath(), the socket the daemon of the
// same user listens on. Set Socket for another socket, such as SocketPath(),
// the one the localbus command dials ($LOCALBUS_SOCKET when set, and the
// system daemon's for a user who runs none), or URL and Key for the
// daemon's loopback TCP listener:
//
//	c := &client.Client{URL: "http://127.0.0.1:8001", Key: os.Getenv("LOCALBUS_KEY")}
//
// # Following a stream
//
// Client.Stream opens a Stream on a session, a family or the global bus;
// Stream.Next returns its frames one by one: events (Frame.ID > 0) and the
// reserved stream:* frames (Frame.Reserved). The stream reconnects by
// itself when the daemon reloads, restarts, evicts it as a slow reader, or
// the connection drops, and resumes after the last event Next returned,
// with the epoch of its bus, so nothing is delivered twice. What cannot be
// recovered is reported in-band, as the daemon sends it:
//
//   - stream:gap with reason "ring_evicted": the events after the cursor
//     up to earliestAvailableId−1 left the daemon's ring before the stream
//     came back;
//   - stream:gap with reason "epoch_reset": the bus started a new id
//     sequence (a daemon without durability restarted, or the session was
//     recreated); what the stream had not received of the old one is lost,
//     and the new sequence is replayed from its start;
//   - stream:gap with reason "upstream_lost": on a mirror of another
//     node's session, the origin ids originFrom..originTo never reached
//     it; the event that follows (earliestAvailableId) is the first after
//     them. The cursor is unaffected;
//   - stream:lagged: the daemon dropped the connection because the reader
//     fell behind; the stream reconnects at once and recovers the events
//     from the ring.
//
// # Consumers
//
// A program that restarts (a service under systemd, a script run from a
// timer) need not keep ids: with StreamOptions.Consumer the daemon keeps
// the position of a named consumer of the session, across restarts of the
// program and of the daemon. Under ack mode AckAuto the position follows
// what the daemon wrote to the stream; under AckExplicit it moves when the
// program calls Stream.Ack for an event it has handled, so everything after
// the last answered ack comes again on the next stream (at least once).
// One stream reads a consumer at a time: a second one takes it over, and
// the first ends with an *EndedError that unwraps to ErrReplaced. See
// ExampleStream_Ack.
//
// # From another module
//
// The module is not on a Go proxy yet: a program in another module points
// it at a checkout of the repository, here one beside it:
//
//	go mod edit -require github.com/localbus/localbus@v0.0.0 -replace github.com/localbus/localbus=../localbus
//	go mod tidy
//
// # Errors
//
// Errors a caller branches on are types: *UnreachableError (nothing
// answers on the socket or address), *APIError (the daemon refused; it
// unwraps to ErrUnauthorized, ErrForbidden, ErrNotFound or ErrConflict),
// *EndedError (a stream ended for good: its session was deleted or does
// not exist, or another stream took its consumer over: ErrReplaced).
// Cancelling a context is not an error to report: calls return ctx.Err().
//
// # Goroutines
//
// A Stream runs one goroutine per connection, which reads the connection
// and hands frames to Next; Stream.Close (or the end of the context given
// to Client.Stream) stops it and waits for it. PublishStream runs its
// request in one goroutine and waits for it before returning. Other REST
// calls start none of their own beyond net/http's;
// Client.CloseIdleConnections releases its keep-alive connections.
package client
