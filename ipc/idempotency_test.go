package ipc_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/localbus/localbus/ipc/ipctest"
	"github.com/localbus/localbus/ipc/wire"
)

// TestIdempotencyKeyRepeatsTheFirstReply sends each kind of publish twice
// with one key: the second gets the first reply byte for byte, marked
// Idempotent-Replayed, and publishes nothing.
func TestIdempotencyKeyRepeatsTheFirstReply(t *testing.T) {
	srv := newServer(t)
	cases := []struct {
		name, ct, query, body string
		chunked               bool
	}{
		{"single", "application/json", "", `{"type":"t:a","data":1}`, false},
		{"batch", "application/json", "", `[{"type":"t:a","data":1},{"type":"t:b","data":2}]`, false},
		{"ndjson", wire.ContentTypeNDJSON, "", "{\"type\":\"t:a\",\"data\":1}\n{\"type\":\"t:b\",\"data\":2}\n", false},
		{"ndjson stream", wire.ContentTypeNDJSON, "?ack=line", "{\"type\":\"t:a\",\"data\":1}\n{\"type\":\"t:b\",\"data\":2}\n", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			session := "idem-" + strings.ReplaceAll(tc.name, " ", "-")
			createSession(t, srv, session)
			send := func() *ipctest.Response {
				t.Helper()
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, ipctest.URL(wire.SessionEventsPath(session)+tc.query), strings.NewReader(tc.body))
				if err != nil {
					t.Fatal(err)
				}
				if tc.chunked {
					req.ContentLength = -1
				}
				req.Header.Set("Content-Type", tc.ct)
				req.Header.Set(wire.HeaderIdempotencyKey, "key-1")
				resp, err := srv.Client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var b bytes.Buffer
				b.ReadFrom(resp.Body)
				return &ipctest.Response{Status: resp.StatusCode, Header: resp.Header, Body: b.Bytes()}
			}
			first := send()
			if first.Status != http.StatusOK || first.Header.Get(wire.HeaderIdempotentReplayed) != "" {
				t.Fatalf("first publish = %d %s (replayed %q), want 200 not replayed", first.Status, first.Body, first.Header.Get(wire.HeaderIdempotentReplayed))
			}
			s, _ := srv.Hub.Session(session)
			last := s.Bus.LastID()
			again := send()
			if again.Status != first.Status || !bytes.Equal(again.Body, first.Body) || again.Header.Get(wire.HeaderIdempotentReplayed) != "true" {
				t.Fatalf("repeat = %d %q (replayed %q), want %d %q replayed", again.Status, again.Body, again.Header.Get(wire.HeaderIdempotentReplayed), first.Status, first.Body)
			}
			if again.Header.Get("Content-Type") != first.Header.Get("Content-Type") {
				t.Errorf("repeat Content-Type = %q, want %q", again.Header.Get("Content-Type"), first.Header.Get("Content-Type"))
			}
			if got := s.Bus.LastID(); got != last {
				t.Errorf("after the repeat the session's last id = %d, want %d: it published again", got, last)
			}
		})
	}
}

// TestIdempotencyKeyWithAnotherBodyIsAConflict: the same key with a
// different body is a 409 that publishes nothing, while other keys and
// sessions carry on.
func TestIdempotencyKeyWithAnotherBodyIsAConflict(t *testing.T) {
	srv := newServer(t)
	createSession(t, srv, "s")
	createSession(t, srv, "other")
	hdr := http.Header{wire.HeaderIdempotencyKey: {"k"}}
	if r := srv.Do(t, http.MethodPost, "/api/v1/sessions/s/events", hdr, []byte(`{"type":"t:a","data":1}`)); r.Status != http.StatusOK {
		t.Fatalf("first publish = %d %s", r.Status, r.Body)
	}
	r := srv.Do(t, http.MethodPost, "/api/v1/sessions/s/events", hdr, []byte(`{"type":"t:a","data":2}`))
	if r.Status != http.StatusConflict {
		t.Fatalf("same key, other body = %d %s, want 409", r.Status, r.Body)
	}
	if body := r.ErrorBody(t); body.Error.Code != wire.CodeIdempotencyKeyReused {
		t.Errorf("code = %q, want %q", body.Error.Code, wire.CodeIdempotencyKeyReused)
	}
	s, _ := srv.Hub.Session("s")
	if s.Bus.LastID() != 1 {
		t.Errorf("last id = %d after the conflict, want 1", s.Bus.LastID())
	}
	// The same key on another session, and another key here, are new.
	if r := srv.Do(t, http.MethodPost, "/api/v1/sessions/other/events", hdr, []byte(`{"type":"t:a","data":2}`)); r.Status != http.StatusOK {
		t.Errorf("same key on another session = %d %s, want 200", r.Status, r.Body)
	}
	if r := srv.Do(t, http.MethodPost, "/api/v1/sessions/s/events", http.Header{wire.HeaderIdempotencyKey: {"k2"}}, []byte(`{"type":"t:a","data":2}`)); r.Status != http.StatusOK {
		t.Errorf("another key = %d %s, want 200", r.Status, r.Body)
	}
	srv.Publish(t, "s", ipctest.Event{Type: "t:a", Data: "3"})
}

