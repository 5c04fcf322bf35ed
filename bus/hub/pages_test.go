package hub_test

import (
	"testing"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
)

func pageIDs(h *hub.Hub, after string, limit int) ([]string, bool) {
	page, more := h.Page(after, limit)
	var ids []string
	for _, s := range page {
		ids = append(ids, s.ID)
	}
	return ids, more
}

func TestPageFollowsCreatesAndDeletes(t *testing.T) {
	h, err := hub.New(hub.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, id := range []string{"c", "a", "b"} {
		if _, err := h.Create(bustest.SessionID(id), 0); err != nil {
			t.Fatal(err)
		}
	}
	if ids, more := pageIDs(h, "", 2); len(ids) != 2 || ids[0] != "a" || ids[1] != "b" || !more {
		t.Errorf("first page %v more %v", ids, more)
	}
	if _, err := h.Create(bustest.SessionID("ab"), 0); err != nil {
		t.Fatal(err)
	}
	if err := h.Delete("c"); err != nil {
		t.Fatal(err)
	}
	if ids, more := pageIDs(h, "a", 10); len(ids) != 2 || ids[0] != "ab" || ids[1] != "b" || more {
		t.Errorf("after a: %v more %v, want [ab b] and no more", ids, more)
	}
	if ids, _ := pageIDs(h, "zz", 10); len(ids) != 0 {
		t.Errorf("after zz: %v", ids)
	}
}

func TestRatesOfAnIdleSessionStayZero(t *testing.T) {
	h, err := hub.New(hub.Options{AutoCreate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	s, _ := h.Create(bustest.SessionID("a"), 0)
	t0 := time.Unix(1000, 0)
	for i := range 3 {
		h.SampleRates(t0.Add(time.Duration(i) * time.Second))
	}
	if p, d := s.Rates(); p != 0 || d != 0 {
		t.Errorf("idle rates %v %v", p, d)
	}
	if _, _, err := h.Publish(bustest.SessionID("a"), []bus.Event{{Type: bustest.Type("x:y")}, {Type: bustest.Type("x:y")}}); err != nil {
		t.Fatal(err)
	}
	h.SampleRates(t0.Add(3 * time.Second))
	if p, _ := s.Rates(); p != 2.0/3 {
		t.Errorf("2 events in the 3 s since the first sample: publishRate %v, want 2/3", p)
	}
	for i := 4; i <= 12; i++ {
		h.SampleRates(t0.Add(time.Duration(i) * time.Second))
	}
	if p, _ := s.Rates(); p != 0.2 {
		t.Errorf("2 events in the last 10 s: publishRate %v, want 0.2", p)
	}
	for i := 13; i < 30; i++ {
		h.SampleRates(t0.Add(time.Duration(i) * time.Second))
	}
	if p, _ := s.Rates(); p != 0 {
		t.Errorf("after a quiet window: publishRate %v, want 0", p)
	}
	if p, _ := h.Rates(); p != 0 {
		t.Errorf("totals after a quiet window: %v", p)
	}
}
