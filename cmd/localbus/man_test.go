package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestManPagesOnePerCommand renders the pages with the hidden man command
// and checks there is one per visible command, each naming its flags and
// subcommands, so a command or flag added to the CLI is on its page.
func TestManPagesOnePerCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if r := runBin(t, "", "man", dir); r.code != exitOK {
		t.Fatalf("localbus man: exit %d, stderr %q", r.code, r.stderr)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	want := []string{"localbus.1"}
	app := newApp(io.Discard, io.Discard)
	for _, cmd := range app.Commands {
		if !cmd.Hidden {
			want = append(want, "localbus-"+cmd.Name+".1")
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("pages %q, want %q", got, want)
	}
	if slices.Contains(got, "localbus-man.1") {
		t.Errorf("the hidden man command has a page")
	}
	for _, cmd := range app.Commands {
		if cmd.Hidden {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, "localbus-"+cmd.Name+".1"))
		if err != nil {
			t.Fatal(err)
		}
		page := string(b)
		if !strings.HasPrefix(page, ".nh\n.TH localbus-"+cmd.Name+" 1") || !strings.Contains(page, `localbus-`+cmd.Name+` \- `) {
			t.Errorf("localbus-%s.1 does not open as a section 1 page of localbus-%s:\n%.200s", cmd.Name, cmd.Name, page)
		}
		if !strings.Contains(page, "\n.SH SYNOPSIS\nlocalbus "+cmd.Name+"\n") {
			t.Errorf("localbus-%s.1's SYNOPSIS does not read \"localbus %s\":\n%.300s", cmd.Name, cmd.Name, page)
		}
		for _, f := range cmd.VisibleFlags() {
			if !strings.Contains(page, "--"+f.Names()[0]) {
				t.Errorf("localbus-%s.1 does not name --%s", cmd.Name, f.Names()[0])
			}
		}
		for _, sub := range cmd.Subcommands {
			if !sub.Hidden && !strings.Contains(page, sub.Name) {
				t.Errorf("localbus-%s.1 does not name its subcommand %s", cmd.Name, sub.Name)
			}
		}
	}
	top, err := os.ReadFile(filepath.Join(dir, "localbus.1"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(top), "localbus-events") || !strings.HasPrefix(string(top), ".nh\n.TH localbus 1") {
		t.Errorf("localbus.1 does not point at the command pages:\n%.300s", top)
	}
}
