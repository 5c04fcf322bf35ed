// Package wire is the vocabulary the daemon's HTTP router and its clients
// share: the request and reply bodies of the REST routes, the error
// envelope and its codes, the header and query parameter names, and the
// paths of the routes (ipc/protocol.md describes them all).
//
// Both sides import it, so a name or a JSON field is written once: the
// router (package ipc) encodes these types and the Go client (package
// ipc/client) decodes them. It depends on the standard library only, so a
// client that links it links nothing of the server.
package wire
