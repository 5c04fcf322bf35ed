package main

import (
	"strings"
	"testing"

	"github.com/localbus/localbus/daemon"
)

func TestConfigDefaultsPrintsTheDaemonsFile(t *testing.T) {
	t.Parallel()
	want, err := daemon.DefaultsFile(nil)
	if err != nil {
		t.Fatal(err)
	}
	r := runBin(t, "", "config", "defaults")
	if r.code != exitOK || r.stdout != string(want) || r.stderr != "" {
		t.Errorf("localbus config defaults: exit %d, stderr %q, stdout equal to daemon.DefaultsFile: %v", r.code, r.stderr, r.stdout == string(want))
	}
	r = runBin(t, "", "config", "defaults", "--set", "keys_file=/var/lib/localbus/keys.json")
	if r.code != exitOK || !strings.Contains(r.stdout, "\nkeys_file = \"/var/lib/localbus/keys.json\"\n") {
		t.Errorf("--set keys_file: exit %d, stdout:\n%s", r.code, r.stdout)
	}
}

func TestConfigDefaultsRefusesABadSet(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ arg, want string }{
		{"ring_sise=1", "localbus: --set: config: ring_sise: unknown key"},
		{"ring_size=x", `localbus: --set: config: ring_size: must be a decimal integer, got "x"`},
		{"ring_size", `localbus: --set "ring_size": want KEY=VALUE`},
	} {
		r := runBin(t, "", "config", "defaults", "--set", tt.arg)
		if r.code != exitUsage || r.stdout != "" || !strings.HasPrefix(r.stderr, tt.want) || !strings.Contains(r.stderr, "Run 'localbus config defaults --help' for usage.") {
			t.Errorf("--set %s: exit %d, stdout %q, stderr %q; want exit 1 and %q", tt.arg, r.code, r.stdout, r.stderr, tt.want)
		}
	}
}
