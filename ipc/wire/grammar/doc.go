// Package grammar is the grammar of the values a client sends the daemon,
// parsed once where they enter: resume cursors ([ParseCursor]), queue
// limits ([ParseMaxQueued]), resume times ([ParseSinceTime]), consumer
// names and ack modes ([ParseConsumer], [ParseAckMode]), and JSON as
// the bus accepts it for event data ([ScanValue], [ScanString],
// [SkipSpace]).
//
// The router (package ipc), the command line (cmd/localbus) and the bus
// itself read these values with these functions (and others use their
// bounds), so that each accepts exactly what the others do; the Go
// client (ipc/client) takes them as Go values and sends them in the form
// these functions read. It imports a few packages of the
// standard library and nothing else, so the bus stays pure and a client
// links nothing of the server.
//
// # Files
//
//   - query.go: cursors, queue limits, resume times, consumers and their
//     [Error].
//   - json.go: the JSON scanner.
package grammar
