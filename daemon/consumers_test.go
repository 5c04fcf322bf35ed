package daemon

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/daemon/journal"
)

// TestHubConsumersLiveInTheJournal: a session's consumers, created and
// acknowledged through the hub, come back after the hub and the journal
// restart, with their ack mode, position and epoch; deleting the session
// deletes them, and the session created again under its id has none.
func TestHubConsumersLiveInTheJournal(t *testing.T) {
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	openHub := func() (*journal.Journal, *hub.Hub) {
		t.Helper()
		j, err := journal.Open(journal.Options{Dir: dir, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		h, err := hub.New(hub.Options{Journal: hubJournal{j}, AutoCreate: true})
		if err != nil {
			j.Close()
			t.Fatal(err)
		}
		return j, h
	}
	j, h := openHub()
	evs := []bus.Event{{Type: bustest.Type("t:e"), Data: json.RawMessage(`1`)}, {Type: bustest.Type("t:e"), Data: json.RawMessage(`2`)}, {Type: bustest.Type("t:e"), Data: json.RawMessage(`3`)}}
	if _, _, err := h.Publish(bustest.SessionID("s"), evs); err != nil {
		t.Fatal(err)
	}
	s, _ := h.Session("s")
	now := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	l, err := s.Consumers().Attach(hub.AttachRequest{Name: "backup", Ack: hub.AckExplicit, Epoch: s.Bus.Epoch(), LastID: s.Bus.LastID(), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if id, err := s.Consumers().Ack("backup", 2, s.Bus.Epoch(), s.Bus.LastID(), now); err != nil || id != 2 {
		t.Fatalf("Ack = %d, %v", id, err)
	}
	a, err := s.Consumers().Attach(hub.AttachRequest{Name: "tail", Epoch: s.Bus.Epoch(), LastID: s.Bus.LastID(), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	a.Wrote(3)
	if err := a.End(now.Add(2 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	l.End(now)
	epoch := s.Bus.Epoch()
	h.Close()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	j, h = openHub()
	s, ok := h.Session("s")
	if !ok {
		t.Fatal("the session was not restored")
	}
	got := s.Consumers().List(s.Bus.LastID(), s.Bus.Epoch())
	if len(got) != 2 || got[0].Name != "backup" || got[0].Ack != hub.AckExplicit || got[0].AckedID != 2 || got[0].Epoch != epoch ||
		got[1].Name != "tail" || got[1].Ack != hub.AckAuto || got[1].AckedID != 3 || got[0].Connected {
		t.Fatalf("restored consumers: %+v", got)
	}
	if _, err := s.Consumers().Ack("backup", 3, "another-epoch", s.Bus.LastID(), now); !errors.Is(err, hub.ErrEpochMismatch) {
		t.Errorf("an ack of another epoch after the restart: %v", err)
	}
	if err := h.Delete("s"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.Publish(bustest.SessionID("s"), evs[:1]); err != nil {
		t.Fatal(err)
	}
	s, _ = h.Session("s")
	if n := s.Consumers().Len(); n != 0 {
		t.Errorf("the session created again has %d consumers", n)
	}
	h.Close()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j, h = openHub()
	defer j.Close()
	defer h.Close()
	s, _ = h.Session("s")
	if n := s.Consumers().Len(); n != 0 {
		t.Errorf("after a restart, the session created again has %d consumers", n)
	}
}
