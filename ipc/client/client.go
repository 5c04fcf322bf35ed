package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/localbus/localbus/ipc/wire"
)

// A Client talks to one localbus daemon. The zero value dials
// DefaultSocketPath(). Set the fields before the first call and do not
// change or copy the Client afterwards; it is safe for concurrent use.
type Client struct {
	// Socket is the Unix socket to dial; "" means DefaultSocketPath().
	// Ignored when URL is set.
	Socket string
	// URL is the daemon's TCP address, e.g. "http://127.0.0.1:8001"; it wins
	// over Socket. A path in it is a prefix for every route.
	URL string
	// Key is sent as "Authorization: Bearer <Key>" when not "". TCP needs
	// one; on the socket it adds its scopes to the peer's.
	Key string
	// ClientID is sent as Localbus-Client-Id with publishes, so events carry
	// it as "originator"; "" sends none.
	ClientID string
	// HTTPClient, when set, makes every request, and Socket and URL only
	// build the request URLs (URL's host, or "localhost" for the socket).
	// It must not have a Timeout, which would cut streams short; use
	// contexts. nil builds one that dials Socket or URL.
	HTTPClient *http.Client

	once sync.Once
	hc   *http.Client
	base *url.URL
	addr string // for UnreachableError
	err  error  // a malformed URL
}

// Transport defaults for the HTTP client the Client builds.
const (
	dialTimeout           = 5 * time.Second
	responseHeaderTimeout = time.Minute
)

func (c *Client) init() error {
	c.once.Do(func() {
		if c.URL != "" {
			u, err := url.Parse(c.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				c.err = &URLError{URL: c.URL}
				return
			}
			u.Path = strings.TrimSuffix(u.Path, "/")
			u.RawQuery, u.Fragment, u.RawPath = "", "", ""
			c.base, c.addr = u, "tcp:"+u.Host
		} else {
			sock := c.Socket
			if sock == "" {
				sock = DefaultSocketPath()
			}
			// The host names nothing on a socket; a loopback name passes
			// any Host check the daemon makes.
			c.base, c.addr = &url.URL{Scheme: "http", Host: "localhost"}, "unix:"+sock
		}
		if c.HTTPClient != nil {
			c.hc = c.HTTPClient
			return
		}
		c.hc = &http.Client{Transport: c.newTransport()}
	})
	return c.err
}

// newTransport returns a transport that dials the socket or the URL's host
// and reports dial failures as *UnreachableError. It never uses a proxy:
// the daemon is local.
func (c *Client) newTransport() *http.Transport {
	socket := ""
	if c.URL == "" {
		socket = strings.TrimPrefix(c.addr, "unix:")
	}
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if socket != "" {
				network, addr = "unix", socket
			}
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, &UnreachableError{Addr: c.addr, Err: err}
			}
			return conn, nil
		},
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: responseHeaderTimeout,
		TLSHandshakeTimeout:   10 * time.Second,
		ForceAttemptHTTP2:     false, // SSE and the WebSocket upgrade need HTTP/1.1
	}
}

// Addr names where the client connects, "unix:PATH" or "tcp:HOST:PORT",
// for messages.
func (c *Client) Addr() string {
	if err := c.init(); err != nil {
		return c.URL
	}
	return c.addr
}

// CloseIdleConnections closes the idle keep-alive connections of the
// client's HTTP transport. Open streams are not affected.
func (c *Client) CloseIdleConnections() {
	if c.init() == nil {
		c.hc.CloseIdleConnections()
	}
}

// endpoint returns the URL of path (which starts with /api/...) with query.
func (c *Client) endpoint(path string, query url.Values) string {
	// path is escaped already (wire's path builders escape each id):
	// keep it as sent, or an id's % would be escaped twice.
	u := *c.base
	u.RawPath = c.base.EscapedPath() + path
	if p, err := url.PathUnescape(u.RawPath); err == nil {
		u.Path = p
	} else {
		u.Path, u.RawPath = c.base.Path+path, ""
	}
	u.RawQuery = query.Encode()
	return u.String()
}

// header returns the headers every request carries.
func (c *Client) header() http.Header {
	h := http.Header{}
	if c.Key != "" {
		h.Set("Authorization", "Bearer "+c.Key)
	}
	return h
}

// do sends one REST request and decodes a 2xx JSON answer into out (nil
// discards it). A non-2xx answer is an *APIError; a dial failure an
// *UnreachableError.
func (c *Client) do(ctx context.Context, method, path string, hdr http.Header, body []byte, out any) error {
	return c.doQuery(ctx, method, path, nil, hdr, body, out)
}

// doQuery is do with a query string.
func (c *Client) doQuery(ctx context.Context, method, path string, query url.Values, hdr http.Header, body []byte, out any) error {
	if err := c.init(); err != nil {
		return err
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.endpoint(path, query), rd)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	req.Header = c.header()
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	if body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", wire.ContentTypeJSON)
	}
	req.Header.Set("Accept", wire.ContentTypeJSON)
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return asUnreachable(err, c.addr)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return apiError(resp.StatusCode, resp.Body)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		return nil
	}
	if br, ok := out.(bodyReader); ok {
		buf := bodyBuffers.Get().(*bytes.Buffer)
		defer bodyBuffers.Put(buf)
		buf.Reset()
		if _, err := buf.ReadFrom(resp.Body); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("client: reading the answer to %s %s: %w", method, path, err)
		}
		if err := br.readBody(buf.Bytes()); err != nil {
			return fmt.Errorf("client: decoding the answer to %s %s: %w", method, path, err)
		}
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("client: decoding the answer to %s %s: %w", method, path, err)
	}
	return nil
}

// A bodyReader decodes an answer from its bytes, in place of
// encoding/json (the sessions list, sessionlist.go). It keeps none of b,
// which is reused.
type bodyReader interface {
	readBody(b []byte) error
}

// bodyBuffers hold the answers a bodyReader reads.
var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}
