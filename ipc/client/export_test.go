package client

import (
	"context"
	"io"
	"time"
)

// PublishStreamKeepalive is PublishStream with a blank line after
// keepalive of quiet input instead of 10 s, for tests.
func (c *Client) PublishStreamKeepalive(ctx context.Context, session string, r io.Reader, keepalive time.Duration) (StreamReply, error) {
	return c.publishStream(ctx, session, r, streamLimits{keepalive: keepalive, maxLine: maxStreamLine})
}

// PublishStreamMaxLine is PublishStream with lines up to maxLine bytes
// instead of 64 MiB, for tests.
func (c *Client) PublishStreamMaxLine(ctx context.Context, session string, r io.Reader, maxLine int) (StreamReply, error) {
	return c.publishStream(ctx, session, r, streamLimits{keepalive: streamKeepalive, maxLine: maxLine})
}

// PublishStreamSlowFeeder is PublishStream with a feeder that, once it has
// handed a chunk to the request's body, waits until the request is over
// (at most 10 s) before it looks whether the chunk was taken, for tests.
func (c *Client) PublishStreamSlowFeeder(ctx context.Context, session string, r io.Reader) (StreamReply, error) {
	return c.publishStream(ctx, session, r, streamLimits{
		keepalive: streamKeepalive, maxLine: maxStreamLine,
		handedOver: func(done <-chan struct{}) {
			select {
			case <-done:
			case <-time.After(10 * time.Second):
			}
		},
	})
}
