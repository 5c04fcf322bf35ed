package bus_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
)

func newBusPair(t testing.TB) (session, global *bus.Bus) {
	t.Helper()
	session, err := bus.New(bus.Options{Session: bustest.SessionID("s")})
	if err != nil {
		t.Fatal(err)
	}
	global, err = bus.New(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { session.Close(); global.Close() })
	return session, global
}

// copyOf publishes ev on session and its copy on global with
// PublishCopies, and returns both frames as subscribers get them.
func copyOf(t testing.TB, session, global *bus.Bus, ev bus.Event) (sf, gf *bus.Frame) {
	t.Helper()
	frames, err := session.PublishFrames(nil, ev)
	if err != nil {
		t.Fatalf("PublishFrames: %v", err)
	}
	sub, err := global.Subscribe(t.Context(), bus.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	sub.Take(nil) // stream:ready
	if _, _, err := global.PublishCopies(bus.Copies{From: session, Frames: frames}); err != nil {
		t.Fatalf("PublishCopies: %v", err)
	}
	got, _ := sub.Take(nil)
	if len(got) != 1 {
		t.Fatalf("global bus delivered %d frames, want 1", len(got))
	}
	return frames[0], got[0]
}

// encodedCopy is the copy of ev as the hub built it before copies were
// spliced from the session's frame: the event encoded again on a global
// bus with its session and seq.
func encodedCopy(t testing.TB, ev bus.Event, seq, id uint64) []byte {
	t.Helper()
	g, err := bus.New(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for range id - 1 {
		g.PublishDaemon(bus.Event{Type: bus.TypeReloaded})
	}
	ev.Session, ev.Seq = bustest.SessionID("s"), seq
	frames, err := g.PublishFrames(nil, ev)
	if err != nil {
		t.Fatalf("encoding the copy: %v", err)
	}
	return frames[0].SSE()
}

func TestPublishCopiesServesTheBytesOfAnEncodedCopyAndCarriesItsCopyOf(t *testing.T) {
	session, global := newBusPair(t)
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	global.PublishDaemon(bus.Event{Type: bus.TypeReloaded}) // global ids differ from session ids
	tests := []struct {
		name string
		ev   bus.Event
	}{
		{"null data", bus.Event{Type: bustest.Type("a:b"), Time: at}},
		{"object with spaces", bus.Event{Type: bustest.Type("build:step"), Data: json.RawMessage(`{"n": 3, "s":"\"session\":\"x\""}`), Time: at}},
		{"originator", bus.Event{Type: bustest.Type("x:y"), Data: json.RawMessage(`[1,2]`), Originator: "cli-\"9\"", Time: at}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sf, gf := copyOf(t, session, global, tt.ev)
			if want := encodedCopy(t, tt.ev, sf.ID, gf.ID); !bytes.Equal(gf.SSE(), want) {
				t.Errorf("copy:\n%s\nwant, as encoded from the event:\n%s", gf.SSE(), want)
			}
			o, ok := gf.CopyOf()
			if want := (bus.CopyOf{Session: "s", Epoch: session.Epoch(), Seq: sf.ID}); !ok || o != want {
				t.Errorf("CopyOf = %+v, %v; want %+v, true", o, ok, want)
			}
			env, ok := bus.AppendGlobalEnvelope(nil, sf.Type, sf.JSON(), gf.ID)
			if !ok || !bytes.Equal(env, gf.JSON()) {
				t.Errorf("AppendGlobalEnvelope = %s, %v; want %s", env, ok, gf.JSON())
			}
		})
	}
}

func TestOnlyPublishCopiesGivesAFrameACopyOf(t *testing.T) {
	session, global := newBusPair(t)
	ev := bus.Event{Type: bustest.Type("a:b"), Data: json.RawMessage(`1`)}
	sf, gf := copyOf(t, session, global, ev)
	ev.Session, ev.Seq = bustest.SessionID("s"), sf.ID
	sub := subscribe(t, global, bus.SubscribeOptions{})
	sub.Take(nil) // stream:ready
	if _, _, err := global.PublishDaemon(bus.Event{Type: bus.TypeReloaded}); err != nil {
		t.Fatal(err)
	}
	daemon, _ := sub.Take(nil)
	sub.Close()
	tests := []struct {
		name string
		f    *bus.Frame
	}{
		{"a session's event", sf},
		{"an event of the copy's shape published on the global bus", publishedFrame(t, global, ev)},
		{"a daemon event", daemon[0]},
		{"a copy rebuilt from its envelope", bus.NewFrame(gf.ID, gf.Type, gf.JSON())},
		{"a reserved frame", bus.ErrorFrame("s", "bad", "x")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if o, ok := tt.f.CopyOf(); ok {
				t.Errorf("CopyOf of %s = %+v, want none", tt.f.JSON(), o)
			}
		})
	}
}

