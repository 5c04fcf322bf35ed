package systemd

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzUnits checks that whatever binary path Units accepts, the service gets
// exactly the shipped lines with one ExecStart= changed, and that this line,
// read back with systemd's quoting and specifier rules, names that path: no
// path can add a line, a directive or an argument.
func FuzzUnits(f *testing.F) {
	for _, seed := range []string{
		"/usr/local/bin/localbus",
		"/opt/local bus/localbus",
		"/opt/100%/localbus",
		"/opt/a\nExecStartPre=/bin/true\n/x",
		"relative/localbus",
		"/opt/\"quoted\"/localbus",
	} {
		f.Add(seed, false)
	}
	f.Fuzz(func(t *testing.T, binary string, user bool) {
		units, err := Units(user, binary)
		if err != nil {
			return
		}
		if binary == "" {
			binary = DefaultBinary
		}
		svc := unitByName(t, units, "localbus.service").Content
		shipped := embedded(t, user, "localbus.service")
		got, want := bytes.Split(svc, []byte("\n")), bytes.Split(shipped, []byte("\n"))
		if len(got) != len(want) {
			t.Fatalf("Units(%v, %q): service has %d lines, shipped %d", user, binary, len(got), len(want))
		}
		changed := 0
		for i := range got {
			if bytes.Equal(got[i], want[i]) {
				continue
			}
			changed++
			line, ok := strings.CutPrefix(string(got[i]), "ExecStart=")
			if !ok {
				t.Fatalf("Units(%v, %q) changed line %q", user, binary, got[i])
			}
			words := execWords(t, line)
			if len(words) != 2 || words[0] != binary || words[1] != "serve" {
				t.Fatalf("Units(%v, %q): ExecStart=%s reads as %q, want [%q serve]", user, binary, line, words, binary)
			}
		}
		if changed > 1 {
			t.Fatalf("Units(%v, %q) changed %d lines, want at most 1", user, binary, changed)
		}
	})
}

// execWords splits an Exec*= value the way systemd does for the characters
// Units may write: whitespace separates words, double quotes group them, and
// "%%" is a literal "%".
func execWords(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	for s != "" {
		s = strings.TrimLeft(s, " ")
		if s == "" {
			break
		}
		var w string
		if s[0] == '"' {
			end := strings.IndexByte(s[1:], '"')
			if end < 0 {
				t.Fatalf("unterminated quote in %q", s)
			}
			w, s = s[1:1+end], s[2+end:]
			if s != "" && s[0] != ' ' {
				t.Fatalf("closing quote not followed by a space in %q", s)
			}
		} else {
			end := strings.IndexByte(s, ' ')
			if end < 0 {
				end = len(s)
			}
			w, s = s[:end], s[end:]
		}
		if strings.Contains(strings.ReplaceAll(w, "%%", ""), "%") {
			t.Fatalf("word %q has a specifier", w)
		}
		words = append(words, strings.ReplaceAll(w, "%%", "%"))
	}
	return words
}
