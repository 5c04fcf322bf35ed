package main

import (
	"strings"
	"testing"

	"github.com/localbus/localbus/bus"
)

// TestDescribeGapNamesTheOriginIdsAMirrorLost: an upstream_lost gap names
// the missing origin ids and where the stream goes on.
func TestDescribeGapNamesTheOriginIdsAMirrorLost(t *testing.T) {
	next := uint64(11)
	got := describeGap(bus.GapData{Reason: bus.GapUpstreamLost, LastDeliveredID: 10, EarliestAvailableID: &next, LastID: 40, OriginFrom: 11, OriginTo: 4747})
	for _, want := range []string{"events 11–4747", "origin of this mirror", "continuing from 11"} {
		if !strings.Contains(got, want) {
			t.Errorf("describeGap = %q, want it to contain %q", got, want)
		}
	}
	got = describeGap(bus.GapData{Reason: bus.GapUpstreamLost, LastDeliveredID: 10, EarliestAvailableID: &next, OriginFrom: 3, OriginTo: 3})
	if !strings.Contains(got, "event 3 ") {
		t.Errorf("describeGap of one id = %q", got)
	}
}