func TestPublishCopiesRefusesWhatIsNotAnEventOfItsSession(t *testing.T) {
	session, global := newBusPair(t)
	other, err := bus.New(bus.Options{Session: bustest.SessionID("other")})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ev := bus.Event{Type: bustest.Type("a:b"), Data: json.RawMessage(`1`)}
	sf, gf := copyOf(t, session, global, ev)
	of, err := other.PublishFrames(nil, ev)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		b    *bus.Bus
		c    bus.Copies
	}{
		{"an event of another session", global, bus.Copies{From: session, Frames: of}},
		{"a copy", global, bus.Copies{From: session, Frames: []*bus.Frame{gf}}},
		{"a reserved frame", global, bus.Copies{From: session, Frames: []*bus.Frame{bus.ErrorFrame("s", "bad", "x")}}},
		{"a frame whose id is not its envelope's", global, bus.Copies{From: session, Frames: []*bus.Frame{bus.NewFrame(sf.ID+1, sf.Type, sf.JSON())}}},
		{"onto a session's bus", other, bus.Copies{From: session, Frames: []*bus.Frame{sf}}},
		{"from no bus", global, bus.Copies{Frames: []*bus.Frame{sf}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.b.LastID()
			// A good frame first: the batch is all or nothing.
			_, _, err := tt.b.PublishCopies(bus.Copies{From: session, Frames: []*bus.Frame{sf}}, tt.c)
			var ie *bus.InputError
			if !errors.As(err, &ie) {
				t.Errorf("PublishCopies: %v, want an *InputError", err)
			}
			if got := tt.b.LastID(); got != before {
				t.Errorf("lastId %d after a refused batch, want %d", got, before)
			}
		})
	}
	t.Run("nothing", func(t *testing.T) {
		var ie *bus.InputError
		if _, _, err := global.PublishCopies(bus.Copies{From: session}); !errors.As(err, &ie) {
			t.Errorf("PublishCopies of no frame: %v, want an *InputError", err)
		}
	})
	t.Run("events and copies in one batch", func(t *testing.T) {
		before := global.LastID()
		_, err := global.Stage(bus.Batch{Events: []bus.Event{ev}, Copies: []bus.Copies{{From: session, Frames: []*bus.Frame{sf}}}})
		var ie *bus.InputError
		if !errors.As(err, &ie) {
			t.Errorf("Stage of events and copies: %v, want an *InputError", err)
		}
		if got := global.LastID(); got != before {
			t.Errorf("lastId %d after a refused batch, want %d", got, before)
		}
	})
}

// FuzzGlobalCopy publishes arbitrary events and their global copies: the
// copy is always the bytes of the event encoded again as a copy, and a
// journal's rebuild gives them exactly; arbitrary envelopes never make
// AppendGlobalEnvelope panic.
func FuzzGlobalCopy(f *testing.F) {
	f.Add("a:b", []byte(`{"x": [1, "\"seq\":2"]}`), "", int64(0))
	f.Add("z:y", []byte(`null`), "orig", int64(1<<40))
	f.Fuzz(func(t *testing.T, typ string, data []byte, originator string, ms int64) {
		bus.AppendGlobalEnvelope(nil, typ, data, 1)
		session, global := newBusPair(t)
		ev := bus.Event{Type: bustest.Type(typ), Data: data, Originator: originator, Time: time.UnixMilli(ms)}
		if _, _, err := session.Publish(ev); err != nil {
			return // refused: nothing to copy
		}
		sf, gf := copyOf(t, session, global, ev)
		if want := encodedCopy(t, ev, sf.ID, gf.ID); !bytes.Equal(gf.SSE(), want) {
			t.Fatalf("copy:\n%s\nwant:\n%s", gf.SSE(), want)
		}
		if env, ok := bus.AppendGlobalEnvelope(nil, sf.Type, sf.JSON(), gf.ID); !ok || !bytes.Equal(env, gf.JSON()) {
			t.Fatalf("AppendGlobalEnvelope = %s, %v; want %s", env, ok, gf.JSON())
		}
	})
}

// BenchmarkGlobalCopy compares the two ways of putting a session's event on
// the global bus: splicing its frame (PublishCopies) and encoding the event
// again (Publish with Session and Seq).
func BenchmarkGlobalCopy(b *testing.B) {
	session, global := newBusPair(b)
	ev := bus.Event{Type: bustest.Type("bench:event"), Data: json.RawMessage(`{"n":1,"pad":"` + string(bytes.Repeat([]byte("p"), 260)) + `"}`), Time: time.Now()}
	frames, err := session.PublishFrames(nil, ev)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("PublishCopies", func(b *testing.B) {
		b.ReportAllocs()
		c := bus.Copies{From: session, Frames: frames}
		for b.Loop() {
			global.PublishCopies(c)
		}
	})
	b.Run("Encode", func(b *testing.B) {
		b.ReportAllocs()
		ev.Session, ev.Seq = bustest.SessionID("s"), frames[0].ID
		for b.Loop() {
			global.Publish(ev)
		}
	})
}
