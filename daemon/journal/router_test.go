package journal_test

import (
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/daemon/journal"
	"github.com/localbus/localbus/ipc/ipctest"
	"github.com/localbus/localbus/ipc/wire"
)

// fullDisk fails every write with ENOSPC while full is set, after writing
// half of it.
type fullDisk struct {
	journal.File
	full *atomic.Bool
}

func (f fullDisk) WriteAt(p []byte, off int64) (int, error) {
	if f.full.Load() {
		n, _ := f.File.WriteAt(p[:len(p)/2], off)
		return n, syscall.ENOSPC
	}
	return f.File.WriteAt(p, off)
}

func (f fullDisk) Reserve(end int64) error {
	if f.full.Load() {
		return syscall.ENOSPC
	}
	return f.File.Reserve(end)
}

func TestRouterAnswers507OnDiskFullAndKeepsServingReads(t *testing.T) {
	var full atomic.Bool
	j, err := journal.Open(journal.Options{
		Dir: t.TempDir(), Logger: quiet, SegmentBytes: 1 << 20,
		WrapFile: func(f journal.File) journal.File { return fullDisk{File: f, full: &full} },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	srv := ipctest.New(t, ipctest.Options{Hub: hub.Options{Journal: j, AutoCreate: true}})
	srv.Publish(t, "s", ipctest.Event{Type: "a:b", Data: `1`}, ipctest.Event{Type: "a:b", Data: `2`})

	full.Store(true)
	r := srv.Do(t, http.MethodPost, "/api/v1/sessions/s/events", nil, ipctest.PublishBody(ipctest.Event{Type: "a:b", Data: `3`}))
	if r.Status != http.StatusInsufficientStorage {
		t.Fatalf("publish on a full disk = %d %s, want 507", r.Status, r.Body)
	}
	if e := r.ErrorBody(t); e.Error.Code != "disk_full" {
		t.Errorf("error code = %q, want disk_full", e.Error.Code)
	}

	// Reads go on: the session, and a replay of what was acknowledged.
	var info wire.SessionInfo
	srv.Do(t, http.MethodGet, "/api/v1/sessions/s", nil, nil).DecodeJSON(t, &info)
	if info.LastID != 2 || info.Durability == nil || info.Durability.LastSyncedID != 2 || info.Durability.BytesOnDisk <= 0 {
		t.Errorf("session while the disk is full = %+v (durability %+v), want lastId 2 and durability figures", info, info.Durability)
	}
	st := srv.OpenSSE(t, "/api/v1/sessions/s/events?since=0", nil)
	var got []uint64
	for {
		env := st.MustNext(t)
		if env.Type == "stream:replayed" {
			break
		}
		if env.ID != 0 {
			got = append(got, env.ID)
		}
	}
	if len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Errorf("replay while the disk is full = %v, want [1 2]", got)
	}

	full.Store(false)
	if reply := srv.Publish(t, "s", ipctest.Event{Type: "a:b", Data: `3`}); reply.LastID != 3 {
		t.Errorf("publish after the disk has room got id %d, want 3", reply.LastID)
	}
}
