package client

import (
	"context"
	"errors"
	"net/http"

	"github.com/localbus/localbus/ipc/wire"
)

// UpstreamStatus is the state of the daemon's bridge to NATS JetStream
// (GET /api/v1/upstream, SPEC §12).
type UpstreamStatus = wire.UpstreamStatus

// Upstream returns the state of the daemon's NATS bridge; ok is false when
// the daemon has none (no [upstream] table). It needs the read scope.
func (c *Client) Upstream(ctx context.Context) (st UpstreamStatus, ok bool, err error) {
	err = c.do(ctx, http.MethodGet, wire.PathUpstream, nil, nil, &st)
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return UpstreamStatus{}, false, nil
	}
	return st, err == nil, err
}
