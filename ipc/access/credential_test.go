package access

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestBearerToken(t *testing.T) {
	t.Parallel()
	const key = "lb_AbC-12_xyz"
	tests := []struct {
		name    string
		values  []string // Authorization header lines; nil means absent
		token   string
		present bool
		err     error
	}{
		{"absent", nil, "", false, nil},
		{"bearer", []string{"Bearer " + key}, key, true, nil},
		{"lowercase scheme", []string{"bearer " + key}, key, true, nil},
		{"uppercase scheme", []string{"BEARER " + key}, key, true, nil},
		{"several spaces", []string{"Bearer   " + key}, key, true, nil},
		{"surrounding space", []string{"  Bearer " + key + " \t"}, key, true, nil},
		{"token68 chars", []string{"Bearer a.b~c+d/e=="}, "a.b~c+d/e==", true, nil},
		{"empty value", []string{""}, "", true, ErrAuthMalformed},
		{"blank value", []string{"   "}, "", true, ErrAuthMalformed},
		{"scheme only", []string{"Bearer"}, "", true, ErrAuthMalformed},
		{"scheme and space", []string{"Bearer "}, "", true, ErrAuthMalformed},
		{"two tokens", []string{"Bearer " + key + " extra"}, "", true, ErrAuthMalformed},
		{"tab separator", []string{"Bearer\t" + key}, "", true, ErrAuthMalformed},
		{"comma", []string{"Bearer " + key + ", Basic x"}, "", true, ErrAuthMalformed},
		{"quoted", []string{`Bearer "` + key + `"`}, "", true, ErrAuthMalformed},
		{"padding inside", []string{"Bearer ab=cd"}, "", true, ErrAuthMalformed},
		{"only padding", []string{"Bearer =="}, "", true, ErrAuthMalformed},
		{"non-ascii", []string{"Bearer ké"}, "", true, ErrAuthMalformed},
		{"control char", []string{"Bearer a\x00b"}, "", true, ErrAuthMalformed},
		{"basic", []string{"Basic dXNlcjpwYXNz"}, "", true, ErrAuthScheme},
		{"token scheme", []string{"Token " + key}, "", true, ErrAuthScheme},
		{"bare key", []string{key}, "", true, ErrAuthScheme},
		{"bare weird key", []string{"lb_abc/def=="}, "", true, ErrAuthMalformed},
		{"bearer prefix word", []string{"Bearerx " + key}, "", true, ErrAuthScheme},
		{"two headers", []string{"Bearer " + key, "Bearer " + key}, "", true, ErrAuthMultiple},
		{"two headers one empty", []string{"Bearer " + key, ""}, "", true, ErrAuthMultiple},
	}
	for _, tt := range tests {
		h := http.Header{}
		for _, v := range tt.values {
			h.Add("Authorization", v)
		}
		token, present, err := BearerToken(h)
		if token != tt.token || present != tt.present || !errors.Is(err, tt.err) {
			t.Errorf("%s: BearerToken(%q) = %q, %v, %v; want %q, %v, %v",
				tt.name, tt.values, token, present, err, tt.token, tt.present, tt.err)
		}
		if err != nil && strings.Contains(err.Error(), key) {
			t.Errorf("%s: error %q contains the token", tt.name, err)
		}
	}
}

func TestSubprotocolKey(t *testing.T) {
	t.Parallel()
	const key = "lb_AbC-12_xyz"
	tests := []struct {
		name  string
		lines []string
		key   string
		ok    bool
	}{
		{"absent", nil, "", false},
		{"browser order", []string{"localbus-key." + key + ", localbus-key"}, key, true},
		{"reverse order", []string{"localbus-key, localbus-key." + key}, key, true},
		{"no spaces", []string{"localbus-key." + key + ",localbus-key"}, key, true},
		{"separate lines", []string{"localbus-key." + key, "localbus-key"}, key, true},
		{"among others", []string{"chat, localbus-key." + key, "v2.json,  localbus-key  "}, key, true},
		{"without base protocol", []string{"localbus-key." + key}, "", false},
		{"base protocol only", []string{"localbus-key"}, "", false},
		{"empty key", []string{"localbus-key., localbus-key"}, "", false},
		{"two keys", []string{"localbus-key.a, localbus-key.b, localbus-key"}, "", false},
		{"same key twice", []string{"localbus-key.a, localbus-key.a, localbus-key"}, "", false},
		{"wrong case base", []string{"localbus-key." + key + ", Localbus-Key"}, "", false},
		{"wrong case prefix", []string{"Localbus-Key." + key + ", localbus-key"}, "", false},
		{"slash in key", []string{"localbus-key.a/b, localbus-key"}, "", false},
		{"equals in key", []string{"localbus-key.ab==, localbus-key"}, "", false},
		{"space in key", []string{"localbus-key.a b, localbus-key"}, "", false},
		{"similar name", []string{"localbus-keyx." + key + ", localbus-key"}, "", false},
	}
	for _, tt := range tests {
		h := http.Header{}
		for _, l := range tt.lines {
			h.Add("Sec-WebSocket-Protocol", l)
		}
		key, ok := SubprotocolKey(h)
		if key != tt.key || ok != tt.ok {
			t.Errorf("%s: SubprotocolKey(%q) = %q, %v; want %q, %v", tt.name, tt.lines, key, ok, tt.key, tt.ok)
		}
	}
}

func TestIsWebSocketUpgrade(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		method     string
		upgrade    string
		connection []string
		want       bool
	}{
		{"upgrade", "GET", "websocket", []string{"Upgrade"}, true},
		{"case", "GET", "WebSocket", []string{"upgrade"}, true},
		{"connection list", "GET", "websocket", []string{"keep-alive, Upgrade"}, true},
		{"connection lines", "GET", "websocket", []string{"keep-alive", "Upgrade"}, true},
		{"post", "POST", "websocket", []string{"Upgrade"}, false},
		{"no upgrade", "GET", "", []string{"Upgrade"}, false},
		{"other protocol", "GET", "h2c", []string{"Upgrade"}, false},
		{"no connection", "GET", "websocket", nil, false},
		{"connection close", "GET", "websocket", []string{"close"}, false},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(tt.method, "/api/v1/sessions/s/ws", nil)
		if tt.upgrade != "" {
			r.Header.Set("Upgrade", tt.upgrade)
		}
		for _, c := range tt.connection {
			r.Header.Add("Connection", c)
		}
		if got := IsWebSocketUpgrade(r); got != tt.want {
			t.Errorf("%s: IsWebSocketUpgrade = %v, want %v", tt.name, got, tt.want)
		}
	}
}
