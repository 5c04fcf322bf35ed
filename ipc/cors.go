package ipc

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/localbus/localbus/ipc/wire"
)

// corsRoute reports whether p is a route the daemon answers CORS on (the
// cors column of the route table), and the methods a preflight may ask.
func corsRoute(p string) (methods string, ok bool) {
	rt, ok := findRoute(p, func(rt route) bool { return rt.cors })
	if !ok {
		return "", false
	}
	return rt.method + ", OPTIONS", true
}

// corsAllowHeaders are the request headers a page may send on the CORS
// routes.
const corsAllowHeaders = "Authorization, Content-Type, " + wire.HeaderLastEventID + ", " + wire.HeaderEpoch

// cors adds the CORS headers of SPEC §7 to the response of a request from
// an origin listed in AllowedOrigins on a CORS route, and reports whether
// r is a preflight (OPTIONS with Access-Control-Request-Method) that the
// caller must answer with answerPreflight. Any other origin or route gets
// no CORS header.
func (h *Handler) cors(w http.ResponseWriter, r *http.Request) (preflight bool) {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	methods, ok := corsRoute(r.URL.Path)
	if !ok || !validOrigin(origin) || !originListed(h.options().AllowedOrigins, origin) {
		return false
	}
	hd := w.Header()
	hd.Set("Access-Control-Allow-Origin", origin)
	hd.Add("Vary", "Origin")
	if r.Method != http.MethodOptions || r.Header.Get("Access-Control-Request-Method") == "" {
		return false
	}
	hd.Add("Vary", "Access-Control-Request-Method")
	hd.Add("Vary", "Access-Control-Request-Headers")
	hd.Set("Access-Control-Allow-Methods", methods)
	hd.Set("Access-Control-Allow-Headers", corsAllowHeaders)
	hd.Set("Access-Control-Max-Age", "600")
	return true
}

// answerPreflight ends a CORS preflight the cors method accepted.
func answerPreflight(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

// validOrigin reports whether origin is a serialized origin:
// scheme://host[:port] and nothing more.
func validOrigin(origin string) bool {
	u, err := url.Parse(origin)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" &&
		u.Path == "" && u.RawQuery == "" && u.Fragment == "" && u.User == nil
}

// originListed reports whether origin is in list, which holds origins
// ("http://app.example:3000") or bare hosts ("app.example:3000"), compared
// case-insensitively.
func originListed(list []string, origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	return slices.ContainsFunc(list, func(o string) bool {
		return strings.EqualFold(o, origin) || strings.EqualFold(o, u.Host)
	})
}
