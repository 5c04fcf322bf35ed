// Package client is the Go client of localbus: it dials the daemon's Unix
// socket or a TCP URL, follows streams with reconnect and resume, and
// publishes events.
package client
