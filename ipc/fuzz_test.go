package ipc

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
)

// publishSeeds is the corpus of both publish-body targets, FuzzDecodePublish
// and FuzzScanPublish: bodies, each with whether it is sent as NDJSON.
var publishSeeds = []struct {
	body   string
	ndjson bool
}{
	{`{"type":"build:step","data":{"n":1}}`, false},
	{`[{"type":"a:b"},{"type":"a:c","data":null}]`, false},
	{"{\"type\":\"a:b\"}\n\n{\"type\":\"a:c\",\"data\":[1]}\r\n", true},
	{`{"type":"stream:ready"}`, false},
	{`{"type":"localbus:x"}`, false},
	{`[]`, false},
	{``, true},
	{`{"type":"a:b","extra":1}`, false},
	{`{"type":"a:b"} {"type":"a:c"}`, false},
	{`[{"type":"a:b"},`, false},
	{`{"type":"a:b","data":"\u2028"}`, false},
	{"{\"type\":\"a:b\",\"data\":\"\xff\"}", false},
	{`[[{"type":"a:b"}]]`, false},
	{`{"type":null}`, false},
	{` [ {"type":"a:b"} , {"data":null,"type":"a:c"} ] `, false},
	{"{\"type\":\"a:b\"}\n\n{\"type\":\"a:c\",\"data\":[1,-2.5e+3,true,false,null,\"\\u00e9\\n\"]}\r\n", true},
	{`{"type":"a:b","data":{"a":{"b":[{}]}},"data":1}`, false},
	{`{"Type":"a:b"}`, false},
	{`{"type":"a:\u0062"}`, false},
	{`{"type":"a:b","data":01}`, false},
	{`{"type":"a:b","data":1.}`, false},
	{`{"type":"a:b","data":"\x"}`, false},
	{`{"type":"a:b","data":[1,]}`, false},
	{`{"type":"a:b",}`, false},
	{`[{"type":"a:b"}]x`, false},
	{"{\"type\":\"a:b\",\"data\":\"\t\"}", false},
	{`{}`, false},
}

// addPublishSeeds adds publishSeeds to f's corpus.
func addPublishSeeds(f *testing.F) {
	for _, seed := range publishSeeds {
		f.Add([]byte(seed.body), seed.ndjson)
	}
}

// FuzzDecodePublish: decodePublish never panics; what it accepts is 1 to
// 1000 events, each of a publishable type with JSON data; what it refuses
// is a 400 or a 413 *Error.
func FuzzDecodePublish(f *testing.F) {
	addPublishSeeds(f)
	const maxEventBytes = 1 << 10
	f.Fuzz(func(t *testing.T, body []byte, ndjson bool) {
		events, err := decodePublish(body, ndjson, maxEventBytes, DefaultMaxBatch)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("decodePublish(%q) = %v, want an *Error", body, err)
			}
			if e.Status != http.StatusBadRequest && e.Status != http.StatusRequestEntityTooLarge {
				t.Fatalf("decodePublish(%q) = %d %s, want 400 or 413", body, e.Status, e.Code)
			}
			if events != nil {
				t.Fatalf("decodePublish(%q) refused with events %v", body, events)
			}
			return
		}
		if len(events) < 1 || len(events) > DefaultMaxBatch {
			t.Fatalf("decodePublish(%q) accepted %d events, want 1 to %d", body, len(events), DefaultMaxBatch)
		}
		for i, ev := range events {
			if ev.Type.IsZero() {
				t.Fatalf("decodePublish(%q) event %d has no type", body, i)
			}
			if len(ev.Data) > 0 && !json.Valid(ev.Data) {
				t.Fatalf("decodePublish(%q) event %d data %q is not JSON", body, i, ev.Data)
			}
			if int64(len(ev.Data)) > maxEventBytes {
				t.Fatalf("decodePublish(%q) event %d data is %d bytes, over the %d limit", body, i, len(ev.Data), maxEventBytes)
			}
		}
	})
}

// FuzzParseControl: parseControl never panics; a frame it accepts has a
// known op and types that a filter was built from (or null for set only),
// and applying it to a subscription never panics either.
func FuzzParseControl(f *testing.F) {
	for _, seed := range []string{
		`{"op":"subscribe","types":["build:*"]}`,
		`{"op":"unsubscribe","types":["a:b","c:d"]}`,
		`{"op":"set","types":null}`,
		`{"op":"set","types":["a:b"]}`,
		`{"op":"subscribe","types":null}`,
		`{"op":"subscribe","types":["stream:ready"]}`,
		`{"op":"subscribe","types":[""]}`,
		`{"op":"subscribe","types":[]}`,
		`{"op":"frobnicate","types":["a:b"]}`,
		`{"op":"set"}`,
		`{"op":"set","types":["a:b"],"x":1}`,
		`{"op":"set","types":"a:b"}`,
		`{"op":"set","types":[1]}`,
		`{"op":"set","types":null} {}`,
		`{"op":`,
		`[]`,
		`null`,
		``,
	} {
		f.Add([]byte(seed))
	}
	b, err := bus.New(bus.Options{Session: bustest.SessionID("fuzz")})
	if err != nil {
		f.Fatal(err)
	}
	defer b.Close()
	f.Fuzz(func(t *testing.T, data []byte) {
		cf, err := parseControl(data)
		if err == nil {
			switch cf.Op {
			case opSubscribe, opUnsubscribe:
				if cf.Null || cf.Types == nil {
					t.Fatalf("parseControl(%q) = %+v, want types for %s", data, cf, cf.Op)
				}
			case opSet:
				if cf.Null != (cf.Types == nil) {
					t.Fatalf("parseControl(%q) = %+v: null and types disagree", data, cf)
				}
			default:
				t.Fatalf("parseControl(%q) accepted op %q", data, cf.Op)
			}
			for _, typ := range cf.Types.Types() {
				if bus.IsReservedFamily(bus.FamilyOf(typ)) {
					t.Fatalf("parseControl(%q) accepted reserved type %q", data, typ)
				}
			}
		}

		// Applying it never panics, always answers, and a refusal leaves the
		// filter as it was.
		for _, family := range []string{"", "build"} {
			start, _ := bus.NewFilter([]string{"build:a", "build:b"})
			var fam bus.Family
			if family != "" {
				fam = bustest.Family(t, family)
			}
			sub, err := b.Subscribe(nil, bus.SubscribeOptions{Family: fam, Filter: start})
			if err != nil {
				t.Fatal(err)
			}
			reply := applyControl(sub, nil, data)
			var r struct {
				Op      string    `json:"op"`
				Types   *[]string `json:"types"`
				Message string    `json:"message"`
			}
			if err := json.Unmarshal(reply, &r); err != nil {
				t.Fatalf("reply %q to %q: %v", reply, data, err)
			}
			switch r.Op {
			case "subscribed":
			case "error":
				if sub.Filter() != start {
					t.Fatalf("refused %q (%s) but the filter changed to %v", data, r.Message, sub.Filter().Types())
				}
			default:
				t.Fatalf("reply %q to %q: unknown op", reply, data)
			}
			if !sub.Filter().Within(family) && family != "" {
				t.Fatalf("after %q the family %s stream has filter %v", data, family, sub.Filter().Types())
			}
			sub.Close()
		}
	})
}
