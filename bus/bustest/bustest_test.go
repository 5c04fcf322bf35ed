package bustest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeTB records fatal failures instead of stopping the test.
type fakeTB struct{ failures []string }

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failures = append(f.failures, fmt.Sprintf(format, args...))
}

func setup(t *testing.T) (*bus.Bus, *bus.Subscription) {
	t.Helper()
	b, err := bus.New(bus.Options{Session: bustest.SessionID("s"), Epoch: "e"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	s, err := b.Subscribe(context.Background(), bus.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return b, s
}

func TestDrainTakesWhatIsQueued(t *testing.T) {
	t.Parallel()
	b, s := setup(t)
	b.Publish(bus.Event{Type: bustest.Type("a:x"), Data: json.RawMessage(`{"k":1}`)})
	envs, ended := bustest.Drain(t, s)
	if ended {
		t.Error("Drain reported the end of an open stream")
	}
	if diff := cmp.Diff([]string{bus.TypeReady, "a:x"}, bustest.Types(envs)); diff != "" {
		t.Errorf("Types mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint64{1}, bustest.IDs(envs)); diff != "" {
		t.Errorf("IDs mismatch (-want +got):\n%s", diff)
	}
	if got := string(envs[1].Data); got != `{"k":1}` || envs[1].Session != "s" || envs[1].V != 1 {
		t.Errorf("envelope = %+v", envs[1])
	}
	if envs, _ := bustest.Drain(t, s); len(envs) != 0 {
		t.Errorf("second Drain = %v, want nothing", bustest.Types(envs))
	}
}

func TestCollectWaitsForFrames(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, s := setup(t)
		go func() {
			for i := range 3 {
				time.Sleep(time.Second) // fake time: events arrive over 3 s
				b.Publish(bus.Event{Type: bustest.Type(fmt.Sprintf("a:e%d", i))})
			}
		}()
		envs, ended := bustest.Collect(t, s, 4, time.Minute)
		if ended {
			t.Error("Collect reported the end of an open stream")
		}
		if diff := cmp.Diff([]string{bus.TypeReady, "a:e0", "a:e1", "a:e2"}, bustest.Types(envs)); diff != "" {
			t.Errorf("Types mismatch (-want +got):\n%s", diff)
		}
	})
}

func TestCollectStopsAtTheEnd(t *testing.T) {
	t.Parallel()
	b, s := setup(t)
	b.Publish(bus.Event{Type: bustest.Type("a:x")})
	b.Close()
	envs, ended := bustest.Collect(t, s, 100, time.Minute)
	if !ended {
		t.Error("Collect did not report the end")
	}
	if diff := cmp.Diff([]string{bus.TypeReady, "a:x", bus.TypeClosed}, bustest.Types(envs)); diff != "" {
		t.Errorf("Types mismatch (-want +got):\n%s", diff)
	}
}

func TestCollectFailsOnTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		_, s := setup(t)
		var ft fakeTB
		envs, ended := bustest.Collect(&ft, s, 2, 5*time.Second)
		if len(ft.failures) != 1 || !strings.Contains(ft.failures[0], "2 frames") || !strings.Contains(ft.failures[0], bus.TypeReady) {
			t.Errorf("failures = %q, want one naming the 2 frames wanted and what came", ft.failures)
		}
		if ended || len(envs) != 1 {
			t.Errorf("Collect = %v, %v; want stream:ready, not ended", bustest.Types(envs), ended)
		}
	})
}

func TestCollectEnd(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, s := setup(t)
		go func() {
			time.Sleep(time.Second)
			b.EndStreams(bus.EndReload)
		}()
		envs := bustest.CollectEnd(t, s, time.Minute)
		last := envs[len(envs)-1]
		if got := bustest.Data[bus.ClosedData](t, last); got.Reason != "reload" {
			t.Errorf("closed data = %+v, want reason reload", got)
		}

		_, open := setup(t)
		var ft fakeTB
		bustest.CollectEnd(&ft, open, time.Second)
		if len(ft.failures) != 1 || !strings.Contains(ft.failures[0], "end of the stream") {
			t.Errorf("failures = %q, want one about the end of the stream", ft.failures)
		}
	})
}

func TestDataRefusesUnknownFields(t *testing.T) {
	t.Parallel()
	_, s := setup(t)
	envs, _ := bustest.Drain(t, s)
	ready := bustest.Data[bus.ReadyData](t, envs[0])
	if ready.Epoch != "e" || ready.Cursor == nil || *ready.Cursor != 0 {
		t.Errorf("ready = %+v", ready)
	}
	var ft fakeTB
	bustest.Data[bus.GapData](&ft, envs[0])
	if len(ft.failures) != 1 {
		t.Errorf("Data[GapData](stream:ready) failures = %q, want one", ft.failures)
	}
}

// exitTB records a fatal failure and ends its goroutine, as FailNow does.
type exitTB struct{ failure string }

func (f *exitTB) Helper() {}
func (f *exitTB) Fatalf(format string, args ...any) {
	f.failure = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestEventuallyShowingFailsWithTheState(t *testing.T) {
	t.Parallel()
	tb := &exitTB{}
	done := make(chan struct{})
	polls := 0
	go func() {
		defer close(done)
		bustest.Eventually(bustest.Showing(tb, func() string { return "the state" }), 5*time.Millisecond, "the impossible", func() bool {
			polls++
			return false
		})
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Eventually did not give up after 5 ms")
	}
	if want := "timed out after 5ms waiting for the impossible; now:\nthe state"; tb.failure != want || polls < 2 {
		t.Errorf("failure %q after %d polls, want %q after more than one", tb.failure, polls, want)
	}
}
