// Package hub is the session registry: the named buses of a daemon, its
// global bus, and the one publish path that puts every event on both.
//
// A Hub owns its buses. Publishing to a session appends the events to the
// session's bus and then, in the same order, to the global bus with their
// session and seq, under a per-session lock so that a global subscriber sees
// each session's events in seq order. Creating and deleting a session emit
// localbus:session-opened and localbus:session-closed on the global bus.
//
// The daemon creates one Hub at start, changes its limits on reload and
// ends its streams on reload and shutdown; the router (package ipc) only
// looks sessions up, publishes and subscribes.
package hub
