package ipctest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/ipc"
	"github.com/localbus/localbus/ipc/access"
	"github.com/localbus/localbus/ipc/wire"
)

// Wait bounds every wait of the helpers that take no context of their own.
const Wait = 10 * time.Second

// Host is the host name request URLs carry; the socket ignores it.
const Host = "localbus"

// AllowAll is an ipc.Settings.Authenticate that makes every caller admin,
// for tests whose subject is not access control.
func AllowAll(*http.Request) (ipc.Caller, error) {
	return ipc.Caller{Authenticated: true, Scopes: access.NewScopes(access.Admin)}, nil
}

// Options configure a Server.
type Options struct {
	// Hub configures the hub the server makes. Its zero value has
	// AutoCreate off, unlike the daemon's default.
	Hub hub.Options
	// Handler configures the router. Its Hub field is ignored: the router
	// serves the server's hub. A nil Logger discards the router's log lines.
	// A nil Authenticate is AllowAll: every caller is admin, so tests of
	// anything but access control need no credentials. (The router itself
	// refuses every request that needs a scope when it has no
	// authenticator.)
	Handler ipc.Options
}

// A Server is the router served over HTTP on a Unix socket in a temporary
// directory. It is stopped when the test that made it ends.
type Server struct {
	// Hub is the hub the router serves; tests may publish, create sessions
	// and end streams on it directly.
	Hub *hub.Hub
	// Handler is the router.
	Handler *ipc.Handler
	// Socket is the path of the Unix socket.
	Socket string
	// Client is an HTTP client that dials Socket. It has no timeout, since
	// it also serves streams; the helpers bound their own waits.
	Client *http.Client

	transport *http.Transport
}

// New starts a server and registers its shutdown with tb.Cleanup: every
// stream gets stream:closed with reason shutdown, the HTTP server shuts
// down, and New's cleanup waits for every stream handler, upgraded
// WebSocket connections included, and for Serve to return.
func New(tb testing.TB, opts Options) *Server {
	tb.Helper()
	h, err := hub.New(opts.Hub)
	if err != nil {
		tb.Fatalf("hub.New: %v", err)
	}
	hopts := opts.Handler
	hopts.Hub = h
	if hopts.Logger == nil {
		hopts.Logger = slog.New(slog.DiscardHandler)
	}
	if hopts.Authenticate == nil {
		hopts.Authenticate = AllowAll
	}
	s := &Server{Hub: h, Handler: ipc.New(hopts), Socket: socketPath(tb)}
	ln, err := net.Listen("unix", s.Socket)
	if err != nil {
		h.Close()
		tb.Fatalf("listen on %s: %v", s.Socket, err)
	}
	srv := &http.Server{Handler: s.Handler, ReadHeaderTimeout: Wait}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	s.transport = &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return s.Dial(ctx)
		},
		DisableCompression:  true,
		MaxIdleConnsPerHost: 32,
	}
	s.Client = &http.Client{Transport: s.transport}

	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), Wait)
		defer cancel()
		s.Handler.Drain()
		s.Hub.EndStreams(bus.EndShutdown)
		if err := srv.Shutdown(ctx); err != nil {
			tb.Errorf("ipctest: http.Server.Shutdown: %v", err)
		}
		if err := s.Handler.Wait(ctx); err != nil {
			tb.Errorf("ipctest: streams still running after shutdown: %v", err)
		}
		select {
		case err := <-served:
			if !errors.Is(err, http.ErrServerClosed) {
				tb.Errorf("ipctest: Serve = %v, want http.ErrServerClosed", err)
			}
		case <-ctx.Done():
			tb.Errorf("ipctest: Serve did not return")
		}
		s.transport.CloseIdleConnections()
		s.Hub.Close()
	})
	return s
}

// socketPath returns a socket path in a temporary directory of the test,
// short enough for sun_path (108 bytes) even under a long test name.
func socketPath(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	if len(dir) > 90 {
		d, err := os.MkdirTemp("", "ipctest")
		if err != nil {
			tb.Fatalf("temporary socket directory: %v", err)
		}
		tb.Cleanup(func() { os.RemoveAll(d) })
		dir = d
	}
	return filepath.Join(dir, "lb.sock")
}

