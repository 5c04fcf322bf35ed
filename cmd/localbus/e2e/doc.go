// Package e2e holds end-to-end tests of the built localbus binary: access
// control (keys, scopes, peer credentials as root and as another uid, the
// browser WebSocket subprotocol, socket permissions) and the limits that
// protect the daemon from its clients (body and header sizes, sessions,
// subscribers, slow-loris connections).
//
// The package has no code of its own. Its tests start "localbus serve" with
// daemon/daemontest on sockets in temporary directories and talk to it with
// Go clients and with clients localbus did not write: curl, and Python's
// websockets (Debian's python3-websockets, at /usr/bin/python3). Tests that
// act as another user run their client through setpriv(1) as uid 65534, so
// they need root; without it they are skipped.
package e2e
