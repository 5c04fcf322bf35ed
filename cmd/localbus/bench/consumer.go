package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Consumers (SPEC §2.4) in the bench: fanout with --consumers, where every
// subscriber reads through an auto consumer of its own, against the same
// daemon's plain streams; and the ack scenario, one client acknowledging
// on the WebSocket, one event at a time, next to the publishes of those
// events.

// The names of the two columns of a fanout with --consumers.
const (
	targetConsumers = "consumers"
	targetPlain     = "plain"
)

// viaConsumers is the daemon whose fanout subscribers each read through a
// consumer of their own.
type viaConsumers struct{ *daemon }

func (viaConsumers) name() string { return targetConsumers }

// plainDaemon is the same daemon with plain streams, compared with it.
type plainDaemon struct{ *daemon }

func (plainDaemon) name() string { return targetPlain }

// consumerQuery is the query that puts fanout's subscriber i on a consumer
// of its own, on the consumers target; "" elsewhere. An auto consumer
// created by its stream on the new session starts at 0, before the first
// event, as a plain stream would.
func consumerQuery(t target, i int) string {
	if t.name() != targetConsumers {
		return ""
	}
	return "&consumer=bench-" + strconv.Itoa(i)
}

// ackConsumer is the consumer the ack scenario reads through.
const ackConsumer = "bench-ack"

// ack is the ack scenario: one client publishes an event (a single-event
// request, its round trip timed), reads it from a WebSocket stream
// through an explicit consumer, and acknowledges it with
// {"op":"ack","id":N}, the time to {"op":"acked"} timed; then the next,
// E times, one after another. Both round trips include a synced write:
// the event's record in the journal's log, the consumer's position in its
// database.
func ack(ctx context.Context, e *env) (*Result, error) {
	c := e.c
	path, err := e.t.newSession(ctx, 0)
	if err != nil {
		return nil, err
	}
	st, err := e.t.open(ctx, streamOptions{transport: TransportWS, path: path, query: "consumer=" + ackConsumer + "&ack=explicit"})
	if err != nil {
		return nil, err
	}
	ws, ok := st.(*wsStream)
	if !ok {
		st.Close()
		return nil, errors.New("bench: the ack scenario needs a WebSocket stream")
	}
	frames := make(chan frame, 16)
	readErr := make(chan error, 1)
	go func() {
		readErr <- ws.run(func(f *frame) error {
			if f.kind == kindEvent || f.kind == kindReply || f.kind == kindClosed || f.kind == kindLagged || f.kind == kindError {
				frames <- frame{kind: f.kind, id: f.id, data: append([]byte(nil), f.data...)}
			}
			return nil
		})
	}()
	defer func() {
		ws.Close()
		<-readErr
	}()
	await := func(kind frameKind, id uint64) error {
		t := time.NewTimer(c.Settle)
		defer t.Stop()
		for {
			select {
			case f := <-frames:
				switch {
				case f.kind == kind && f.id >= id:
					return nil
				case f.kind == kindReply && kind == kindReply:
					return fmt.Errorf("bench: ack %d answered %s %d", id, f.data, f.id)
				case f.kind != kindEvent && f.kind != kindReply:
					return fmt.Errorf("bench: the stream ended: %s", f.data)
				}
			case err := <-readErr:
				readErr <- err
				return fmt.Errorf("bench: the stream ended: %v", err)
			case <-t.C:
				return fmt.Errorf("bench: nothing for %v while waiting for %d", c.Settle, id)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	pub, err := e.t.publisher(ctx, path, c.Size)
	if err != nil {
		return nil, err
	}
	defer pub.Close()
	e.logf("%s: %d events published, read and acknowledged one at a time", e.t.name(), c.Events)
	pubs, acks := make([]int64, 0, c.Events), make([]int64, 0, c.Events)
	var check Check
	check.Subscribers, check.Expected = 1, uint64(c.Events)
	var msg []byte
	cpu := startCPU(e.serverPID())
	start := time.Now()
	for range c.Events {
		t0 := time.Now()
		id, err := pub.one(ctx, 0)
		if err != nil {
			return nil, err
		}
		pubs = append(pubs, int64(time.Since(t0)))
		if err := await(kindEvent, id); err != nil {
			return nil, err
		}
		check.Received++
		msg = append(append(append(msg[:0], `{"op":"ack","id":`...), strconv.FormatUint(id, 10)...), '}')
		t1 := time.Now()
		if err := ws.writeText(msg); err != nil {
			return nil, err
		}
		if err := await(kindReply, id); err != nil {
			return nil, err
		}
		acks = append(acks, int64(time.Since(t1)))
	}
	secs := time.Since(start).Seconds()
	return &Result{
		Target: e.t.name(), Seconds: secs, Publishers: 1,
		RequestsPerSec: float64(c.Events) / secs, PublishedPerSec: float64(c.Events) / secs,
		Requests: percentiles(pubs), Acks: percentiles(acks), Check: check,
		CPU: cpu.stop(float64(c.Events)),
	}, nil
}
