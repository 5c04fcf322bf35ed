package upstream_test

import (
	"testing"

	"github.com/localbus/localbus/daemon/upstream"
	"github.com/localbus/localbus/daemon/upstream/natstest"
)

// TestABurstIntoANewExportedSessionLosesNothing: a session is held for
// export from its first event, so a burst of twenty rings into a session
// that did not exist reaches the mirror whole, before its exporter has
// ever started.
func TestABurstIntoANewExportedSessionLosesNothing(t *testing.T) {
	srv := natstest.Start(t)
	a := startNodeRing(t, upstream.Config{URLs: []string{srv.URL()}, Node: "a", Export: []string{"build*"}}, 1000)
	b := startNodeRing(t, upstream.Config{URLs: []string{srv.URL()}, Node: "b", Import: []string{"a/*"}}, 50000)
	const total = 20000
	a.publish("build", 0, total, 1000)
	waitFor(t, "the mirror to catch up", func() bool { return lastID(b.h, "a.build") >= total })
	checkMirror(t, mirrored(t, b.h, "a.build"), "a", "build", total)
	waitFor(t, "the export lag to drain", func() bool { return a.br.Status().Lag == 0 })
	if st := a.br.Status(); st.Lost != 0 || st.Exported != total || st.BacklogBytes != 0 {
		t.Errorf("status of a: exported %d, lost %d, backlog %d bytes; want %d, 0, 0", st.Exported, st.Lost, st.BacklogBytes, total)
	}
}

// TestTheExportBacklogSurvivesARestartOfTheExportingNode: a backlog of
// twenty rings built while NATS is down survives a clean restart of the
// exporting node, and reaches the mirror whole once NATS is back.
func TestTheExportBacklogSurvivesARestartOfTheExportingNode(t *testing.T) {
	srv := natstest.Start(t)
	a := startNodeRing(t, upstream.Config{URLs: []string{srv.URL()}, Node: "a", Export: []string{"build*"}}, 1000)
	b := startNodeRing(t, upstream.Config{URLs: []string{srv.URL()}, Node: "b", Import: []string{"a/*"}}, 50000)
	a.publish("build", 0, 10, 10)
	waitFor(t, "the first export", func() bool { return lastID(b.h, "a.build") == 10 })
	srv.Kill()
	const total = 20000
	a.publish("build", 10, total-10, 1000)
	st := a.br.Status()
	if len(st.Sessions) != 1 || st.Sessions[0].BacklogBytes <= 0 || st.BacklogBytes != st.Sessions[0].BacklogBytes {
		t.Errorf("status with NATS down: backlog %d bytes, sessions %+v; want the session's backlog, > 0", st.BacklogBytes, st.Sessions)
	}
	a.restart()
	srv.Restart()
	waitFor(t, "the mirror to catch up", func() bool { return lastID(b.h, "a.build") >= total })
	checkMirror(t, mirrored(t, b.h, "a.build"), "a", "build", total)
	waitFor(t, "the export lag to drain", func() bool { return a.br.Status().Lag == 0 })
	if st := a.br.Status(); st.Lost != 0 || st.BacklogBytes != 0 {
		t.Errorf("status of a after the restart: lost %d, backlog %d bytes; want 0, 0", st.Lost, st.BacklogBytes)
	}
	if bst := b.br.Status(); bst.ImportLost != 0 || bst.ImportGaps != 0 {
		t.Errorf("status of b: import lost %d in %d gaps, want none", bst.ImportLost, bst.ImportGaps)
	}
}

// TestAReloadThatStopsExportingASessionReleasesItsBacklog: the journal
// keeps nothing beyond the ring for a session no longer exported.
func TestAReloadThatStopsExportingASessionReleasesItsBacklog(t *testing.T) {
	srv := natstest.Start(t)
	a := startNodeRing(t, upstream.Config{URLs: []string{srv.URL()}, Node: "a", Export: []string{"build*"}}, 100)
	a.publish("build", 0, 10, 10)
	waitFor(t, "the first export", func() bool { return a.br.Status().Exported == 10 })
	srv.Kill()
	a.publish("build", 10, 1000, 100)
	if a.j.ExportBacklog("build") == 0 {
		t.Fatal("no backlog held while NATS is down")
	}
	a.br.SetPatterns([]string{"other"}, nil)
	if got := a.j.BacklogBytes(); got != 0 {
		t.Errorf("backlog after the session is no longer exported = %d bytes, want 0", got)
	}
	a.publish("build", 1010, 1000, 100)
	if got := a.j.BacklogBytes(); got != 0 {
		t.Errorf("backlog of a session no longer exported grows: %d bytes", got)
	}
}
