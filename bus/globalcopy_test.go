package bus_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/localbus/localbus/bus"
)

// copyPair publishes ev on a session bus, then its copy on a global bus as
// the hub does (Session, Seq, the same Time), and returns both frames.
func copyPair(t *testing.T, session, global *bus.Bus, ev bus.Event) (sf, gf *bus.Frame) {
	t.Helper()
	sf = publishedFrame(t, session, ev)
	ev.Session, ev.Seq = "s", sf.ID
	return sf, publishedFrame(t, global, ev)
}

func newBusPair(t *testing.T) (session, global *bus.Bus) {
	t.Helper()
	session, err := bus.New(bus.Options{Session: "s"})
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

func TestGlobalCopyIsRecognisedAndRebuilt(t *testing.T) {
	session, global := newBusPair(t)
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		ev   bus.Event
	}{
		{"null data", bus.Event{Type: "a:b", Time: at}},
		{"object with spaces", bus.Event{Type: "build:step", Data: json.RawMessage(`{"n": 3, "s":"\"session\":\"x\""}`), Time: at}},
		{"originator", bus.Event{Type: "x:y", Data: json.RawMessage(`[1,2]`), Originator: "cli-9", Time: at}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sf, gf := copyPair(t, session, global, tt.ev)
			if !bus.IsGlobalCopy(gf, sf) {
				t.Errorf("IsGlobalCopy(%s, %s) = false", gf.JSON(), sf.JSON())
			}
			env, ok := bus.AppendGlobalEnvelope(nil, sf.Type, sf.JSON(), gf.ID)
			if !ok || !bytes.Equal(env, gf.JSON()) {
				t.Errorf("AppendGlobalEnvelope = %s, %v; want %s", env, ok, gf.JSON())
			}
			if s, seq, ok := bus.GlobalOrigin(gf); !ok || string(s) != "s" || seq != sf.ID {
				t.Errorf("GlobalOrigin = %q, %d, %v; want s, %d, true", s, seq, ok, sf.ID)
			}
		})
	}
}

func TestGlobalCopyRefusesWhatDiffers(t *testing.T) {
	session, global := newBusPair(t)
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	sf := publishedFrame(t, session, bus.Event{Type: "a:b", Data: json.RawMessage(`1`), Time: at})
	copyOf := func(ev bus.Event) *bus.Frame {
		ev.Session = "s"
		if ev.Seq == 0 {
			ev.Seq = sf.ID
		}
		return publishedFrame(t, global, ev)
	}
	tests := []struct {
		name string
		gf   *bus.Frame
	}{
		{"other data", copyOf(bus.Event{Type: "a:b", Data: json.RawMessage(`2`), Time: at})},
		{"other time", copyOf(bus.Event{Type: "a:b", Data: json.RawMessage(`1`), Time: at.Add(time.Millisecond)})},
		{"other type", copyOf(bus.Event{Type: "a:c", Data: json.RawMessage(`1`), Time: at})},
		{"other seq", copyOf(bus.Event{Type: "a:b", Data: json.RawMessage(`1`), Time: at, Seq: sf.ID + 1})},
		{"an originator", copyOf(bus.Event{Type: "a:b", Data: json.RawMessage(`1`), Time: at, Originator: "o"})},
		{"a session event", sf},
		{"a reserved frame", bus.ErrorFrame("s", "bad", "x")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if bus.IsGlobalCopy(tt.gf, sf) {
				t.Errorf("IsGlobalCopy(%s, %s) = true", tt.gf.JSON(), sf.JSON())
			}
		})
	}
	if _, _, ok := bus.GlobalOrigin(sf); ok {
		t.Error("GlobalOrigin of a session's event: ok")
	}
	if _, ok := bus.AppendGlobalEnvelope(nil, "a:b", []byte(`{"id":1,"v":1,"type":"a:b","data":1}`), 5); ok {
		t.Error("AppendGlobalEnvelope of an envelope without a session: ok")
	}
}

// FuzzGlobalCopy publishes arbitrary events and their global copies: the
// copy is always recognised and rebuilt exactly, and arbitrary envelopes
// never make the functions panic.
func FuzzGlobalCopy(f *testing.F) {
	f.Add("a:b", []byte(`{"x": [1, "\"seq\":2"]}`), "", int64(0))
	f.Add("z:y", []byte(`null`), "orig", int64(1<<40))
	f.Fuzz(func(t *testing.T, typ string, data []byte, originator string, ms int64) {
		bus.AppendGlobalEnvelope(nil, typ, data, 1)
		session, global := newBusPair(t)
		ev := bus.Event{Type: typ, Data: data, Originator: originator, Time: time.UnixMilli(ms)}
		if _, _, err := session.Publish(ev); err != nil {
			return // refused: nothing to copy
		}
		sf, gf := copyPair(t, session, global, ev)
		if !bus.IsGlobalCopy(gf, sf) {
			t.Fatalf("IsGlobalCopy(%s, %s) = false", gf.JSON(), sf.JSON())
		}
		if env, ok := bus.AppendGlobalEnvelope(nil, sf.Type, sf.JSON(), gf.ID); !ok || !bytes.Equal(env, gf.JSON()) {
			t.Fatalf("AppendGlobalEnvelope = %s, %v; want %s", env, ok, gf.JSON())
		}
	})
}

func BenchmarkGlobalCopy(b *testing.B) {
	session, _ := bus.New(bus.Options{Session: "pub-1"})
	global, _ := bus.New(bus.Options{})
	defer session.Close()
	defer global.Close()
	ev := bus.Event{Type: "bench:event", Data: json.RawMessage(`{"n":1,"pad":"` + string(bytes.Repeat([]byte("p"), 260)) + `"}`), Time: time.Now()}
	sub, _ := session.Subscribe(b.Context(), bus.SubscribeOptions{})
	gsub, _ := global.Subscribe(b.Context(), bus.SubscribeOptions{})
	sub.Take(nil)
	gsub.Take(nil)
	id, _, _ := session.Publish(ev)
	ev.Session, ev.Seq = "pub-1", id
	global.Publish(ev)
	sf, _ := sub.Take(nil)
	gf, _ := gsub.Take(nil)
	b.Run("GlobalOrigin", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			bus.GlobalOrigin(gf[0])
		}
	})
	b.Run("IsGlobalCopy", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			bus.IsGlobalCopy(gf[0], sf[0])
		}
	})
}
