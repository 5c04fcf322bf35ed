package client

import (
	"context"
	"errors"
	"net/http"

	"github.com/coder/websocket"
)

// maxWSMessage bounds one WebSocket message, like maxSSEEvent.
const maxWSMessage = maxSSEEvent

// dialWS opens a WebSocket connection and returns the function that reads
// it until ctx ends or the connection fails, handing frames to items. The
// function owns the connection and closes it. The daemon's pings are
// answered while it reads.
func (s *Stream) dialWS(ctx context.Context) (func(context.Context, chan<- item), error) {
	u := s.c.endpoint(s.path, s.query)
	c, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{
		HTTPClient: s.c.hc,
		HTTPHeader: s.resumeHeader(),
	})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols && resp.StatusCode != 0 {
			return nil, apiError(resp.StatusCode, resp.Body)
		}
		return nil, asUnreachable(err, s.c.addr)
	}
	c.SetReadLimit(maxWSMessage)
	return func(ctx context.Context, items chan<- item) {
		defer c.CloseNow()
		for {
			typ, data, err := c.Read(ctx)
			var it item
			switch {
			case err != nil:
				it.err = err
			case typ != websocket.MessageText:
				it.err = errors.New("client: the daemon sent a binary WebSocket message")
			default:
				it.frame, it.err = decodeFrame(data)
			}
			if !send(ctx, items, it) || it.err != nil {
				return
			}
		}
	}, nil
}
