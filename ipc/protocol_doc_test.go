package ipc_test

import (
	"encoding/json"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
	"github.com/localbus/localbus/ipc/wire/grammar"
)

// docFrameFields returns the data fields protocol.md's reserved-frame table
// lists for typ: always lists the fields every such frame carries, and
// sometimes those marked "(… only)", which only some carry.
func docFrameFields(tb testing.TB, typ string) (always, sometimes []string) {
	tb.Helper()
	doc, err := os.ReadFile("protocol.md")
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.Lines(string(doc)) {
		if !strings.HasPrefix(line, "| `"+typ+"` |") {
			continue
		}
		cols := strings.Split(strings.TrimSpace(line), "|")
		if len(cols) < 5 {
			tb.Fatalf("protocol.md row of %s: %q has too few columns", typ, line)
		}
		for item := range splitTopLevel(cols[3]) {
			name, qual, _ := strings.Cut(strings.TrimSpace(item), "(")
			name = strings.Trim(strings.TrimSpace(name), "`")
			if strings.Contains(qual, "only") {
				sometimes = append(sometimes, name)
			} else {
				always = append(always, name)
			}
		}
		return always, sometimes
	}
	tb.Fatalf("protocol.md has no row for %s", typ)
	return nil, nil
}

// splitTopLevel yields the comma-separated items of s, ignoring commas
// inside parentheses.
func splitTopLevel(s string) func(func(string) bool) {
	return func(yield func(string) bool) {
		depth, start := 0, 0
		for i, r := range s {
			switch r {
			case '(':
				depth++
			case ')':
				depth--
			case ',':
				if depth == 0 {
					if !yield(s[start:i]) {
						return
					}
					start = i + 1
				}
			}
		}
		yield(s[start:])
	}
}

// laggedData evicts a subscriber of a bus with the given limits by
// publishing n events of size bytes of data it never takes, and returns
// the data of its stream:lagged frame.
func laggedData(tb testing.TB, opts bus.Options, n, size int) map[string]json.RawMessage {
	tb.Helper()
	b, err := bus.New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	defer b.Close()
	sub, err := b.Subscribe(nil, bus.SubscribeOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	defer sub.Close()
	data, _ := json.Marshal(strings.Repeat("x", size))
	for range n {
		if _, _, err := b.Publish(bus.Event{Type: bustest.Type("a:b"), Data: data}); err != nil {
			tb.Fatal(err)
		}
	}
	frames, ended := sub.Take(nil)
	if !ended || len(frames) == 0 || frames[len(frames)-1].Type != bus.TypeLagged {
		tb.Fatalf("after %d events of %d bytes: ended %v, want the stream to end with stream:lagged", n, size, ended)
	}
	var env struct{ Data map[string]json.RawMessage }
	if err := json.Unmarshal(frames[len(frames)-1].JSON(), &env); err != nil {
		tb.Fatal(err)
	}
	return env.Data
}

// TestProtocolDocListsLaggedFieldsAsSent pins ipc/protocol.md to what the
// bus sends, as SPEC §4 says: a stream:lagged for queue_overflow carries
// every field listed for every such frame and nothing else, and one for
// queue_bytes_overflow carries those plus the fields marked as bytes
// overflow only (eventBytes).
func TestProtocolDocListsLaggedFieldsAsSent(t *testing.T) {
	always, sometimes := docFrameFields(t, bus.TypeLagged)
	queue := laggedData(t, bus.Options{MaxQueued: grammar.MinMaxQueued}, grammar.MinMaxQueued+1, 1)
	if got := slices.Sorted(maps.Keys(queue)); !slices.Equal(got, slices.Sorted(slices.Values(always))) {
		t.Errorf("queue_overflow stream:lagged data fields %v; protocol.md lists %v for every one (and %v for some)", got, always, sometimes)
	}
	bytes := laggedData(t, bus.Options{MaxQueuedBytes: 1024}, 2, 600)
	all := slices.Sorted(slices.Values(append(slices.Clone(always), sometimes...)))
	if got := slices.Sorted(maps.Keys(bytes)); !slices.Equal(got, all) {
		t.Errorf("queue_bytes_overflow stream:lagged data fields %v; protocol.md lists %v", got, all)
	}
	if !slices.Contains(sometimes, "eventBytes") {
		t.Errorf("protocol.md does not mark eventBytes as bytes overflow only (SPEC §4); it lists %v for every stream:lagged", always)
	}
}
