// Package ipc is the HTTP router shared by every listener: the SSE and
// WebSocket stream handlers, the REST handlers, authorization and the wire
// encoding of requests and errors.
package ipc
