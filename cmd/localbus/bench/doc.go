// Package bench is the load tool behind "localbus bench": it drives a running
// daemon over its Unix socket or loopback TCP with scenarios that measure
// fan-out throughput, publish-to-deliver latency, memory per idle stream,
// replay time and publish requests per second, and checks that every
// subscriber got every event once, in order.
//
// Start with [Run], which takes a [Config] and returns a [Report]; print it
// with [Report.WriteTable] or encode it as JSON.
//
// # Scenarios
//
//   - fanout: S subscribers, E events of P bytes published in batches of B.
//     The publisher keeps at most a window of events ahead of the slowest
//     subscriber, so no queue overflows and the figure is delivered events
//     per second, S×E over the time from the first publish to the last
//     delivery.
//   - latency: events published one per request at a fixed rate R for a
//     duration D, open-loop: each is sent when due on whichever of a pool
//     of connections (Config.Publishers, 32) is free, without waiting for
//     the replies before it. Each event carries the time it was due, and
//     latency is measured from that time, so a publisher that falls behind
//     shows in the figures instead of hiding (no coordinated omission).
//   - idle: C subscribers that receive nothing; the daemon's resident memory
//     per stream, read from /proc/PID/status.
//   - replay: a new subscriber resuming from 0 on a full ring; the time until
//     stream:replayed.
//   - publish: single-event publish requests per second with one subscriber.
//   - ack: one client publishes an event, reads it on a WebSocket through
//     an explicit consumer and acknowledges it ({"op":"ack"}), one event
//     after another; an ack's round trip against the publish's, at the
//     median (consumer.go).
//
// # Consumers
//
// With Config.Consumers, every fanout subscriber reads through an auto
// consumer of its own, and the same daemon's plain streams are what it is
// compared with, in alternating rounds, instead of a baseline.
//
// # Baseline
//
// With Config.Baseline, fanout and latency also run through a bare server
// on a Unix socket in a temporary directory: each event is encoded once and
// written to every subscriber with one write per batch, the machine's limit
// for that wire format. The same clients read both, so the daemon's figures
// are printed as ratios to the baseline of the same run. The server runs in
// a process of its own, this executable started again (a program that runs
// the baseline calls [ServeBaselineIfAsked] first in main), so that its
// processor time is read from /proc as the daemon's is; the bench asks it
// to publish over a pair of pipes, with one small binary message per
// publish.
//
// # JetStream
//
// With Config.JetStream, publish also runs against NATS JetStream, the
// durable store the daemon is compared with per message: each publisher
// is a NATS connection that publishes the same bytes one message at a
// time and waits for the acknowledgement, to a file-storage stream of the
// bench's own. Neither target has a subscriber then; the check is that
// every request was acknowledged with an id of its own, with no hole.
//
// # Clients
//
// The subscribers are minimal raw clients, not the Go client: SSE over
// HTTP/1.1 (chunked or close-delimited) and WebSocket (RFC 6455), parsing only
// what the check needs, so that the client's own cost stays small next to
// the server's. They reconnect with Last-Event-ID after stream:lagged or
// stream:closed, as a real client would, and count it.
package bench
