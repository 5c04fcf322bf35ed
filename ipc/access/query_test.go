package access

import (
	"net/url"
	"strings"
	"testing"
)

func TestQueryCredentialFlagsCredentialNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw, name string
	}{
		{"key=v", "key"},
		{"token=v", "token"},
		{"access_token=v", "access_token"},
		{"accessToken=v", "accessToken"},
		{"ACCESS-TOKEN=v", "ACCESS-TOKEN"},
		{"api_key=v", "api_key"},
		{"API_KEY=v", "API_KEY"},
		{"apikey=v", "apikey"},
		{"api-key=v", "api-key"},
		{"apiKey=v", "apiKey"},
		{"x-api-key=v", "x-api-key"},
		{"X-Api-Key=v", "X-Api-Key"},
		{"auth=v", "auth"},
		{"Auth=v", "Auth"},
		{"auth_token=v", "auth_token"},
		{"authorization=v", "authorization"},
		{"Authorization=Bearer+x", "Authorization"},
		{"bearer=v", "bearer"},
		{"password=v", "password"},
		{"Passwd=v", "Passwd"},
		{"pwd=v", "pwd"},
		{"pw=v", "pw"},
		{"pass=v", "pass"},
		{"passphrase=v", "passphrase"},
		{"secret=v", "secret"},
		{"client_secret=v", "client_secret"},
		{"jwt=v", "jwt"},
		{"session_token=v", "session_token"},
		{"sessionToken=v", "sessionToken"},
		{"private_token=v", "private_token"},
		{"id_token=v", "id_token"},
		{"refresh_token=v", "refresh_token"},
		{"credentials=v", "credentials"},
		{"creds=v", "creds"},
		{"sessionid=v", "sessionid"},
		{"PHPSESSID=v", "PHPSESSID"},
		{"localbus_key=v", "localbus_key"},
		{"localbus.key=v", "localbus.key"},
		{"k.e.y=v", "k.e.y"},
		{"to_ken=v", "to_ken"},
		{"auth[token]=v", "auth"},
		{"key", "key"},      // no value at all
		{"token=", "token"}, // empty value
		{"KEY=v", "KEY"},    // case
		{"oauth_token=v", "oauth_token"},
		// Among the API's own parameters, in any position.
		{"since=4&token=v", "token"},
		{"types=a:b&epoch=e&maxQueued=64&api_key=v", "api_key"},
		// Encodings.
		{"%74oken=v", "token"},
		{"%2574oken=v", "token"},   // double encoded
		{"%252574oken=v", "token"}, // triple encoded
		{"acc%65ss_token=v", "access_token"},
		{"api%5Fkey=v", "api_key"},
		{"api+key=v", "api"}, // "+" is a space
		{"api%20key=v", "api"},
		{"token%zz=v", "token"},
		{"%zz&token=v", "token"}, // malformed escape in another parameter
		{"a=%zz&key=v", "key"},
		{"since=1;token=v", "token"}, // semicolon separator
		{"token;since=1", "token"},
		{"to%3Bken=v", "to"},             // encoded semicolon inside the name
		{"token%3Dsecretvalue", "token"}, // encoded "=": the value stays out of the name
		{"a=1&&token=v", "token"},
		{"&&token", "token"},
		{"t%00oken=v", "t"},
	}
	for _, tt := range tests {
		name, found := QueryCredential(tt.raw)
		if !found || name != tt.name {
			t.Errorf("QueryCredential(%q) = %q, %v; want %q, true", tt.raw, name, found, tt.name)
		}
	}
}

func TestQueryCredentialFlagsKeysAnywhere(t *testing.T) {
	t.Parallel()
	key, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		raw, name string
	}{
		{"since=" + key, "since"},
		{"types=a:b," + key, "types"},
		{"x=" + url.QueryEscape("Bearer "+key), "x"},
		{"x=" + strings.ReplaceAll(url.QueryEscape(key), "_", "%5F"), "x"},
		{key, "(redacted)"},
		{key + "=1", "(redacted)"},
		{"a%3D" + key, "(redacted)"},
	}
	for _, tt := range tests {
		name, found := QueryCredential(tt.raw)
		if !found || name != tt.name {
			t.Errorf("QueryCredential(%q) = %q, %v; want %q, true", tt.raw, name, found, tt.name)
		}
		if strings.Contains(name, key[len(KeyPrefix):len(KeyPrefix)+8]) {
			t.Errorf("QueryCredential(%q) returned part of the key in %q", tt.raw, name)
		}
	}
}

func TestQueryCredentialAllowsAPIParameters(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"",
		"since=42",
		"since=0&epoch=01J8ZQ5VZ6F4W3M5&maxQueued=64",
		"types=build:step,build:*",
		"types=auth:login,token:issued", // families named like credentials are values, not names
		"epoch=key",                     // a credential word as a value is not a name
		"maxQueued=2048&since=007",
		"MAXQUEUED=16",
		"lastEventId=5&r=0.123", // EventSource polyfills
		"session=abc&family=ci", // harmless extras
		"since=1&since=2",
		"&&&",
		"=",
		"=token",
		"%zz",
	} {
		if name, found := QueryCredential(raw); found {
			t.Errorf("QueryCredential(%q) = %q, true; want not found", raw, name)
		}
	}
}

func TestQueryValuesCredential(t *testing.T) {
	t.Parallel()
	key, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		q     url.Values
		name  string
		found bool
	}{
		{url.Values{"since": {"1"}, "types": {"a:b"}}, "", false},
		{url.Values{"accessToken": {"x"}}, "accessToken", true},
		{url.Values{"since": {key}}, "since", true},
		{url.Values{key: {""}}, "(redacted)", true},
	}
	for _, tt := range tests {
		name, found := QueryValuesCredential(tt.q)
		if name != tt.name || found != tt.found {
			t.Errorf("QueryValuesCredential(%v) = %q, %v; want %q, %v", tt.q, name, found, tt.name, tt.found)
		}
	}
}
