package upstream

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
)

// TestScanEnvelopeReadsWhatJSONReads: the fast path reads from envelopes
// the bus encoded exactly what json.Unmarshal reads, data that holds the
// timestamp key and originators with escapes included, and declines
// every other shape, which decodeEnvelope then decodes as JSON.
func TestScanEnvelopeReadsWhatJSONReads(t *testing.T) {
	b, err := bus.New(bus.Options{Session: bustest.SessionID("s1")})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	at := time.Date(2026, 12, 6, 13, 0, 0, 123_000_000, time.UTC)
	var frames []*bus.Frame
	for _, ev := range []bus.Event{
		{Type: bustest.Type("build:step"), Data: json.RawMessage(`{"n":1}`)},
		{Type: bustest.Type("build:step")},
		{Type: bustest.Type("build:step"), Data: json.RawMessage(`{"a":",\"timestamp\":\"x","timestamp":"2020-01-01T00:00:00Z"}`)},
		{Type: bustest.Type("build:step"), Data: json.RawMessage(`"s"`), Originator: `ci "7" ` + "\u2028\x01é"},
		{Type: bustest.Type("a:b"), Data: json.RawMessage(`[1,2,{"x":null}]`), Originator: `,"timestamp":"`},
	} {
		ev.Time = at
		if _, _, err := b.Publish(ev); err != nil {
			t.Fatal(err)
		}
		frames = append(frames, b.LastFrame())
	}
	for _, f := range frames {
		env := f.JSON()
		got, ok := scanEnvelope(env)
		if !ok {
			t.Errorf("scanEnvelope(%s) declined", env)
			continue
		}
		var want bus.Envelope
		if err := json.Unmarshal(env, &want); err != nil {
			t.Fatal(err)
		}
		if got.Type.String() != want.Type || string(got.Data) != string(want.Data) || got.Originator != want.Originator || !got.Time.Equal(at) {
			t.Errorf("scanEnvelope(%s) = %+v, want %+v", env, got, want)
		}
	}
	for _, env := range []string{
		`{"v":1,"type":"a:b","data":1,"timestamp":"2026-12-06T13:00:00.000Z"}`,
		`{"id":1,"v":1,"type":"a:b","data":1,"timestamp":"2026-12-06T13:00:00.000Z"}`,
		`{"id":1,"v":1,"type":"a\u003ab","session":"s","data":1,"timestamp":"2026-12-06T13:00:00.000Z"}`,
		`{"id":1,"v":1,"type":"a:b","session":"s","data":1,"timestamp":"2026-12-06T13:00:00.000Z","extra":2}`,
		`{"id":1,"v":1,"type":"a:b","session":"s","data":1,"timestamp":"yesterday"}`,
		`{"id":1, "v":1,"type":"a:b","session":"s","data":1,"timestamp":"2026-12-06T13:00:00.000Z"}`,
	} {
		if ev, ok := scanEnvelope([]byte(env)); ok {
			t.Errorf("scanEnvelope(%s) = %+v, want it declined", env, ev)
		}
		got, ok := decodeEnvelope([]byte(env))
		var want bus.Envelope
		if json.Unmarshal([]byte(env), &want) != nil || !ok {
			t.Fatalf("decodeEnvelope(%s) = %v", env, ok)
		}
		if diff := cmp.Diff(want.Type+string(want.Data), got.Type.String()+string(got.Data)); diff != "" {
			t.Errorf("decodeEnvelope(%s): %s", env, diff)
		}
	}
	for _, env := range []string{
		`{"id":1,"v":1,"type":"localbus:reloaded","session":"s","data":1,"timestamp":"2026-12-06T13:00:00.000Z"}`,
		`{"id":1,"v":1,"type":"stream:ready","session":"s","data":1,"timestamp":"2026-12-06T13:00:00.000Z"}`,
		`{"id":1,"v":1,"type":"nope","session":"s","data":1,"timestamp":"2026-12-06T13:00:00.000Z"}`,
		`{"id":1, "v":1,"type":"a:b c","session":"s","data":1,"timestamp":"2026-12-06T13:00:00.000Z"}`,
	} {
		if ev, ok := decodeEnvelope([]byte(env)); ok {
			t.Errorf("decodeEnvelope(%s) = %+v, want it refused: a mirror publishes no type a client could not", env, ev)
		}
	}
	if _, ok := decodeEnvelope([]byte(`not json`)); ok {
		t.Error("decodeEnvelope accepted what is not JSON")
	}
}
