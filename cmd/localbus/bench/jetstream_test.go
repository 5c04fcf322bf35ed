package bench

import (
	"strings"
	"testing"

	"github.com/localbus/localbus/cmd/localbus/bench/benchtest"
	"github.com/localbus/localbus/daemon/upstream/natstest"
	"github.com/localbus/localbus/ipc"
)

// TestPublishAgainstJetStream runs the publish scenario against a daemon
// and a real nats-server -js in alternating rounds: both checks pass,
// neither target has a subscriber, and the report names JetStream and
// gives the ratios.
func TestPublishAgainstJetStream(t *testing.T) {
	js := natstest.Start(t)
	srv := benchtest.New(t, benchtest.Faults{}, ipc.Options{})
	rep, err := Run(testCtx(t), small(srv.Socket, Config{
		Scenario: ScenarioPublish, Events: 200, Publishers: 4, Rounds: 2,
		JetStream: js.URL(), JetStreamPID: js.PID(),
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("check failed: %s", rep.Problem())
	}
	for _, res := range []*Result{rep.Daemon, rep.Baseline} {
		if res.Check.Subscribers != 0 || res.Check.Received != 200 || res.Requests.Count != 200 {
			t.Errorf("%s: %+v, %d requests; want 200 acknowledged, no subscriber", res.Target, res.Check, res.Requests.Count)
		}
	}
	if rep.Baseline.Target != "jetstream" || rep.Baseline.CPU.PID != js.PID() || rep.JetStreamVersion == "" {
		t.Errorf("compared with %s (pid %d, version %q), want jetstream, pid %d", rep.Baseline.Target, rep.Baseline.CPU.PID, rep.JetStreamVersion, js.PID())
	}
	if rep.Ratios["requestsPerSec"] <= 0 {
		t.Errorf("ratios = %v, want requestsPerSec", rep.Ratios)
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil || !strings.Contains(b.String(), "jetstream: nats-server") || !strings.Contains(b.String(), "check jetstream: ok") {
		t.Errorf("table (%v):\n%s", err, b.String())
	}
}

func TestJetStreamAppliesToPublishAlone(t *testing.T) {
	for _, c := range []Config{
		{Scenario: ScenarioFanout, JetStream: "nats://127.0.0.1:1"},
		{Scenario: ScenarioLatency, JetStream: "nats://127.0.0.1:1", Baseline: true},
	} {
		if _, err := c.withDefaults(); err == nil || !strings.Contains(err.Error(), "--jetstream applies to the publish scenario") {
			t.Errorf("%+v: err = %v", c, err)
		}
	}
}

func TestCheckAcksFindsDuplicatesAndHoles(t *testing.T) {
	cases := []struct {
		name  string
		acked [][]uint64
		n     uint64
		want  Check
	}{
		{"every id once", [][]uint64{{1, 3}, {2, 4}}, 4, Check{Expected: 4, Received: 4}},
		{"an id twice", [][]uint64{{1, 2}, {2, 3}}, 4, Check{Expected: 4, Received: 3, Duplicates: 1, Lost: 1}},
		{"a hole", [][]uint64{{1, 2}, {4, 5}}, 4, Check{Expected: 4, Received: 4, Lost: 1}},
		{"nothing", nil, 3, Check{Expected: 3, Lost: 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := checkAcks(tc.acked, tc.n)
			if got != tc.want {
				t.Errorf("checkAcks = %+v, want %+v", got, tc.want)
			}
			if got.OK() != (tc.want == Check{Expected: tc.n, Received: tc.n}) {
				t.Errorf("OK() = %v", got.OK())
			}
		})
	}
}