// TestIdempotencyKeyOfARefusedPublishIsNotKept: a publish that published
// nothing leaves its key free, so the corrected request goes through.
func TestIdempotencyKeyOfARefusedPublishIsNotKept(t *testing.T) {
	srv := newServer(t)
	createSession(t, srv, "s")
	hdr := http.Header{wire.HeaderIdempotencyKey: {"k"}}
	if r := srv.Do(t, http.MethodPost, "/api/v1/sessions/s/events", hdr, []byte(`{"type":"bad","data":1}`)); r.Status != http.StatusBadRequest {
		t.Fatalf("bad publish = %d %s, want 400", r.Status, r.Body)
	}
	if r := srv.Do(t, http.MethodPost, "/api/v1/sessions/s/events", hdr, []byte(`{"type":"t:a","data":1}`)); r.Status != http.StatusOK || r.Header.Get(wire.HeaderIdempotentReplayed) != "" {
		t.Fatalf("corrected publish = %d %s, want 200 not replayed", r.Status, r.Body)
	}
}

// TestIdempotencyKeyMalformedIsRefused: empty, too long, not printable or
// repeated keys are 400 and publish nothing.
func TestIdempotencyKeyMalformedIsRefused(t *testing.T) {
	srv := newServer(t)
	createSession(t, srv, "s")
	for name, vs := range map[string][]string{
		"empty":      {""},
		"too long":   {strings.Repeat("k", wire.MaxIdempotencyKey+1)},
		"tab":        {"a\tb"},
		"non-ASCII":  {"clé"},
		"two values": {"a", "b"},
	} {
		r := srv.Do(t, http.MethodPost, "/api/v1/sessions/s/events", http.Header{wire.HeaderIdempotencyKey: vs}, []byte(`{"type":"t:a","data":1}`))
		if r.Status != http.StatusBadRequest {
			t.Errorf("%s: status %d %s, want 400", name, r.Status, r.Body)
			continue
		}
		if body := r.ErrorBody(t); body.Error.Code != wire.CodeInvalidIdemKey {
			t.Errorf("%s: code %q, want %q", name, body.Error.Code, wire.CodeInvalidIdemKey)
		}
	}
	if r := srv.Do(t, http.MethodPost, "/api/v1/sessions/s/events", http.Header{wire.HeaderIdempotencyKey: {strings.Repeat("k", wire.MaxIdempotencyKey)}}, []byte(`{"type":"t:a","data":1}`)); r.Status != http.StatusOK {
		t.Errorf("a %d-character key = %d %s, want 200", wire.MaxIdempotencyKey, r.Status, r.Body)
	}
	s, _ := srv.Hub.Session("s")
	if s.Bus.LastID() != 1 {
		t.Errorf("last id = %d, want 1: a refused publish published", s.Bus.LastID())
	}
}

// TestAKeyedNDJSONBodyIsOneUnit publishes a keyed NDJSON body of more
// lines than a batch may hold while another publisher writes to the same
// session: its ids are contiguous, the reply names them, and a bad line
// anywhere publishes nothing and is not remembered.
func TestAKeyedNDJSONBodyIsOneUnit(t *testing.T) {
	srv := newServer(t)
	createSession(t, srv, "unit")
	const lines = 2500
	var body strings.Builder
	for i := range lines {
		fmt.Fprintf(&body, "{\"type\":\"t:a\",\"data\":%d}\n", i)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				srv.Publish(t, "unit", ev("t:b", "1"))
			}
		}
	}()
	send := func(b, key string) *ipctest.Response {
		t.Helper()
		h := http.Header{"Content-Type": {wire.ContentTypeNDJSON}, wire.HeaderIdempotencyKey: {key}}
		return srv.Do(t, http.MethodPost, wire.SessionEventsPath("unit")+"?ack=end", h, []byte(b))
	}
	r := send(body.String(), "big")
	close(stop)
	<-done
	var sr wire.StreamReply
	r.DecodeJSON(t, &sr)
	if r.Status != http.StatusOK || sr.Count != lines || sr.LastID != sr.FirstID+lines-1 {
		t.Fatalf("keyed NDJSON of %d lines = %d %s, want 200 with %d contiguous ids", lines, r.Status, r.Body, lines)
	}
	bad := "{\"type\":\"t:a\",\"data\":1}\n{\"type\":\"t:a\",\"data\":}\n"
	s, _ := srv.Hub.Session("unit")
	last := s.Bus.LastID()
	if r := send(bad, "bad"); r.Status != http.StatusBadRequest {
		t.Fatalf("a keyed NDJSON body with a bad line = %d %s, want 400", r.Status, r.Body)
	}
	if got := s.Bus.LastID(); got != last {
		t.Fatalf("a keyed body with a bad line published %d events", got-last)
	}
	if r := send("{\"type\":\"t:a\",\"data\":1}\n", "bad"); r.Status != http.StatusOK || r.Header.Get(wire.HeaderIdempotentReplayed) != "" {
		t.Fatalf("the key of a refused body, used again = %d %s (replayed %q), want a new publish", r.Status, r.Body, r.Header.Get(wire.HeaderIdempotentReplayed))
	}
}
