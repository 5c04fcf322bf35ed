package ipc

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/localbus/localbus/bus/share"
	"github.com/localbus/localbus/ipc/access"
	"github.com/localbus/localbus/ipc/wire"
)

// connInfo is what the router knows of a connection: its transport and, on
// a Unix socket, the peer's credentials, read once when it was accepted.
type connInfo struct {
	unix    bool
	peer    *access.Peer
	peerErr error
}

type connKey struct{}

// ConnContext is the http.Server ConnContext hook: it records the
// connection's transport and, for a Unix socket, the kernel's peer
// credentials (SO_PEERCRED), so every request on it is authorized by who
// connected.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	ci := &connInfo{}
	if _, ok := c.LocalAddr().(*net.UnixAddr); ok {
		ci.unix = true
		p, err := access.PeerCred(c)
		if err == nil {
			ci.peer = &p
		} else {
			ci.peerErr = err
		}
	}
	return context.WithValue(ctx, connKey{}, ci)
}

func connFrom(ctx context.Context) *connInfo {
	if ci, ok := ctx.Value(connKey{}).(*connInfo); ok {
		return ci
	}
	return &connInfo{} // unknown: treated as TCP, the stricter transport
}

// Auth is the access policy of SPEC §7: who a request comes from and what
// it may do. Its Authenticate method is a Settings.Authenticate.
type Auth struct {
	// Keys holds the hashed keys; nil means none.
	Keys *access.Keyring
	// RequireKeyOnUnix makes the Unix socket require keys like TCP
	// (unix_auth = "key").
	RequireKeyOnUnix bool
	// DaemonUID is the daemon's own uid: its peers get admin, as root does.
	DaemonUID uint32
	// PeerScopes are what other Unix socket peers get (unix_peer_scopes).
	PeerScopes access.Scopes
	// AllowedOrigins are browser origins accepted on TCP besides the
	// request's own host ("http://app.example:3000", or a bare host).
	AllowedOrigins []string
	// AllowedHosts are Host header values accepted on TCP besides loopback
	// names (DNS-rebinding defence).
	AllowedHosts []string
}

// Authenticate implements the policy, in order: credentials in the query
// string are refused (401) whatever the route, but for the one ticket a GET
// stream route may carry, which the router redeems after this; on TCP the Host must be a
// loopback name or an allowed host (421) and a browser Origin must be the
// same host or an allowed origin (403); a bearer key, or on a real
// WebSocket upgrade of a …/ws route the localbus-key subprotocol, must be a
// known key (401);
// a Unix socket peer gets scopes by its uid unless keys are required there.
func (a *Auth) Authenticate(r *http.Request) (Caller, error) {
	if name, found := queryCredential(r); found {
		return Caller{}, errQueryCredential(name)
	}
	ci := connFrom(r.Context())
	var c Caller
	if ci.unix {
		c.Peer = ci.peer
	} else {
		if !a.hostAllowed(r.Host) {
			return Caller{}, errorf(http.StatusMisdirectedRequest, wire.CodeHostNotAllowed, "the Host header %q names no address this daemon serves: use 127.0.0.1 or localhost, or add it to allowed_hosts", shorten(r.Host))
		}
		if origin := r.Header.Get("Origin"); origin != "" && !a.originAllowed(origin, r.Host) {
			return Caller{}, errorf(http.StatusForbidden, wire.CodeOriginNotAllowed, "the Origin header %q is not allowed: serve the page from the daemon's own address, or add the origin to allowed_origins", shorten(origin))
		}
	}

	key, present, err := access.BearerToken(r.Header)
	if err != nil {
		return Caller{}, errorf(http.StatusUnauthorized, wire.CodeInvalidCredentials, "malformed Authorization header: want Bearer <key>")
	}
	// The subprotocol key authenticates only the upgrade of a WebSocket
	// route: Upgrade headers on any other route (REST, /metrics) change
	// nothing (SPEC §7).
	if !present && access.IsWebSocketUpgrade(r) && isWebSocketRoute(r.URL.Path) {
		key, present = access.SubprotocolKey(r.Header)
	}
	if present {
		var info access.KeyInfo
		ok := false
		if a.Keys != nil {
			info, ok = a.Keys.Lookup(key)
		}
		if !ok {
			return Caller{}, errorf(http.StatusUnauthorized, wire.CodeInvalidCredentials, "unknown or revoked key")
		}
		c.Authenticated, c.KeyName, c.Scopes = true, info.Name, info.Scopes
		c.Share = share.Key(info.Name)
	}
	if ci.unix && !a.RequireKeyOnUnix && ci.peer != nil {
		c.Authenticated = true
		c.Scopes = c.Scopes.Union(access.PeerScopes(*ci.peer, a.DaemonUID, a.PeerScopes))
	}
	if ci.peer != nil {
		// A socket peer is its uid, whatever key it sends.
		c.Share = sharePeer(*ci.peer, a.DaemonUID)
	}
	return c, nil
}

// sharePeer returns who a Unix socket peer is for fair shares: root and
// the daemon's own uid draw on the whole of every pool, as they get admin
// (access.PeerScopes); any other uid is its own peer.
func sharePeer(p access.Peer, daemonUID uint32) share.Peer {
	if p.UID == 0 || p.UID == daemonUID {
		return share.Privileged
	}
	return share.UID(p.UID)
}

// hostAllowed reports whether a Host header names a loopback host or one of
// AllowedHosts.
func (a *Auth) hostAllowed(hostport string) bool {
	host := hostOnly(hostport)
	if isLoopbackName(host) {
		return true
	}
	for _, h := range a.AllowedHosts {
		if strings.EqualFold(h, host) || strings.EqualFold(h, hostport) {
			return true
		}
	}
	return false
}

// originAllowed reports whether a browser Origin may use this daemon: the
// same host as the request (a page the daemon's own address served), or an
// allowed origin.
func (a *Auth) originAllowed(origin, reqHost string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	if strings.EqualFold(u.Host, reqHost) {
		return true
	}
	return originListed(a.AllowedOrigins, origin)
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}

func isLoopbackName(host string) bool {
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
