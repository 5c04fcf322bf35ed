package main

import (
	"strings"
	"testing"

	"github.com/localbus/localbus/ipc/client"
	"github.com/localbus/localbus/ipc/wire"
)

func TestStatusPrintsTheUpstreamLagAndMirrors(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	printUpstream(&b, &client.UpstreamStatus{
		Node: "a", Stream: "LOCALBUS", Connected: false, LastError: "disconnected: EOF",
		Exported: 10, Imported: 3, Lag: 7, Lost: 2,
		Sessions: []wire.UpstreamExport{{Session: "build", LastID: 17, ExportedID: 10, Lag: 7}},
		Mirrors:  []wire.UpstreamMirror{{Session: "b.ci", Node: "b", Source: "ci", ID: 3, LastID: 3, Imported: 3}},
	})
	got := b.String()
	for _, want := range []string{
		"upstream: node a, stream LOCALBUS, disconnected",
		"last error: disconnected: EOF",
		"exported 10, imported 3, lag 7, lost 2",
		"EXPORT", "build", "MIRROR", "b.ci", "b/ci",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("printUpstream output lacks %q:\n%s", want, got)
		}
	}
	if !strings.Contains(got, "build   17       10        7") {
		t.Errorf("the export row does not show last id, exported id and lag in columns:\n%s", got)
	}
}
