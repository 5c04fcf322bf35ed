package ipc_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/ipc/ipctest"
)

// afterClock returns once the clock has passed t by more than a
// millisecond, the resolution of event timestamps.
func afterClock(t time.Time) {
	for !time.Now().After(t.Add(time.Millisecond)) {
		time.Sleep(100 * time.Microsecond) // waiting for the clock, not for another goroutine
	}
}

func TestStreamSinceTimeReplaysWhatWasPublishedSince(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	srv.Publish(t, "s", ipctest.Event{Type: "a:old", Data: "1"}, ipctest.Event{Type: "a:old", Data: "2"})
	before := time.Now()
	afterClock(before)
	mark := time.Now()
	afterClock(mark)
	srv.Publish(t, "s", ipctest.Event{Type: "a:new", Data: "3"}, ipctest.Event{Type: "a:new", Data: "4"})

	for _, since := range []string{mark.UTC().Format(time.RFC3339Nano), mark.Format(time.RFC3339Nano)} {
		st := srv.OpenSSE(t, "/api/v1/sessions/s/events?sinceTime="+url.QueryEscape(since), nil)
		var rd bus.ReadyData
		if env := st.MustNext(t); env.Type != bus.TypeReady || json.Unmarshal(env.Data, &rd) != nil || rd.Cursor == nil || *rd.Cursor != 2 {
			t.Fatalf("sinceTime=%s: first frame %s %s, want stream:ready with cursor 2", since, env.Type, env.Data)
		}
		for _, want := range []uint64{3, 4} {
			if env := st.MustNext(t); env.ID != want || env.Type != "a:new" {
				t.Fatalf("sinceTime=%s: got %s #%d, want a:new #%d", since, env.Type, env.ID, want)
			}
		}
		if env := st.MustNext(t); env.Type != bus.TypeReplayed {
			t.Fatalf("sinceTime=%s: got %s, want stream:replayed", since, env.Type)
		}
		st.Close()
	}

	// A duration reaching back before everything replays the whole ring.
	st := srv.OpenSSE(t, "/api/v1/sessions/s/events?sinceTime=1h", nil)
	defer st.Close()
	st.MustNext(t) // stream:ready
	if env := st.MustNext(t); env.ID != 1 {
		t.Fatalf("sinceTime=1h: got %s #%d, want event 1", env.Type, env.ID)
	}

	// Go's zero time is a time like any other before the first event, not
	// "no sinceTime" (a live-only stream).
	for _, since := range []string{"0001-01-01T00:00:00Z", "0001-01-01T00:00:00.000000001Z", "1970-01-01T00:00:00Z"} {
		st := srv.OpenSSE(t, "/api/v1/sessions/s/events?sinceTime="+url.QueryEscape(since), nil)
		st.MustNext(t) // stream:ready
		if env := st.MustNext(t); env.ID != 1 {
			t.Fatalf("sinceTime=%s: got %s #%d, want event 1", since, env.Type, env.ID)
		}
		st.Close()
	}

	// Last-Event-ID wins over sinceTime, as over since: a reconnecting
	// EventSource keeps its URL.
	h := http.Header{"Last-Event-Id": []string{"3"}}
	st2 := srv.OpenSSE(t, "/api/v1/sessions/s/events?sinceTime=1h", h)
	defer st2.Close()
	st2.MustNext(t)
	if env := st2.MustNext(t); env.ID != 4 {
		t.Fatalf("Last-Event-ID 3 with sinceTime=1h: got %s #%d, want event 4", env.Type, env.ID)
	}
}
