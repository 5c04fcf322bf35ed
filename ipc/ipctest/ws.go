package ipctest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/coder/websocket"

	"github.com/localbus/localbus/bus"
)

// DialWS opens a WebSocket stream at path over the server's socket. ctx
// bounds the handshake only.
func (s *Server) DialWS(ctx context.Context, path string, header http.Header) (*websocket.Conn, *http.Response, error) {
	return websocket.Dial(ctx, "ws://"+Host+path, &websocket.DialOptions{HTTPClient: s.Client, HTTPHeader: header})
}

// OpenWS is DialWS bounded by Wait; it fails the test on error and closes
// the connection when the test ends.
func (s *Server) OpenWS(tb testing.TB, path string, header http.Header) *websocket.Conn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	c, _, err := s.DialWS(ctx, path, header)
	if err != nil {
		tb.Fatalf("WebSocket %s: %v", path, err)
	}
	// The read limit is the client's: envelopes can be as large as the
	// daemon's max_event_bytes.
	c.SetReadLimit(-1)
	tb.Cleanup(func() { c.CloseNow() })
	return c
}

// ReadText reads one message, which must be a text frame.
func ReadText(ctx context.Context, c *websocket.Conn) ([]byte, error) {
	typ, b, err := c.Read(ctx)
	if err != nil {
		return nil, err
	}
	if typ != websocket.MessageText {
		return b, fmt.Errorf("ipctest: got a %v message, want text", typ)
	}
	return b, nil
}

// ReadEnvelope reads one text message and decodes it as an envelope; it
// also returns the message as received.
func ReadEnvelope(ctx context.Context, c *websocket.Conn) (bus.Envelope, []byte, error) {
	var env bus.Envelope
	b, err := ReadText(ctx, c)
	if err != nil {
		return env, b, err
	}
	err = json.Unmarshal(b, &env)
	return env, b, err
}

// MustReadEnvelope is ReadEnvelope bounded by Wait; it fails the test on
// error.
func MustReadEnvelope(tb testing.TB, c *websocket.Conn) bus.Envelope {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	env, b, err := ReadEnvelope(ctx, c)
	if err != nil {
		tb.Fatalf("WebSocket read: %v (message %q)", err, b)
	}
	return env
}

// WriteJSON sends v as one text message, bounded by Wait.
func WriteJSON(c *websocket.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return WriteText(c, b)
}

// WriteText sends b as one text message, bounded by Wait.
func WriteText(c *websocket.Conn, b []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	return c.Write(ctx, websocket.MessageText, b)
}

// ReadUntilClose reads messages until the connection closes, bounded by
// ctx, and returns them with the close status (-1 if the connection ended
// without a close frame, with the error).
func ReadUntilClose(ctx context.Context, c *websocket.Conn) ([][]byte, websocket.StatusCode, error) {
	var msgs [][]byte
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			code := websocket.CloseStatus(err)
			if code == -1 {
				return msgs, code, err
			}
			return msgs, code, nil
		}
		msgs = append(msgs, b)
	}
}
