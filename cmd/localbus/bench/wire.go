package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// endpoint says how to reach a server: a Unix socket, or a TCP address
// with its Host header, and the bearer key to present.
type endpoint struct {
	network string // "unix" or "tcp"
	addr    string
	host    string // the Host header
	key     string
}

// newEndpoint returns the endpoint of a socket path or an http:// URL; the
// URL wins when both are given.
func newEndpoint(socket, rawURL, key string) (endpoint, error) {
	if rawURL != "" {
		u, err := url.Parse(rawURL)
		if err != nil || u.Scheme != "http" || u.Host == "" {
			return endpoint{}, fmt.Errorf("bench: --url %q: want http://HOST:PORT", rawURL)
		}
		addr := u.Host
		if u.Port() == "" {
			addr = net.JoinHostPort(u.Hostname(), "80")
		}
		return endpoint{network: "tcp", addr: addr, host: u.Host, key: key}, nil
	}
	if socket == "" {
		return endpoint{}, errors.New("bench: no socket and no URL to reach the daemon")
	}
	return endpoint{network: "unix", addr: socket, host: "localbus", key: key}, nil
}

func (e endpoint) String() string {
	if e.network == "unix" {
		return "unix:" + e.addr
	}
	return "http://" + e.host
}

func (e endpoint) dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, e.network, e.addr)
	if err != nil {
		return nil, &UnreachableError{Addr: e.String(), Err: err}
	}
	return c, nil
}

// UnreachableError is a failure to connect to the server.
type UnreachableError struct {
	Addr string
	Err  error
}

func (e *UnreachableError) Error() string {
	return "bench: cannot reach " + e.Addr + ": " + e.Err.Error()
}
func (e *UnreachableError) Unwrap() error { return e.Err }

// StatusError is a reply with a status the bench did not expect.
type StatusError struct {
	Method, Path string
	Status       int
	Body         string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("bench: %s %s: %d %s: %s", e.Method, e.Path, e.Status, http.StatusText(e.Status), e.Body)
}

// appendHead appends a request line and headers: Host, the key, then
// extra lines (each "Name: value"), and a Content-Length when body is not
// nil.
func (e endpoint) appendHead(dst []byte, method, path string, body []byte, extra ...string) []byte {
	dst = append(dst, method...)
	dst = append(dst, ' ')
	dst = append(dst, path...)
	dst = append(dst, " HTTP/1.1\r\nHost: "...)
	dst = append(dst, e.host...)
	dst = append(dst, "\r\n"...)
	if e.key != "" {
		dst = append(dst, "Authorization: Bearer "...)
		dst = append(dst, e.key...)
		dst = append(dst, "\r\n"...)
	}
	for _, h := range extra {
		dst = append(dst, h...)
		dst = append(dst, "\r\n"...)
	}
	if body != nil {
		dst = append(dst, "Content-Type: application/json\r\nContent-Length: "...)
		dst = strconv.AppendInt(dst, int64(len(body)), 10)
		dst = append(dst, "\r\n"...)
	}
	return append(dst, "\r\n"...)
}

// restConn is one keep-alive HTTP/1.1 connection for REST calls. It is not
// safe for concurrent use.
type restConn struct {
	ep   endpoint
	conn net.Conn
	br   *bufio.Reader
	req  []byte
}

func (e endpoint) rest(ctx context.Context) (*restConn, error) {
	c, err := e.dial(ctx)
	if err != nil {
		return nil, err
	}
	return &restConn{ep: e, conn: c, br: bufio.NewReaderSize(c, 16<<10)}, nil
}

func (rc *restConn) Close() error { return rc.conn.Close() }

// do makes one request and reads the whole reply into buf (reused), which
// it returns. The deadline bounds the round trip.
func (rc *restConn) do(method, path string, body []byte, deadline time.Time, buf []byte) (status int, reply []byte, err error) {
	rc.conn.SetDeadline(deadline)
	rc.req = rc.ep.appendHead(rc.req[:0], method, path, body)
	if len(body) > 0 && len(body) < 64<<10 {
		rc.req = append(rc.req, body...)
		body = nil
	}
	if _, err := rc.conn.Write(rc.req); err != nil {
		return 0, nil, err
	}
	if len(body) > 0 {
		if _, err := rc.conn.Write(body); err != nil {
			return 0, nil, err
		}
	}
	resp, err := http.ReadResponse(rc.br, nil)
	if err != nil {
		return 0, nil, err
	}
	w := bytes.NewBuffer(buf[:0])
	_, err = w.ReadFrom(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, nil, err
	}
	if resp.Close {
		err = errConnClosing
	}
	return resp.StatusCode, w.Bytes(), err
}

// errConnClosing says the reply was read but the server closes the
// connection: the next request needs a new one.
var errConnClosing = errors.New("bench: the server closes the connection")

// call makes one request on a new connection and returns the reply body;
// a status other than want is a *StatusError.
func (e endpoint) call(ctx context.Context, method, path string, body []byte, want int) ([]byte, error) {
	rc, err := e.rest(ctx)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Minute)
	}
	stop := context.AfterFunc(ctx, func() { rc.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	status, reply, err := rc.do(method, path, body, deadline, nil)
	if err != nil && !errors.Is(err, errConnClosing) {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("bench: %s %s: %w", method, path, err)
	}
	if status != want {
		return nil, &StatusError{Method: method, Path: path, Status: status, Body: strings.TrimSpace(string(reply))}
	}
	return reply, nil
}
