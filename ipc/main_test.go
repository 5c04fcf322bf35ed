package ipc_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"go.uber.org/goleak"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/ipc/ipctest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds every wait in these tests.
const wait = ipctest.Wait

// testCtx returns a context that ends after wait or with the test.
func testCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	tb.Cleanup(cancel)
	return ctx
}

// header builds an http.Header from name, value pairs.
func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h[http.CanonicalHeaderKey(kv[i])] = append(h[http.CanonicalHeaderKey(kv[i])], kv[i+1])
	}
	return h
}

// data decodes an envelope's data into T.
func data[T any](tb testing.TB, env bus.Envelope) T {
	tb.Helper()
	var v T
	if err := json.Unmarshal(env.Data, &v); err != nil {
		tb.Fatalf("data of %s %s: %v", env.Type, env.Data, err)
	}
	return v
}

// ev is an event to publish; data is raw JSON, "" for none.
func ev(typ, data string) ipctest.Event { return ipctest.Event{Type: typ, Data: data} }

// hubOpts are the hub options of the daemon's defaults: auto-create on.
func hubOpts() hub.Options { return hub.Options{AutoCreate: true} }

// newServer starts a server with the daemon's defaults.
func newServer(tb testing.TB) *ipctest.Server {
	return ipctest.New(tb, ipctest.Options{Hub: hubOpts()})
}

// createSession creates a session over REST and fails the test unless it
// gets 201.
func createSession(tb testing.TB, srv *ipctest.Server, id string) {
	tb.Helper()
	r := srv.Do(tb, http.MethodPost, "/api/v1/sessions", nil, []byte(`{"id":"`+id+`"}`))
	if r.Status != http.StatusCreated {
		tb.Fatalf("create session %s = %d %s, want 201", id, r.Status, r.Body)
	}
}

// lastID returns a session's lastId as the hub has it.
func lastID(tb testing.TB, srv *ipctest.Server, id string) uint64 {
	tb.Helper()
	s, ok := srv.Hub.Session(id)
	if !ok {
		tb.Fatalf("no session %s", id)
	}
	return s.Bus.LastID()
}

// seq returns the ids from..to.
func seq(from, to uint64) []uint64 {
	var out []uint64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// expectSSE reads n envelopes and checks their types.
func expectSSE(tb testing.TB, st *ipctest.SSE, want ...string) []bus.Envelope {
	tb.Helper()
	var got []bus.Envelope
	for range want {
		got = append(got, st.MustNext(tb))
	}
	if !slices.Equal(bustest.Types(got), want) {
		tb.Fatalf("SSE frames = %v, want %v", bustest.Types(got), want)
	}
	return got
}
