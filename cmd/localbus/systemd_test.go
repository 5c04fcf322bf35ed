package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSystemdPrintShowsBothUnitsWithTheBinary(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"localbus", "systemd", "print", "--binary", "/opt/lb/localbus"}, &out, &errb)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %s", code, errb.String())
	}
	for _, want := range []string{"# --- localbus.socket ---", "# --- localbus.service ---", "ExecStart=/opt/lb/localbus serve", "FileDescriptorName=unix", "Type=notify"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("systemd print output lacks %q", want)
		}
	}
}

func TestSystemdInstallWritesUnitsIntoDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "units")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"localbus", "systemd", "install", "--user", "--dir", dir, "--binary", "/usr/bin/localbus"}, &out, &errb)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %s", code, errb.String())
	}
	for _, name := range []string{"localbus.socket", "localbus.service"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if name == "localbus.service" && !strings.Contains(string(b), "ExecStart=/usr/bin/localbus serve") {
			t.Errorf("installed service does not run the given binary:\n%s", b)
		}
	}
	if !strings.Contains(out.String(), "systemctl --user daemon-reload") {
		t.Errorf("install output does not say what to run next: %s", out.String())
	}
}

func TestSystemdPrintRefusesRelativeBinary(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"localbus", "systemd", "print", "--binary", "bin/localbus"}, &out, &errb); code != exitUsage {
		t.Fatalf("exit %d, want %d", code, exitUsage)
	}
	if !strings.Contains(errb.String(), "not absolute") {
		t.Errorf("stderr = %q, want it to say the path is not absolute", errb.String())
	}
}
