package client_test

import (
	"context"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/ipc/client"
)

// These tests run the client against fake servers that misbehave the way a
// dying or unusual server would.

// sseFrame is one reserved or event frame in SSE form.
func sseFrame(id uint64, typ, data string) string {
	var b strings.Builder
	env := fmt.Sprintf(`{"v":1,"type":%q,"session":"s","data":%s,"timestamp":"2026-01-01T00:00:00.000Z"}`, typ, data)
	if id != 0 {
		fmt.Fprintf(&b, "id: %d\n", id)
		env = fmt.Sprintf(`{"id":%d,%s`, id, env[1:])
	}
	fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", typ, env)
	return b.String()
}

func TestStreamSurvivesServerDyingMidFrame(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var resumes []string // Last-Event-ID / Localbus-Epoch of each request
	ready := sseFrame(0, bus.TypeReady, `{"cursor":0,"lastId":0,"earliestId":null,"epoch":"e1","types":null,"maxQueued":256}`)
	sock := fakeServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		resumes = append(resumes, r.Header.Get("Last-Event-ID")+"/"+r.Header.Get("Localbus-Epoch"))
		n := len(resumes)
		mu.Unlock()
		if n == 1 {
			// Headers, a short retry:, stream:ready, half an event, then
			// the connection dies.
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			half := sseFrame(1, "t:e", "1")
			fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\nretry: 40\n\n%s%s",
				ready, half[:len(half)/2])
			buf.Flush()
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "retry: 3000\n\n", ready, sseFrame(1, "t:e", "1"), sseFrame(2, "t:e", "2"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	c := newClient(t, sock)
	var retried []error
	st := openStream(t, c, client.StreamOptions{
		Session: "s", Since: ptr[uint64](0),
		OnRetry: func(err error, wait time.Duration) {
			retried = append(retried, err)
			if wait > 40*time.Millisecond {
				t.Errorf("retry wait %v, want at most the retry: 40 the server sent", wait)
			}
		},
	})
	var got []string
	for len(got) < 4 {
		f := next(t, st)
		got = append(got, fmt.Sprintf("%s#%d", f.Type, f.ID))
	}
	want := "stream:ready#0 stream:ready#0 t:e#1 t:e#2"
	if strings.Join(got, " ") != want {
		t.Errorf("frames = %q, want %q: the half frame must not be delivered, nor an event twice", strings.Join(got, " "), want)
	}
	if len(retried) != 1 {
		t.Errorf("OnRetry called %d times, want once: %v", len(retried), retried)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(resumes, " ") != "0/ 0/e1" {
		t.Errorf("resume headers = %q, want %q", resumes, "0/ 0/e1")
	}
}

// wsEnvelope is a frame in the form a WebSocket message carries it.
func wsEnvelope(id uint64, typ, data string) string {
	env := fmt.Sprintf(`{"v":1,"type":%q,"session":"s","data":%s,"timestamp":"2026-01-01T00:00:00.000Z"}`, typ, data)
	if id != 0 {
		env = fmt.Sprintf(`{"id":%d,%s`, id, env[1:])
	}
	return env
}

func TestStreamSurvivesWebSocketDyingMidFrame(t *testing.T) {
	t.Parallel()
	ready := wsEnvelope(0, bus.TypeReady, `{"cursor":0,"lastId":0,"earliestId":null,"epoch":"e1","types":null,"maxQueued":256}`)
	var mu sync.Mutex
	var resumes []string
	sock := fakeServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		resumes = append(resumes, r.Header.Get("Last-Event-ID")+"/"+r.Header.Get("Localbus-Epoch"))
		n := len(resumes)
		mu.Unlock()
		if n == 1 {
			// Upgrade by hand, send stream:ready, then a text frame that
			// announces 100 bytes and carries 10, and hang up.
			sum := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			fmt.Fprintf(buf, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
				base64.StdEncoding.EncodeToString(sum[:]))
			buf.Write(append([]byte{0x81, 126, byte(len(ready) >> 8), byte(len(ready))}, ready...))
			buf.Write(append([]byte{0x81, 100}, wsEnvelope(1, "t:e", "1")[:10]...))
			buf.Flush()
			return
		}
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for _, m := range []string{ready, wsEnvelope(1, "t:e", "1"), wsEnvelope(2, "t:e", "2")} {
			c.Write(r.Context(), websocket.MessageText, []byte(m))
		}
		c.Read(context.Background()) // until the client goes
	}))
	c := newClient(t, sock)
	st := openStream(t, c, client.StreamOptions{Session: "s", Since: ptr[uint64](0), Transport: client.WebSocket})
	var got []string
	for len(got) < 4 {
		f := next(t, st)
		got = append(got, fmt.Sprintf("%s#%d", f.Type, f.ID))
	}
	if want := "stream:ready#0 stream:ready#0 t:e#1 t:e#2"; strings.Join(got, " ") != want {
		t.Errorf("frames = %q, want %q", strings.Join(got, " "), want)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(resumes, " ") != "0/ 0/e1" {
		t.Errorf("resume headers = %q, want %q", resumes, "0/ 0/e1")
	}
}

func TestStreamEndsOnWebSocketNormalClosure(t *testing.T) {
	t.Parallel()
	ready := `{"v":1,"type":"stream:ready","data":{"cursor":5,"lastId":5,"earliestId":1,"epoch":"e","types":null,"maxQueued":256},"timestamp":"2026-01-01T00:00:00.000Z"}`
	sock := fakeServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.Write(r.Context(), websocket.MessageText, []byte(ready))
		c.Close(websocket.StatusNormalClosure, "done")
	}))
	c := newClient(t, sock)
	st := openStream(t, c, client.StreamOptions{Session: "s", Transport: client.WebSocket})
	if f := next(t, st); f.Type != bus.TypeReady {
		t.Fatalf("first frame %s", f.Raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, err := st.Next(ctx)
	var ee *client.EndedError
	if !errors.As(err, &ee) || ee.Reason != "closed" {
		t.Fatalf("Next after close 1000 = %v, want *EndedError closed", err)
	}
	if id, _, _ := st.Cursor(); id != 5 {
		t.Errorf("Cursor = %d, want the anchor 5 of stream:ready", id)
	}
}
