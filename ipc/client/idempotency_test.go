package client_test

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"

	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/ipc"
	"github.com/localbus/localbus/ipc/client"
	"github.com/localbus/localbus/ipc/ipctest"
	"github.com/localbus/localbus/ipc/wire"
)

// TestPublishRetriesADroppedConnectionOnce: the daemon publishes, then the
// connection drops before the reply (as when a daemon shutting down closes
// it). The client sends the publish again with the same Idempotency-Key
// and gets the first reply; the event is published once.
func TestPublishRetriesADroppedConnectionOnce(t *testing.T) {
	h, err := hub.New(hub.Options{AutoCreate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	router := ipc.New(ipc.Options{Hub: h, Logger: slog.New(slog.DiscardHandler), Settings: ipc.Settings{Authenticate: ipctest.AllowAll}})
	var mu sync.Mutex
	var keys []string
	wrap := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			router.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		keys = append(keys, r.Header.Get(wire.HeaderIdempotencyKey))
		first := len(keys) == 1
		mu.Unlock()
		if !first {
			router.ServeHTTP(w, r)
			return
		}
		router.ServeHTTP(httptest.NewRecorder(), r) // published, reply lost
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close()
	})
	sock := filepath.Join(shortDir(t), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: wrap}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		srv.Close()
		<-served
	}()

	cl := &client.Client{Socket: sock}
	defer cl.CloseIdleConnections()
	id, err := cl.Publish(t.Context(), "s", "t:e", 1)
	if err != nil {
		t.Fatalf("Publish = %v, want the reply of the retry", err)
	}
	s, _ := h.Session("s")
	if id != 1 || s.Bus.LastID() != 1 {
		t.Errorf("Publish = id %d, session last id %d; want 1 and 1 (published once)", id, s.Bus.LastID())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
		t.Errorf("Idempotency-Keys sent = %q, want the same key twice", keys)
	}
}
