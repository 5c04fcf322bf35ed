// Package daemontest runs the built localbus binary for end-to-end tests: it
// builds the binary once per test process, starts "localbus serve" on a
// socket in a temporary directory, waits until it answers, and stops it when
// the test ends.
//
// The binary is built with -race; a daemon whose stderr reports a data race
// fails the test that started it. Options.Plain runs one built without it,
// for a test that measures the daemon's memory.
//
// A daemon can also run under a wrapper that execs it, such as
// systemd-socket-activate, with Options.Wrapper and Options.NoSocket.
//
// Clients: Daemon.Do sends REST requests over the socket, and Daemon.Follow
// starts a Follower, an SSE or WebSocket client that resumes with its last
// id whenever the daemon ends its stream and records what it got.
package daemontest
