package access

import (
	"net/url"
	"strings"
)

// QueryCredential reports whether the raw query string of a request (the
// part after "?", as in url.URL.RawQuery) carries something that looks like
// a credential: a parameter whose name looks like one, or a name or value
// that holds a localbus key (SPEC §7: credentials never travel in the query
// string). The router refuses such a request with 401, whatever its route.
//
// A name looks like a credential when, lowercased and with every character
// other than a-z and 0-9 dropped (so "-", "_", ".", "[" and the like do not
// matter), it contains one of key, token, auth, bearer, pass, pwd, secret,
// jwt, cred, sessionid, sessid or ticket, or is exactly pw. That covers key,
// token, access_token, accessToken, api_key, API-KEY, apikey, X-Api-Key,
// auth, auth_token, authorization, private_token, session_token, password,
// passwd, client_secret, jwt, credentials, ticket and so on. A browser's
// ticket is allowed on GET stream routes only: the router takes it out
// with [SplitTicket] first and examines the rest. The API's own
// parameters (since, epoch, maxQueued, types) contain none of them. The
// net is wide on purpose: a false alarm costs a 401 on a parameter the API
// does not use, a miss costs a leaked secret.
//
// Parsing is lenient so that nothing slips through an odd encoding:
// parameters are split on "&" and on ";", and each name is examined raw,
// with "+" read as a space, and percent-decoded (repeatedly, for double
// encoding, and leniently: a malformed escape is kept as is rather than
// failing the whole name).
//
// name is the offending parameter's name, for the log line and the error
// message; the value is never returned. The name is cut at the first
// character outside [A-Za-z0-9._-] (so an encoded "=" cannot smuggle a
// value into it) and to 64 bytes, and replaced by "(redacted)" when the
// name itself holds a localbus key. found is false and name "" when
// nothing looks like a credential.
func QueryCredential(rawQuery string) (name string, found bool) {
	if rawQuery == "" {
		return "", false
	}
	for _, piece := range strings.Split(rawQuery, "&") {
		if piece == "" {
			continue
		}
		// Some servers and proxies also split on ";"; examine the piece
		// both whole and split, so either reading is covered.
		parts := []string{piece}
		if strings.Contains(piece, ";") {
			parts = append(parts, strings.Split(piece, ";")...)
		}
		for _, part := range parts {
			rawName, rawValue, _ := strings.Cut(part, "=")
			names := decodings(rawName)
			// Log the most decoded form: "acc%65ss_token" reads as
			// "access_token", and logName stops at a decoded "=".
			decoded := names[len(names)-1]
			for _, n := range names {
				if looksLikeKey(n) {
					return "(redacted)", true
				}
				if credentialName(n) {
					return logName(decoded), true
				}
			}
			for _, v := range decodings(rawValue) {
				if looksLikeKey(v) {
					return logName(decoded), true
				}
			}
		}
	}
	return "", false
}

// QueryValuesCredential is [QueryCredential] for already parsed values,
// for callers that no longer have the raw query. It examines each name and
// value as given (no further decoding).
func QueryValuesCredential(q url.Values) (name string, found bool) {
	for n, vs := range q {
		if looksLikeKey(n) {
			return "(redacted)", true
		}
		if credentialName(n) {
			return logName(n), true
		}
		for _, v := range vs {
			if looksLikeKey(v) {
				return logName(n), true
			}
		}
	}
	return "", false
}

// maxDecodeRounds bounds the repeated percent-decoding of one name.
const maxDecodeRounds = 4

// decodings returns s raw, with "+" as space, and percent-decoded up to
// maxDecodeRounds times, leniently.
func decodings(s string) []string {
	out := []string{s}
	if plus := strings.ReplaceAll(s, "+", " "); plus != s {
		out = append(out, plus)
	}
	cur := s
	for range maxDecodeRounds {
		next := decodeLenient(cur)
		if next == cur {
			break
		}
		out = append(out, next)
		cur = next
	}
	return out
}

// decodeLenient decodes "+" as space and every well-formed %XX escape,
// keeping malformed escapes as they are.
func decodeLenient(s string) string {
	if !strings.ContainsAny(s, "%+") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '+':
			b.WriteByte(' ')
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// credentialWords are searched for in a normalized name (see
// normalizeName). "pass" covers password, passwd and passphrase; "cred"
// covers credential(s) and creds; "key" covers apikey, x-api-key and
// private_key; "token" every kind of token.
var credentialWords = []string{
	"key", "token", "auth", "bearer", "pass", "pwd", "secret", "jwt", "cred",
	"sessionid", "sessid", "ticket",
}

// credentialExact are normalized names that are credentials only on their
// own: as substrings they would match far too much.
var credentialExact = []string{"pw"}

// credentialName reports whether the parameter name n looks like a
// credential.
func credentialName(n string) bool {
	norm := normalizeName(n)
	for _, w := range credentialWords {
		if strings.Contains(norm, w) {
			return true
		}
	}
	for _, w := range credentialExact {
		if norm == w {
			return true
		}
	}
	return false
}

// normalizeName lowercases the ASCII letters of n and drops every byte that
// is not then a-z or 0-9.
func normalizeName(n string) string {
	var b strings.Builder
	b.Grow(len(n))
	for i := 0; i < len(n); i++ {
		c := n[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// logName cuts n at the first byte outside [A-Za-z0-9._-] and to 64 bytes.
func logName(n string) string {
	const max = 64
	i := 0
	for i < len(n) && i < max && (isAlnum(n[i]) || n[i] == '.' || n[i] == '_' || n[i] == '-') {
		i++
	}
	if i == 0 {
		return "(unprintable)"
	}
	return n[:i]
}
