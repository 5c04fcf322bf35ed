// Package ipctest runs the localbus router on a real Unix socket for tests,
// and gives them clients that dial that socket: REST calls, Server-Sent
// Events streams and WebSocket streams.
//
// [New] starts an [ipc.Handler] over a fresh [hub.Hub] with an [http.Server]
// listening on a socket in the test's temporary directory, and stops it when
// the test ends the way the daemon does: every stream gets stream:closed
// (shutdown), the server shuts down, and the handler's upgraded connections
// are waited for. Every wait the helpers make is bounded by a context or a
// timeout, so a broken server fails the test instead of hanging it.
//
//	srv := ipctest.New(t, ipctest.Options{Hub: hub.Options{AutoCreate: true}})
//	srv.Publish(t, "s1", ipctest.Event{Type: "build:step", Data: `{"n":1}`})
//	st := srv.OpenSSE(t, "/api/v1/sessions/s1/events?since=0", nil)
//	ready := st.MustNext(t) // stream:ready
//	first := st.MustNext(t) // build:step, id 1
//
// Raw connections ([Server.Dial]) serve tests that need a client which
// stops reading; [ReadSSE] reads the stream of such a connection later.
//
// Clients a test opens with the helpers are closed when the test ends, before
// the server stops.
package ipctest
