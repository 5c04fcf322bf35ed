package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
)

func TestMain(m *testing.M) {
	flag.Parse()
	// rapid writes a fail file under testdata/ when a property fails; tests
	// write nothing outside temporary directories, and the -rapid.seed it
	// prints reproduces the failure as well. Asking for the flag or
	// RAPID_NOFAILFILE explicitly still decides.
	explicit := os.Getenv("RAPID_NOFAILFILE") != ""
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "rapid.nofailfile" })
	if !explicit {
		flag.Set("rapid.nofailfile", "true")
	}
	goleak.VerifyTestMain(m)
}

// wait bounds every wait in these tests.
const wait = 10 * time.Second

// testEpoch is the epoch of buses made by newBus unless a test sets one.
const testEpoch = "e0"

// fixedTime is the publish time of events made by ev, so encodings are exact.
var fixedTime = time.Date(2026, 8, 22, 10, 0, 0, 123_000_000, time.UTC)

func ptr[T any](v T) *T { return &v }

// newBus returns a bus closed when the test ends. Session "s" and epoch
// testEpoch unless opts say otherwise.
func newBus(tb testing.TB, opts bus.Options) *bus.Bus {
	tb.Helper()
	if opts.Epoch == "" {
		opts.Epoch = testEpoch
	}
	b, err := bus.New(opts)
	if err != nil {
		tb.Fatalf("bus.New(%+v) = %v", opts, err)
	}
	tb.Cleanup(b.Close)
	return b
}

// subscribe subscribes with a context that lives as long as the test and
// closes the subscription when the test ends.
func subscribe(tb testing.TB, b *bus.Bus, opts bus.SubscribeOptions) *bus.Subscription {
	tb.Helper()
	s, err := b.Subscribe(context.Background(), opts)
	if err != nil {
		tb.Fatalf("Subscribe(%+v) = %v", opts, err)
	}
	tb.Cleanup(s.Close)
	return s
}

// ev is an event of type typ with JSON data at fixedTime.
func ev(typ, data string) bus.Event {
	var d json.RawMessage
	if data != "" {
		d = json.RawMessage(data)
	}
	return bus.Event{Type: bustest.Type(typ), Data: d, Time: fixedTime}
}

// publish publishes events and fails the test on error; it returns the last id.
func publish(tb testing.TB, b *bus.Bus, events ...bus.Event) uint64 {
	tb.Helper()
	_, last, err := b.Publish(events...)
	if err != nil {
		tb.Fatalf("Publish(%v) = %v", events, err)
	}
	return last
}

// publishN publishes n events of type typ, data {"n":i}.
func publishN(tb testing.TB, b *bus.Bus, typ string, n int) {
	tb.Helper()
	for i := range n {
		publish(tb, b, ev(typ, fmt.Sprintf(`{"n":%d}`, i)))
	}
}

// take takes what s has queued now and decodes it.
func take(tb testing.TB, s *bus.Subscription) ([]bus.Envelope, bool) {
	tb.Helper()
	return bustest.Drain(tb, s)
}

// summary renders envelopes for comparison: "type#id" for events and
// "type {data}" for reserved frames, data keys sorted. retryMs, which is
// random, is checked to be in [500, 1500) and rendered as "R".
func summary(tb reporter, envs []bus.Envelope) []string {
	tb.Helper()
	out := make([]string, 0, len(envs))
	for _, e := range envs {
		if e.ID != 0 {
			out = append(out, fmt.Sprintf("%s#%d", e.Type, e.ID))
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(e.Data, &m); err != nil {
			tb.Fatalf("%s: data %s: %v", e.Type, e.Data, err)
		}
		if r, ok := m["retryMs"]; ok {
			if f, _ := r.(float64); f < 500 || f >= 1500 {
				tb.Errorf("%s: retryMs = %v, want in [500, 1500)", e.Type, r)
			}
			m["retryMs"] = "R"
		}
		out = append(out, render(e.Type, m))
	}
	return out
}

// render is summary's form of a reserved frame of type typ with data m.
func render(typ string, m map[string]any) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var sb strings.Builder
	for i, k := range keys {
		if i > 0 {
			sb.WriteByte(',')
		}
		v, _ := json.Marshal(m[k])
		fmt.Fprintf(&sb, "%s:%s", k, v)
	}
	return fmt.Sprintf("%s {%s}", typ, sb.String())
}

// reporter is what testing.TB and *rapid.T have in common that summary needs.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// isInputError reports whether err is an *bus.InputError about field.
func isInputError(err error, field string) bool {
	var ie *bus.InputError
	return errors.As(err, &ie) && ie.Field == field
}

// eventually polls cond until it holds or wait passes.
func eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	bustest.Eventually(tb, wait, what, cond)
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
