// Package framewriter turns a stream's frames into bytes on its socket:
// SSE chunking on a connection taken over from net/http, WebSocket text
// framing beside github.com/coder/websocket, and writev(2) of many shared
// buffers in one system call. The router's stream loop sees only Writer
// (write frames, ping, close); everything about bytes, buffers and
// connections is here.
//
// # The write path
//
// The bus serializes each event once (bus.Frame: the SSE bytes, with the
// JSON envelope inside them) and every subscriber's queue shares those
// bytes. Each wake-up a writer takes every queued frame and hands their
// bytes, with the few bytes of framing it builds (the HTTP response head
// on the first write, chunk headers and CRLFs, WebSocket frame headers),
// to one writev: one system call and no copy per wake-up, however many
// frames. Where writev is not available (not Linux, or a connection that
// is not a syscall.Conn) the buffers are copied into one Write. A write
// that the socket takes at once sets no deadline; one that has to wait for
// the peer fails after the writer's timeout. Scratch space (Buf) is
// pooled, so an idle stream holds none.
//
// # What WS assumes of coder/websocket (v1.8.15)
//
// coder/websocket runs the WebSocket protocol: the handshake, reading the
// client's frames, answering pings, sending ours, the close handshake. The
// messages do not go through it: WS writes text frames on the same
// connection itself. That is correct only while the following hold; the
// tests in coder_test.go fail when one stops holding.
//
//  1. websocket.Accept takes the connection by calling Hijack on the
//     ResponseWriter it is given, and then reads and writes only through
//     the net.Conn and bufio.ReadWriter that Hijack returned. So the
//     wsConn we return sits under every byte it writes, and its reader
//     sees what the client sent right after the upgrade request. AcceptWS
//     refuses to go on if Hijack was not called.
//  2. It writes each frame it sends (ping, pong, close) into that
//     bufio.Writer whole and flushes once per frame, and control frames
//     are at most 127 bytes: with a 256-byte writer, each reaches wsConn
//     in exactly one Write, never part of a frame, never two. wsConn takes
//     its lock per Write, and our messages take the same lock, so frames
//     from both never mix.
//  3. It never writes a data frame on its own (we never call its Writer),
//     so message order is ours alone.
//  4. A close frame it sends starts a Write, so wsConn can see it
//     (opcode 0x8 in the first byte) and refuse messages after it, as
//     RFC 6455 requires.
//  5. It bounds its writes with contexts (closing the connection when one
//     ends), never with the connection's deadlines, so the deadlines our
//     writes set and clear do not cut its frames off, nor its ours.
//  6. Ping waits for the pong that a concurrent Read delivers: the router
//     reads the client's frames in a goroutine of its own for as long as
//     it pings. Close writes the close frame, waits for the peer's, and
//     closes the connection.
//
// The connection belongs to the WS (and so to coder/websocket's Conn)
// once AcceptWS returns, and to the SSE once NewSSE took it over: Close
// releases it.
package framewriter
