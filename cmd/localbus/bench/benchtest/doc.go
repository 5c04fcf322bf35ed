// Package benchtest serves the localbus router with faults, for tests of
// the bench's checks: a server that drops, repeats or reorders an event on
// its way to every subscriber, over SSE and WebSocket, so a test can see
// the bench notice, or that is slow to answer publish requests, and counts
// how many of them it had in hand at once.
//
// [New] starts the real router (package ipc over a fresh hub) on a Unix
// socket in a temporary directory, behind a layer that edits the streams'
// bytes. SSE streams go through the ResponseWriter (the layer offers no
// Hijack, so the router streams through net/http); WebSocket streams are
// edited on the connection, frame by frame.
package benchtest
