package journal

import (
	"errors"
	"testing"
)

func TestCursorSurvivesCrashAndRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	j, _ := open(t, dir, Options{})
	if v, err := j.Cursor("export:build"); err != nil || v != nil {
		t.Fatalf("Cursor of a fresh journal = %q, %v; want nil, nil", v, err)
	}
	if err := j.PutCursor("export:build", []byte("e1/41")); err != nil {
		t.Fatal(err)
	}
	if err := j.PutCursor("export:build", []byte("e1/42")); err != nil {
		t.Fatal(err)
	}
	if err := j.PutCursor("import:a/*", []byte("7")); err != nil {
		t.Fatal(err)
	}
	j.crash()

	j2, _ := open(t, dir, Options{})
	for name, want := range map[string]string{"export:build": "e1/42", "import:a/*": "7"} {
		if v, err := j2.Cursor(name); err != nil || string(v) != want {
			t.Errorf("Cursor(%q) after a crash = %q, %v; want %q", name, v, err, want)
		}
	}
	if err := j2.PutCursor("import:a/*", nil); err != nil {
		t.Fatal(err)
	}
	if v, _ := j2.Cursor("import:a/*"); v != nil {
		t.Errorf("Cursor after PutCursor(nil) = %q, want nil", v)
	}
	j2.Close()
	if err := j2.PutCursor("x", []byte("1")); !errors.Is(err, ErrClosed) {
		t.Errorf("PutCursor after Close = %v, want ErrClosed", err)
	}
	if _, err := j2.Cursor("x"); !errors.Is(err, ErrClosed) {
		t.Errorf("Cursor after Close = %v, want ErrClosed", err)
	}
}
