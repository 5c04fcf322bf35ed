package client

import (
	"context"
	"io"
	"time"
)

// PublishStreamKeepalive is PublishStream with a blank line after
// keepalive of quiet input instead of 10 s, for tests.
func (c *Client) PublishStreamKeepalive(ctx context.Context, session string, r io.Reader, keepalive time.Duration) (StreamReply, error) {
	return c.publishStream(ctx, session, r, keepalive)
}
