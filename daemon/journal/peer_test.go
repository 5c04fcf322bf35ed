package journal_test

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/bus/share"
	"github.com/localbus/localbus/daemon/journal"
)

// The journal is what the hub restores sessions and keys from.
var (
	_ hub.Journal     = (*journal.Journal)(nil)
	_ hub.AutoJournal = (*journal.Journal)(nil)
	_ hub.KeyJournal  = (*journal.Journal)(nil)
)

// untar unpacks the .tar.gz at path into dir.
func untar(t *testing.T, path, dir string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o700); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(out, tr); err != nil {
				t.Fatal(err)
			}
			out.Close()
		}
	}
}

// TestStateDirBeforePeersOpens opens a journal written before the creating
// peer was stored with a session a publish created (testdata/
// before-peers.tar.gz: auto sessions auto-a and auto-b, and made, created
// by an admin): it opens as it is, its auto sessions count as Unknown's,
// and a session created now keeps its peer across a restart.
func TestStateDirBeforePeersOpens(t *testing.T) {
	dir := t.TempDir()
	untar(t, filepath.Join("testdata", "before-peers.tar.gz"), dir)
	jdir := filepath.Join(dir, "journal")
	j, err := journal.Open(journal.Options{Dir: jdir, Logger: quiet})
	if err != nil {
		t.Fatalf("open a state dir from before peers were stored: %v", err)
	}
	for _, tt := range []struct {
		id   string
		auto bool
	}{{"auto-a", true}, {"auto-b", true}, {"made", false}} {
		if peer, auto := j.Auto(tt.id); auto != tt.auto || peer != "" {
			t.Errorf("Auto(%q) = %q, %v; want \"\", %v", tt.id, peer, auto, tt.auto)
		}
	}
	opts := hub.Options{Journal: j, AutoCreate: true, MaxSessions: 100, MaxAutoSessions: 8, PeerShare: 0.25, Logger: quiet}
	h, err := hub.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := h.Session("auto-a"); !ok || s.Bus.Stats().LastID != 1 {
		t.Fatalf("auto-a restored %v with its event: %v", ok, s)
	}
	ev := []bus.Event{{Type: bustest.Type("x:y"), Data: []byte(`1`)}}
	// auto-a and auto-b are Unknown's share of 8.
	if _, _, err := h.PublishAs(share.Unknown, bustest.SessionID("unknown-new"), ev); !errors.Is(err, hub.ErrAutoSessionLimit) {
		t.Errorf("Unknown past its share after the upgrade: %v, want ErrAutoSessionLimit", err)
	}
	peer := share.UID(65534)
	for _, id := range []string{"new-1", "new-2"} {
		if _, _, err := h.PublishAs(peer, bustest.SessionID(id), ev); err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
	}
	h.Close()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	j, err = journal.Open(journal.Options{Dir: jdir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if p, auto := j.Auto("new-1"); !auto || p != peer.String() {
		t.Errorf("Auto(new-1) = %q, %v; want %q, true", p, auto, peer)
	}
	opts.Journal = j
	h, err = hub.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, _, err := h.PublishAs(peer, bustest.SessionID("new-3"), ev); !errors.Is(err, hub.ErrAutoSessionLimit) {
		t.Errorf("after a restart the peer created a third session: %v, want its share refused", err)
	}
	if _, _, err := h.PublishAs(share.UID(65533), bustest.SessionID("other"), ev); err != nil {
		t.Errorf("another peer after the restart: %v", err)
	}
}
