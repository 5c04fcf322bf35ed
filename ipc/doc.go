// Package ipc is the HTTP router shared by every listener: the SSE and
// WebSocket stream handlers, the REST handlers, authorization and the wire
// encoding of requests and errors (SPEC §3, §6). The daemon builds one
// Handler with New, serves it on each listener, and changes its options on
// reload with SetSettings.
//
// # Where to start
//
// routes.go is the route table, SPEC §6 in code: method, pattern, the scope
// a caller needs, and the function that serves it. Handler.wrap (handler.go)
// authenticates and authorizes every request by that table before the
// route's function runs; a Handler without an Authenticate refuses every
// route that needs a scope (401), so it fails closed. Streams start in
// stream.go (serveStream, then runSSE in sse.go or runWS in ws.go, both
// written by pump in stream.go); publishes in publish.go (one body) and
// publish_stream.go (NDJSON read as it arrives); sessions in sessions.go
// (their list written session by session, sessionlist.go);
// reload, caps and health in info.go; WebSocket control frames in
// control.go; consumers (SPEC §2.4) in consumer.go (a stream's consumer:
// attach, its auto position, WebSocket acks) and consumer_routes.go (list,
// ack, delete); CORS in cors.go; errors in errors.go. The
// bodies, header names, error codes and paths are package ipc/wire's, shared
// with the Go client (ipc/client), which imports nothing of this package.
// The bytes on a stream's socket are written by the internal package
// framewriter, behind its Writer (write frames, ping, close).
//
// # From the bus to the socket
//
// A publish is decoded (publish_scan.go's one-pass scanner, with
// encoding/json as the reference on any doubt), each event's type is
// parsed there once into a bus.Type, as the path's session id into a
// bus.SessionID (bus.ParseType, bus.ParseSessionID: the hub and the buses
// take the values and check nothing again), and the batch goes to
// hub.Hub.PublishAs, as the caller's peer:
// the session's bus, then the global bus. The bus serializes each event once into a bus.Frame whose
// bytes every subscriber's queue shares. A stream's writer wakes on its
// subscription, takes every queued frame, and framewriter writes them all
// in one writev: no copy and one system call per wake-up, however many
// frames (SSE: one chunk; WebSocket: one text frame each).
//
// # Fair shares
//
// Every pool a request draws on is a share.Pool, drawn on through the
// account of the caller's peer (Caller.Share, set by Auth.Authenticate:
// share.Privileged for root and the daemon's uid, the uid for another
// socket peer, the key's name on TCP), looked up once per request: body
// bytes as they are read (body.go, with the slow-body rule), outstanding
// tickets (access.TicketStore), streams in total (Handler.open), and
// through the hub the sessions a publish creates, remembered idempotency
// keys and each bus's subscribers. A *share.Refusal becomes the pool's
// own status with a message that names the share (errors.go), and is
// counted in localbus_share_refusals_total.
//
// # Goroutines per connection
//
//   - SSE over HTTP/1: the request's goroutine subscribes, takes the
//     connection over from net/http (framewriter.NewSSE) and returns, so
//     net/http frees its buffers and goroutine. Two goroutines remain: the
//     writer (pump) and a watcher that only reads, to notice the client
//     leaving, and then closes the subscription to wake the writer.
//   - SSE elsewhere (HTTP/2, a refused subscription): the request's
//     goroutine runs pump through the ResponseWriter until the stream ends
//     or the request's context does.
//   - WebSocket: the request's goroutine upgrades (framewriter.AcceptWS)
//     and returns. Two goroutines remain: the writer (pump: frames, control
//     replies, pings) and the reader (readControl: the client's control
//     frames, and the pongs coder/websocket needs a reader for).
//   - A streaming publish runs in its request's goroutine.
//
// # Who owns a hijacked connection
//
// Once taken over, a connection belongs to its stream's writer goroutine:
// the SSE writer closes it when the stream ends (and waits for its
// watcher); the WebSocket writer ends it with the close handshake or
// CloseNow, then cancels and waits for its reader. Each stream calls the
// done function serveStream gave it exactly once, after that: it closes
// the subscription and releases the stream's place (MaxStreams) and the
// Handler.Wait group. On a WebSocket, coder/websocket's frames and ours
// share one lock, the wsConn's (see framewriter's package doc).
//
// # Lock order
//
// Outer to inner: the hub's per-session publish lock, a bus's lock, a
// subscription's lock (the hub's global queue lock is taken alone, never
// with another). The router holds none of
// them while it writes: a writer takes frames under the subscription's lock
// (Subscription.Take) and writes after releasing it. On a WebSocket,
// coder/websocket's write lock comes before the wsConn's, which is always
// innermost and held only across a write to the socket. Options are read
// through an atomic pointer, without a lock.
//
// # Where each limit is enforced
//
//   - A credential in the query string: ServeHTTP, first, 401 (after the
//     CORS headers of an allowed origin, so a page can read it). The one
//     exception, ?ticket= on a GET stream route, is redeemed in wrap after
//     Authenticate; the ticket store caps outstanding tickets (429).
//   - MaxHeaderBytes: ServeHTTP, 431. BodyTimeout: wrap, on POST and DELETE
//     bodies, 408.
//   - MaxBodyBytes: readBody (http.MaxBytesReader), 413. MaxEventBytes and
//     DefaultMaxBatch: decodePublish and the streaming publish, per event
//     or line, 413.
//   - MaxStreams (across every bus): serveStream; a stream over it, like one
//     over a bus's own subscriber limit, gets an in-band stream:error frame
//     (and on WebSocket close code 1013).
//   - maxQueued and the byte limit of a subscriber's queue: the bus, which
//     evicts a slow reader with stream:lagged.
//   - WriteTimeout: framewriter, on each write that has to wait for the
//     peer. Keepalive: pump's ping after that long without a write.
//   - MaxControlFrame: the WebSocket reader's read limit (close 1009).
//   - max_consumers: the hub's hub.ConsumerSet, when a stream creates a
//     consumer, 429 consumer_limit before the response begins.
//
// # Reload and shutdown
//
// On reload the daemon calls SetSettings, then hub.Hub.EndStreams with
// reason reload: every stream gets stream:closed and ends (WebSocket close
// 1001 "reload"), and clients reconnect with Last-Event-ID under the new
// options. On shutdown the daemon calls Drain (new streams and streaming
// publishes are refused with 503, and streaming publishes stop reading),
// closes the listeners, lets http.Server.Shutdown finish the requests,
// ends every stream with reason shutdown (repeatedly, for a stream that
// subscribed just before Drain), and waits for them with Wait, since
// net/http does not wait for connections it no longer owns.
package ipc
