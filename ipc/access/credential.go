package access

import (
	"errors"
	"net/http"
	"strings"

	"github.com/localbus/localbus/ipc/wire"
)

// Errors of [BearerToken]. None of them, nor any error of this package,
// carries any part of a credential: a header that holds a bare key with no
// scheme is still reported without it.
var (
	ErrAuthMultiple  = errors.New("access: more than one Authorization header")
	ErrAuthScheme    = errors.New("access: authorization scheme is not Bearer")
	ErrAuthMalformed = errors.New("access: malformed bearer credentials")
)

// BearerToken returns the token of an "Authorization: Bearer <token>"
// header (RFC 6750 §2.1). present reports whether any Authorization header
// was sent; when it is false, token is "" and err is nil, and the caller
// decides whether credentials were required.
//
// The scheme is matched case-insensitively. Then comes one or more spaces
// and exactly one token of token68 characters (letters, digits and
// "-._~+/", then optional "=" padding); white space around the whole value
// is ignored. Anything else is an error, which the router answers with 401:
// more than one Authorization header ([ErrAuthMultiple]), another scheme
// ([ErrAuthScheme]), an empty value or token, extra parts or other
// characters ([ErrAuthMalformed]). The error never includes the token.
func BearerToken(h http.Header) (token string, present bool, err error) {
	vals := h.Values("Authorization")
	switch len(vals) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", true, ErrAuthMultiple
	}
	v := strings.Trim(vals[0], " \t")
	scheme, rest, _ := strings.Cut(v, " ")
	if scheme == "" {
		return "", true, ErrAuthMalformed
	}
	if !strings.EqualFold(scheme, "Bearer") {
		if strings.ContainsAny(scheme, "\t") || !isToken(scheme) {
			// Not a scheme at all: perhaps a bare key. Do not call it one.
			return "", true, ErrAuthMalformed
		}
		return "", true, ErrAuthScheme
	}
	token = strings.TrimLeft(rest, " ")
	if !isToken68(token) {
		return "", true, ErrAuthMalformed
	}
	return token, true, nil
}

// isToken68 reports whether s is a non-empty token68 (RFC 9110 §11.2):
// 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
func isToken68(s string) bool {
	i := 0
	for i < len(s) && isToken68Char(s[i]) {
		i++
	}
	if i == 0 {
		return false
	}
	for i < len(s) && s[i] == '=' {
		i++
	}
	return i == len(s)
}

func isToken68Char(c byte) bool {
	return isAlnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/'
}

// isToken reports whether s is a non-empty RFC 9110 token (tchar only).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// The WebSocket subprotocols that carry a key from a browser, which cannot
// set an Authorization header on a WebSocket (SPEC §7). The client offers
// both "localbus-key.<key>" and "localbus-key"; the server selects
// SubprotocolName, never the one that holds the key.
const (
	SubprotocolName      = wire.Subprotocol
	SubprotocolKeyPrefix = SubprotocolName + "."
)

// SubprotocolKey returns the key a browser put in the WebSocket subprotocol
// list: the Sec-WebSocket-Protocol headers (one or several lines, each a
// comma-separated list) must offer exactly one "localbus-key.<key>" and also
// "localbus-key" itself, which is what the server selects (RFC 6455 §4.2.2).
// The key must be non-empty and made of letters, digits and "-._~+". Names
// are compared case-sensitively, as RFC 6455 requires. ok is false if
// any of this does not hold.
//
// The router must call SubprotocolKey only for a real upgrade request (see
// [IsWebSocketUpgrade]: GET with "Upgrade: websocket" and "Connection:
// upgrade"). Otherwise the header would become a second way to authenticate
// REST requests, one that browsers let any page set without a preflight.
func SubprotocolKey(h http.Header) (key string, ok bool) {
	offered := false
	n := 0
	for _, line := range h.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(line, ",") {
			p = strings.Trim(p, " \t")
			if p == SubprotocolName {
				offered = true
				continue
			}
			if k, found := strings.CutPrefix(p, SubprotocolKeyPrefix); found {
				key = k
				n++
			}
		}
	}
	if !offered || n != 1 || !isSubprotocolKey(key) {
		return "", false
	}
	return key, true
}

// isSubprotocolKey reports whether k is non-empty and every byte is one of
// the token68 characters that are also tchar (no "/" and no "=").
func isSubprotocolKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !isAlnum(c) && c != '-' && c != '.' && c != '_' && c != '~' && c != '+' {
			return false
		}
	}
	return true
}

// IsWebSocketUpgrade reports whether r asks for a WebSocket upgrade: method
// GET, an Upgrade header listing "websocket" and a Connection header listing
// "upgrade" (tokens compared case-insensitively). Only then may the router
// look at [SubprotocolKey].
func IsWebSocketUpgrade(r *http.Request) bool {
	return r.Method == http.MethodGet &&
		headerHasToken(r.Header, "Connection", "upgrade") &&
		headerHasToken(r.Header, "Upgrade", "websocket")
}

// headerHasToken reports whether any line of the named header, read as a
// comma-separated list, holds token (case-insensitive).
func headerHasToken(h http.Header, name, token string) bool {
	for _, line := range h.Values(name) {
		for _, p := range strings.Split(line, ",") {
			if strings.EqualFold(strings.Trim(p, " \t"), token) {
				return true
			}
		}
	}
	return false
}