// Dial opens a raw connection to the server's socket.
func (s *Server) Dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", s.Socket)
}

// URL returns the http URL of path (with its query) on the server.
func URL(path string) string { return "http://" + Host + path }

// Response is a REST reply, read in full.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Request makes one request and reads the whole reply. header may be nil,
// and body nil for none.
func (s *Server) Request(ctx context.Context, method, path string, header http.Header, body []byte) (*Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, URL(path), rd)
	if err != nil {
		return nil, err
	}
	for k, vs := range header {
		req.Header[k] = append([]string(nil), vs...)
	}
	if body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// Do is Request bounded by Wait; it fails the test if no reply arrives.
func (s *Server) Do(tb testing.TB, method, path string, header http.Header, body []byte) *Response {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	r, err := s.Request(ctx, method, path, header, body)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// DecodeJSON decodes the reply's body into v, failing the test if it is
// not JSON of that shape.
func (r *Response) DecodeJSON(tb testing.TB, v any) {
	tb.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		tb.Fatalf("reply %d %q: %v", r.Status, r.Body, err)
	}
}

// ErrorBody decodes an error reply strictly: JSON of exactly the shape
// {"error":{"code","message"}} with Content-Type application/json, and a
// code and message that are not empty. It fails the test otherwise.
func (r *Response) ErrorBody(tb testing.TB) wire.ErrorBody {
	tb.Helper()
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		tb.Errorf("error reply Content-Type = %q, want application/json", ct)
	}
	var body wire.ErrorBody
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		tb.Fatalf("error reply %d %q: not {\"error\":{\"code\",\"message\"}}: %v", r.Status, r.Body, err)
	}
	if body.Error.Code == "" || body.Error.Message == "" {
		tb.Errorf("error reply %d %q: empty code or message", r.Status, r.Body)
	}
	return body
}

// Event is an event to publish: Data is raw JSON, "" for none.
type Event struct {
	Type string
	Data string
}

// MarshalJSON encodes the event as the publish body expects it.
func (e Event) MarshalJSON() ([]byte, error) {
	v := struct {
		Type string          `json:"type"`
		Data json.RawMessage `json:"data,omitempty"`
	}{Type: e.Type}
	if e.Data != "" {
		v.Data = json.RawMessage(e.Data)
	}
	return json.Marshal(v)
}

// PublishBody returns the JSON body that publishes events: one object for
// one event, else an array.
func PublishBody(events ...Event) []byte {
	var b []byte
	if len(events) == 1 {
		b, _ = json.Marshal(events[0])
	} else {
		b, _ = json.Marshal(events)
	}
	return b
}

// TryPublish publishes events to session over HTTP and returns the reply;
// a status other than 200 is an error that quotes the body.
func (s *Server) TryPublish(ctx context.Context, session string, header http.Header, events ...Event) (wire.PublishReply, error) {
	var reply wire.PublishReply
	r, err := s.Request(ctx, http.MethodPost, "/api/v1/sessions/"+session+"/events", header, PublishBody(events...))
	if err != nil {
		return reply, err
	}
	if r.Status != http.StatusOK {
		return reply, &StatusError{Status: r.Status, Body: r.Body}
	}
	if err := json.Unmarshal(r.Body, &reply); err != nil {
		return reply, err
	}
	return reply, nil
}

// Publish is TryPublish bounded by Wait; it fails the test on any error.
func (s *Server) Publish(tb testing.TB, session string, events ...Event) wire.PublishReply {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	reply, err := s.TryPublish(ctx, session, nil, events...)
	if err != nil {
		tb.Fatalf("publish to %s: %v", session, err)
	}
	return reply
}

// StatusError is a reply with an unexpected status.
type StatusError struct {
	Status int
	Body   []byte
}

func (e *StatusError) Error() string {
	return "ipctest: status " + http.StatusText(e.Status) + ": " + string(bytes.TrimSpace(e.Body))
}
