// Package wire is the vocabulary the daemon's HTTP router and its clients
// share: the request and reply bodies of the REST routes, the error
// envelope and its codes, the header and query parameter names, and the
// paths of the routes (ipc/protocol.md describes them all).
//
// Both sides import it, so a name or a JSON field is written once: the
// router (package ipc) encodes these types and the Go client (package
// ipc/client) decodes them. It depends on the standard library only, so a
// client that links it links nothing of the server.
//
// # Files
//
//   - types.go, codes.go: the error envelope ([ErrorBody]) and its codes,
//     and the bodies of the REST routes.
//   - paths.go: the routes' paths and patterns, which the router's table
//     and the client both use.
//   - headers.go: header and query parameter names, and their limits.
//   - status.go, subscribers.go, consumers.go, upstream.go: the bodies of
//     GET /api/v1/status, the subscriber lists, consumers and the upstream
//     bridge's state.
//   - socket.go: where the daemon's socket is when nothing names one
//     ([SocketPathFor]), the one rule the daemon, the client and the
//     command line follow.
//
// The subpackage grammar holds the grammar of the values a client sends
// (cursors, queue limits, resume times, consumer names, JSON), parsed once
// where they enter.
package wire
