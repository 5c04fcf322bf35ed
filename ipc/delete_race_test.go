package ipc_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/ipc/ipctest"
	"github.com/localbus/localbus/ipc/wire"
)

// raceOutcome counts the answers to publishes racing DELETEs of their
// session.
type raceOutcome struct {
	ok, busy atomic.Int64
}

// publishAgainstDeletes publishes body to session from publishers
// goroutines, each until it has made each publishes (or, with untilBusy,
// until some publish got 503), while one more goroutine deletes the
// session again and again over the same socket. Every publish must get 200
// or 503 busy with Retry-After (SPEC §6: with auto-create on, a publish
// racing a DELETE lands before it or in the session made anew, or is asked
// to retry); any other answer fails the test.
func publishAgainstDeletes(t *testing.T, srv *ipctest.Server, session string, body []byte, publishers, each int, untilBusy bool) *raceOutcome {
	t.Helper()
	var out raceOutcome
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var deletes atomic.Int64
	deleter := make(chan struct{})
	go func() {
		defer close(deleter)
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), ipctest.Wait)
			r, err := srv.Request(ctx, http.MethodDelete, "/api/v1/sessions/"+session, nil, nil)
			cancel()
			if err != nil {
				t.Errorf("DELETE: %v", err)
				return
			}
			switch r.Status {
			case http.StatusNoContent, http.StatusOK:
				deletes.Add(1)
			case http.StatusNotFound: // between a delete and the next publish
			default:
				t.Errorf("DELETE = %d %s", r.Status, r.Body)
				return
			}
		}
	}()
	for range publishers {
		wg.Go(func() {
			for range each {
				if untilBusy && out.busy.Load() > 0 {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), ipctest.Wait)
				r, err := srv.Request(ctx, http.MethodPost, "/api/v1/sessions/"+session+"/events", nil, body)
				cancel()
				if err != nil {
					t.Errorf("publish: %v", err)
					return
				}
				switch r.Status {
				case http.StatusOK:
					out.ok.Add(1)
				case http.StatusServiceUnavailable:
					if e := r.ErrorBody(t); e.Error.Code != wire.CodeBusy || r.Header.Get("Retry-After") != "1" {
						t.Errorf("publish racing a DELETE = 503 %q with Retry-After %q, want busy and 1", e.Error.Code, r.Header.Get("Retry-After"))
						return
					}
					out.busy.Add(1)
				default:
					t.Errorf("publish racing a DELETE = %d %s, want 200 (or 503 busy): auto-create is on", r.Status, r.Body)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-deleter
	t.Logf("%d publishes: %d published, %d asked to retry (503); %d deletes", out.ok.Load()+out.busy.Load(), out.ok.Load(), out.busy.Load(), deletes.Load())
	if deletes.Load() == 0 {
		t.Errorf("no DELETE found the session: nothing raced")
	}
	return &out
}

// TestPublishRacingDeletesOverHTTPIsNeverA404 races 2,000 publishes from
// four clients against a client deleting their session over and over,
// with auto-create on: every publish is published (before a delete, or in
// the session made anew) or gets 503 busy with Retry-After, never a 404;
// the bus and its other sessions serve on.
func TestPublishRacingDeletesOverHTTPIsNeverA404(t *testing.T) {
	srv := ipctest.New(t, ipctest.Options{Hub: hub.Options{AutoCreate: true, Logger: slog.New(slog.DiscardHandler)}})
	srv.Publish(t, "other", ipctest.Event{Type: "a:b", Data: `0`})
	out := publishAgainstDeletes(t, srv, "raced", ipctest.PublishBody(ipctest.Event{Type: "a:b", Data: `1`}), 4, 500, false)
	if got := out.ok.Load() + out.busy.Load(); got != 2000 && !t.Failed() {
		t.Errorf("%d publishes answered, want 2000", got)
	}
	if r := srv.Publish(t, "other", ipctest.Event{Type: "a:b", Data: `1`}); r.LastID != 2 {
		t.Errorf("session other after the race: last id %d, want 2", r.LastID)
	}
	if r := srv.Publish(t, "raced", ipctest.Event{Type: "a:b", Data: `2`}); r.LastID == 0 {
		t.Errorf("session raced after the race: publish got no id")
	}
}

// TestPublishDeletedAgainAndAgainGets503WithRetryAfter makes a publish
// find its session deleted at every one of its attempts: batches large
// enough that encoding them (between the lookup of the session and its
// bus's lock) takes a while, against a client deleting the session as fast
// as it can. Within at most 2,000 publishes one gives up after its
// attempts and is answered 503 busy with Retry-After: 1, and the next
// publish is published.
func TestPublishDeletedAgainAndAgainGets503WithRetryAfter(t *testing.T) {
	srv := ipctest.New(t, ipctest.Options{Hub: hub.Options{AutoCreate: true, Logger: slog.New(slog.DiscardHandler)}})
	events := make([]ipctest.Event, 1000)
	for i := range events {
		events[i] = ipctest.Event{Type: "a:b", Data: fmt.Sprintf(`{"i":%d,"pad":%q}`, i, strings.Repeat("x", 1000))}
	}
	out := publishAgainstDeletes(t, srv, "raced", ipctest.PublishBody(events...), 2, 1000, true)
	if out.busy.Load() == 0 && !t.Failed() {
		t.Fatalf("none of %d publishes racing the deletes was asked to retry", out.ok.Load())
	}
	if r := srv.Publish(t, "raced", ipctest.Event{Type: "a:b", Data: `2`}); r.LastID == 0 {
		t.Errorf("session raced after the race: publish got no id")
	}
}
