package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// jetStream is NATS JetStream as a target of the publish scenario, the
// durable message store the daemon is compared with per publish: each
// publisher is a connection of its own that publishes one message and
// waits for its acknowledgement (JetStream's synchronous Publish) to a
// stream of the bench's own, with file storage, that close deletes.
type jetStream struct {
	url     string
	server  int // nats-server's process, for CPU figures; 0 if unknown
	version string
	nc      *nats.Conn
	js      jetstream.JetStream
	streams []string
}

func newJetStream(ctx context.Context, url string, pid int) (*jetStream, error) {
	nc, err := nats.Connect(url, nats.Name("localbus bench"))
	if err != nil {
		return nil, &UnreachableError{Addr: url, Err: err}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bench: jetstream: %w", err)
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("bench: %s has no JetStream (nats-server -js): %w", url, err)
	}
	return &jetStream{url: url, server: pid, version: nc.ConnectedServerVersion(), nc: nc, js: js}, nil
}

func (j *jetStream) name() string   { return "jetstream" }
func (j *jetStream) limits() limits { return limits{MaxBatch: 1} }
func (j *jetStream) pid() int       { return j.server }

// newSession creates a stream with file storage; the path it returns is
// the stream's one subject.
func (j *jetStream) newSession(ctx context.Context, _ int) (string, error) {
	name := fmt.Sprintf("BENCH_%08X", rand.Uint32())
	subject := "bench." + name
	if _, err := j.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage,
	}); err != nil {
		return "", fmt.Errorf("bench: creating JetStream stream %s: %w", name, err)
	}
	j.streams = append(j.streams, name)
	return subject, nil
}

func (j *jetStream) open(context.Context, streamOptions) (stream, error) {
	return nil, errors.New("bench: the JetStream target only publishes")
}

func (j *jetStream) publisher(_ context.Context, subject string, size int) (publisher, error) {
	nc, err := nats.Connect(j.url, nats.Name("localbus bench publisher"))
	if err != nil {
		return nil, &UnreachableError{Addr: j.url, Err: err}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &jetStreamPublisher{nc: nc, js: js, subject: subject, p: payload{size: size}}, nil
}

func (j *jetStream) close(ctx context.Context) {
	for _, name := range j.streams {
		j.js.DeleteStream(ctx, name)
	}
	j.nc.Close()
}

// jetStreamPublisher publishes the bytes the daemon's publisher posts, one
// event's JSON, as one message.
type jetStreamPublisher struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	subject string
	p       payload
	body    []byte
}

func (p *jetStreamPublisher) one(ctx context.Context, due int64) (uint64, error) {
	b := append(p.body[:0], `{"type":"`+eventType+`","data":`...)
	b = append(b, p.p.data(due)...)
	p.body = append(b, '}')
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ack, err := p.js.Publish(ctx, p.subject, p.body)
	if err != nil {
		return 0, fmt.Errorf("bench: JetStream publish: %w", err)
	}
	return ack.Sequence, nil
}

func (p *jetStreamPublisher) batch(context.Context, int) (uint64, error) {
	return 0, errors.New("bench: the JetStream target publishes one message at a time")
}

func (p *jetStreamPublisher) Close() error {
	p.nc.Close()
	return nil
}
