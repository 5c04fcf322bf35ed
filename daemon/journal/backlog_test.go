package journal

import (
	"strings"
	"testing"
)

func TestExportBacklogIsKeptBeyondTheRingUntilConfirmed(t *testing.T) {
	j, _ := open(t, t.TempDir(), Options{})
	b := newBus(t, j, "s", 10, 0)
	j.HoldExport("s", b.Epoch(), 0)
	for i := range 10 {
		publish(t, b, events(i*10, 10, 50)...)
	}
	st := j.storeOf("s")
	// The bus sees its ring only.
	if n, e := st.Len(), st.Earliest(); n != 10 || e != 91 {
		t.Errorf("ring: Len %d, Earliest %d; want 10, 91", n, e)
	}
	if got := ids(retained(st)); got[0] != 91 || len(got) != 10 {
		t.Errorf("ring scan = %v, want 91..100", got)
	}
	// The exporter reads the backlog and the ring.
	got := j.ReadExport("s", b.Epoch(), 1, 1000, nil)
	if len(got) != 100 || got[0].ID != 1 || got[99].ID != 100 {
		t.Fatalf("ReadExport from 1 = %d events, from %d", len(got), got[0].ID)
	}
	if got := j.ReadExport("s", "another-epoch", 1, 1000, nil); len(got) != 0 {
		t.Errorf("ReadExport of another epoch = %d events, want none", len(got))
	}
	if j.BacklogBytes() <= 0 || j.ExportBacklog("s") != j.BacklogBytes() {
		t.Errorf("backlog %d bytes, of s %d", j.BacklogBytes(), j.ExportBacklog("s"))
	}
	// Confirmed events leave the backlog.
	j.HoldExport("s", b.Epoch(), 50)
	if got := j.ReadExport("s", b.Epoch(), 1, 1000, nil); got[0].ID != 51 {
		t.Errorf("after confirming 50, the backlog starts at %d, want 51", got[0].ID)
	}
	j.HoldExport("s", b.Epoch(), 100)
	if j.BacklogBytes() != 0 {
		t.Errorf("backlog after confirming everything = %d bytes, want 0", j.BacklogBytes())
	}
}

func TestExportBacklogPastItsBoundDropsTheOldestAndLogs(t *testing.T) {
	j, logs := open(t, t.TempDir(), Options{})
	j.SetBacklogBytes(2000)
	b := newBus(t, j, "s", 10, 0)
	j.HoldExport("s", b.Epoch(), 0)
	for i := range 50 {
		publish(t, b, events(i*10, 10, 50)...)
	}
	if got := j.BacklogBytes(); got > 2000 || got <= 0 {
		t.Errorf("backlog = %d bytes, want within its bound of 2000", got)
	}
	got := j.ReadExport("s", b.Epoch(), 1, 1000, nil)
	if got[0].ID <= 1 || got[len(got)-1].ID != 500 {
		t.Errorf("after the bound, the backlog holds %d..%d; want the oldest dropped and 500 last", got[0].ID, got[len(got)-1].ID)
	}
	if !strings.Contains(logs.String(), "dropping the oldest unexported events") {
		t.Errorf("no log line for the dropped events:\n%s", logs)
	}
	// Without a hold nothing is kept beyond the ring.
	b2 := newBus(t, j, "t", 10, 0)
	publish(t, b2, events(0, 100, 50)...)
	if j.ExportBacklog("t") != 0 {
		t.Errorf("an unheld bus keeps %d bytes of backlog", j.ExportBacklog("t"))
	}
	// A deleted bus's backlog is forgotten.
	if err := j.Delete("s"); err != nil {
		t.Fatal(err)
	}
	if j.BacklogBytes() != 0 {
		t.Errorf("backlog after deleting its bus = %d bytes", j.BacklogBytes())
	}
}
