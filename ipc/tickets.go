package ipc

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/share"
	"github.com/localbus/localbus/ipc/access"
	"github.com/localbus/localbus/ipc/wire"
)

// Browsers (SPEC §7): an EventSource cannot send an Authorization header,
// so a page asks POST /api/v1/tickets, with its key, for a single-use
// ticket and opens the stream with ?ticket=…; the daemon answers CORS for
// the origins in allowed_origins on that route and the GET stream routes.

// streamRoute returns the GET stream route (SSE or WebSocket) whose
// pattern p matches, if any.
func streamRoute(p string) (route, bool) {
	return findRoute(p, isStream)
}

// isStream reports whether rt is a stream route.
func isStream(rt route) bool { return rt.kind != routeREST }

// requestTicket returns the ?ticket= of a GET (or its preflight) on a
// stream route, and the query string without it; ok is false on any other
// request, whose ticket parameter is then refused like any credential in
// a query string.
func requestTicket(r *http.Request) (ticket, rest string, ok bool) {
	if r.Method != http.MethodGet && r.Method != http.MethodOptions {
		return "", r.URL.RawQuery, false
	}
	if _, isStream := streamRoute(r.URL.Path); !isStream {
		return "", r.URL.RawQuery, false
	}
	return access.SplitTicket(r.URL.RawQuery)
}

// queryCredential is access.QueryCredential applied to r's query string
// without the one ticket a stream route may carry.
func queryCredential(r *http.Request) (name string, found bool) {
	_, rest, _ := requestTicket(r)
	return access.QueryCredential(rest)
}

// errQueryCredential refuses a credential in the query string (SPEC §7).
func errQueryCredential(name string) *Error {
	return errorf(http.StatusUnauthorized, wire.CodeCredentialsInQuery,
		"credentials are never accepted in the query string (parameter %q; a ticket only on GET stream routes); send Authorization: Bearer <key>", name)
}

// redeemTicket authenticates a GET stream request by its ticket, if it
// carries one: the caller is then the ticket's holder, with the ticket's
// scopes and nothing else. ok is false when r has no ticket.
func (h *Handler) redeemTicket(r *http.Request) (c Caller, ok bool, err error) {
	if r.Method != http.MethodGet {
		return Caller{}, false, nil
	}
	t, _, ok := requestTicket(r)
	if !ok {
		return Caller{}, false, nil
	}
	g, err := h.tickets.Redeem(t, r.URL.Path)
	if err != nil {
		return Caller{}, true, errorf(http.StatusUnauthorized, wire.CodeInvalidTicket,
			"the ticket is unknown, used, expired or for another path: get a new one (POST %s)", wire.PathTickets)
	}
	return Caller{Authenticated: true, Scopes: g.Scopes, KeyName: g.KeyName, Share: g.Peer}, true, nil
}

// maxTicketBody bounds a ticket request's body.
const maxTicketBody = 16 << 10

// serveTicket issues a ticket for one GET stream route, with at most the
// caller's scopes (POST /api/v1/tickets).
func (h *Handler) serveTicket(w http.ResponseWriter, r *http.Request, c Caller) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxTicketBody))
	if err != nil {
		writeError(w, err)
		return
	}
	var req wire.TicketRequest
	if err := decodeStrict(body, &req); err != nil {
		writeError(w, errorf(http.StatusBadRequest, wire.CodeInvalidBody, `want {"path": string, "scopes"?: [string]}: %v`, err))
		return
	}
	p, rt, err := ticketPath(req.Path)
	if err != nil {
		writeError(w, err)
		return
	}
	scopes := c.Scopes
	if len(req.Scopes) > 0 {
		scopes, err = access.ParseScopes(req.Scopes)
		if err != nil {
			writeError(w, errorf(http.StatusBadRequest, wire.CodeInvalidScopes, "scopes: %v", err))
			return
		}
		for _, sc := range scopes.List() {
			if !c.Scopes.Includes(sc) {
				writeError(w, errorf(http.StatusForbidden, wire.CodeForbidden, "a ticket carries at most the caller's scopes, and this caller does not hold %s", sc))
				return
			}
		}
	}
	// A ticket that could not open its stream is refused now, not at use.
	probe := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: p}}
	if fam, ok := patternValue(rt.pattern, p, "family"); ok {
		probe.SetPathValue("family", fam)
	}
	if _, err := rt.scope.check(Caller{Authenticated: true, Scopes: scopes}, probe); err != nil {
		e := asError(err)
		if e.Status == http.StatusForbidden {
			e = errorf(http.StatusForbidden, wire.CodeForbidden, "a ticket with scopes %s may not open %s", scopes, p)
		}
		writeError(w, e)
		return
	}
	t, exp, err := h.tickets.Issue(access.Grant{Path: p, Scopes: scopes, KeyName: c.KeyName, Peer: c.Share})
	if errors.Is(err, access.ErrTicketLimit) {
		e := errorf(http.StatusTooManyRequests, wire.CodeTicketLimit, "too many tickets are outstanding; use or let expire the ones issued")
		if errors.As(err, &e.refusal) && e.refusal.Kind == share.ByShare {
			e.Message = fmt.Sprintf("this peer holds its share of the outstanding tickets (%d, peer_share); use or let expire the ones it was issued", e.refusal.Limit)
		}
		err = e
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.TicketReply{Ticket: t, ExpiresAt: exp.UTC()})
}

// ticketPath checks the path of a ticket request: a clean, absolute path
// (percent-encoding allowed, no query, no host) of a GET stream route with
// a valid session id or family. It returns the decoded path, which the
// stream request's URL.Path must equal, and its route.
func ticketPath(raw string) (string, route, error) {
	bad := func(format string, args ...any) (string, route, error) {
		return "", route{}, errorf(http.StatusBadRequest, wire.CodeInvalidPath, "path: "+format, args...)
	}
	if raw == "" {
		return bad("required: the stream route the ticket opens, e.g. %s", wire.SessionEventsPath("ID"))
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return bad("want an absolute path like %s, not a URL", wire.SessionEventsPath("ID"))
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(raw, "#") {
		return bad("no query string or fragment: the ticket is for the path; add ?ticket= and any other parameter when opening it")
	}
	p := u.Path
	if !strings.HasPrefix(p, "/") || path.Clean(p) != p {
		return bad("%q is not a clean absolute path", shorten(p))
	}
	rt, ok := streamRoute(p)
	if !ok {
		return bad("%q is not a GET stream route (…/events or …/ws of a session, a family or the global bus)", shorten(p))
	}
	if id, ok := patternValue(rt.pattern, p, "id"); ok {
		if _, err := bus.ParseSessionID(id); err != nil {
			return "", route{}, err
		}
	}
	if fam, ok := patternValue(rt.pattern, p, "family"); ok {
		if _, err := bus.ParseFamily(fam); err != nil {
			return "", route{}, err
		}
	}
	return p, rt, nil
}
