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
		Exported: 10, Imported: 3, Lag: 7, Lost: 2, BacklogBytes: 3 << 20, ImportLost: 5, ImportGaps: 1,
		Sessions: []wire.UpstreamExport{{Session: "build", LastID: 17, ExportedID: 10, Lag: 7, BacklogBytes: 3 << 20, Lost: 2}},
		Mirrors:  []wire.UpstreamMirror{{Session: "b.ci", Node: "b", Source: "ci", ID: 9, LastID: 4, Imported: 4, Lost: 5, Gaps: 1}},
	})
	got := b.String()
	for _, want := range []string{
		"upstream: node a, stream LOCALBUS, disconnected",
		"last error: disconnected: EOF",
		"exported 10, imported 3, lag 7, backlog 3.0 MiB, lost 2, mirrors lost 5 origin events in 1 gap",
		"EXPORT", "build", "MIRROR", "b.ci", "b/ci",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("printUpstream output lacks %q:\n%s", want, got)
		}
	}
	if !strings.Contains(got, "build   17       10        7    3.0 MiB  2") {
		t.Errorf("the export row does not show last id, exported id, lag, backlog and lost in columns:\n%s", got)
	}
	if !strings.Contains(got, "b.ci    b/ci    4        9          4         5") {
		t.Errorf("the mirror row does not show last id, source id, imported and lost in columns:\n%s", got)
	}
}
