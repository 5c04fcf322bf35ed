package bus_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
)

func TestNewFrameRebuildsPublishedFrame(t *testing.T) {
	b, err := bus.New(bus.Options{Session: bustest.SessionID("s")})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tests := []struct {
		name string
		ev   bus.Event
	}{
		{"null data", bus.Event{Type: bustest.Type("a:b")}},
		{"object", bus.Event{Type: bustest.Type("build:step"), Data: json.RawMessage(`{"n": 3}`)}},
		{"originator", bus.Event{Type: bustest.Type("x:y"), Data: json.RawMessage(`"\u2028"`), Originator: "cli-9"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := publishedFrame(t, b, tt.ev)
			g := bus.NewFrame(f.ID, f.Type, f.JSON())
			if !bytes.Equal(g.SSE(), f.SSE()) || !bytes.Equal(g.JSON(), f.JSON()) || g.ID != f.ID || g.Type != f.Type {
				t.Errorf("NewFrame(%d, %q, JSON) = %q, want %q", f.ID, f.Type, g.SSE(), f.SSE())
			}
			if got := bus.FrameSize(f.ID, f.Type, len(f.JSON())); got != f.Size() {
				t.Errorf("FrameSize = %d, want %d", got, f.Size())
			}
		})
	}
}
