package access

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"", "Bearer lb_abc", "bearer a.b~c+d/e==", "Basic x", "Bearer a b", "Bearer\ta", "Bearer x\nBearer y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		// Each line is one Authorization header.
		h := http.Header{}
		var lines []string
		if in != "" {
			lines = strings.Split(in, "\n")
		}
		for _, l := range lines {
			h.Add("Authorization", l)
		}
		token, present, err := BearerToken(h)
		if present != (len(lines) > 0) {
			t.Fatalf("present = %v for %d header lines", present, len(lines))
		}
		if err != nil {
			// Errors are the fixed sentinels, so their text holds nothing
			// of the header.
			if token != "" || !slices.Contains([]error{ErrAuthMultiple, ErrAuthScheme, ErrAuthMalformed}, err) {
				t.Fatalf("BearerToken(%q) = %q, %v; want \"\" and a sentinel", lines, token, err)
			}
			return
		}
		if !present {
			if token != "" {
				t.Fatalf("token %q without a header", token)
			}
			return
		}
		if token == "" || strings.ContainsAny(token, " \t\r\n,\"") || !isToken68(token) {
			t.Fatalf("BearerToken(%q) = %q, not a token68", lines, token)
		}
		if len(lines) != 1 || !strings.HasSuffix(strings.TrimRight(lines[0], " \t"), " "+token) {
			t.Fatalf("BearerToken(%q) = %q, not the last word of the one header", lines, token)
		}
	})
}

// credentialSpellings are normalized names (lowercase, separators dropped)
// that must always be found, checked independently of credentialWords.
var credentialSpellings = []string{
	"key", "token", "accesstoken", "apikey", "xapikey", "auth", "authtoken",
	"authorization", "bearer", "password", "passwd", "secret", "jwt",
	"sessiontoken", "privatetoken", "clientsecret",
}

func FuzzQueryCredential(f *testing.F) {
	for _, s := range []string{
		"", "since=1&epoch=e&maxQueued=64&types=a:b", "token=x", "access_token=x",
		"%74oken=x", "to%zzken=x", "a=%zz&api_key=x", "since=1;token=x", "X-Api-Key=1",
		"token%3Dsecret", "since=lb_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		name, found := QueryCredential(raw)
		if found != (name != "") {
			t.Fatalf("QueryCredential(%q) = %q, %v", raw, name, found)
		}
		if found && name != "(redacted)" && name != "(unprintable)" {
			if len(name) > 64 || strings.ContainsAny(name, "=&;%+ ") {
				t.Fatalf("QueryCredential(%q) returned name %q, not a clean name", raw, name)
			}
		}
		q, _ := url.ParseQuery(raw) // keeps the parameters it could parse
		for k := range q {
			norm := strings.Map(func(r rune) rune {
				switch {
				case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
					return r
				case r >= 'A' && r <= 'Z':
					return r + 'a' - 'A'
				}
				return -1
			}, k)
			if slices.Contains(credentialSpellings, norm) || strings.Contains(norm, "token") {
				if !found {
					t.Fatalf("QueryCredential(%q) missed parameter %q", raw, k)
				}
				if _, ok := QueryValuesCredential(q); !ok {
					t.Fatalf("QueryValuesCredential(%v) missed parameter %q", q, k)
				}
			}
		}
	})
}

func FuzzParseScope(f *testing.F) {
	for _, s := range []string{"admin", "read", "publish", "read:build", "publish:ci", "read:localbus", "publish:stream", "read:", "Read", "read:a:b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		sc, err := ParseScope(in)
		if err != nil {
			if sc != "" || !errors.Is(err, ErrInvalidScope) {
				t.Fatalf("ParseScope(%q) = %q, %v", in, sc, err)
			}
			return
		}
		if string(sc) != in || !sc.Valid() {
			t.Fatalf("ParseScope(%q) = %q", in, sc)
		}
		set := NewScopes(sc)
		if got := set.String(); got != in {
			t.Fatalf("NewScopes(%q).String() = %q", in, got)
		}
		if !set.Includes(sc) || !NewScopes(Admin).Includes(sc) {
			t.Fatalf("%q is not included by itself or by admin", in)
		}
		if fam := sc.Family(); strings.Contains(in, ":") != (fam != "") || (fam != "" && !validFamily(fam)) {
			t.Fatalf("ParseScope(%q).Family() = %q", in, fam)
		}
		if strings.HasPrefix(in, "publish:") && reservedFamily(sc.Family()) {
			t.Fatalf("ParseScope accepted reserved %q", in)
		}
	})
}
