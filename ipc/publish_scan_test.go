package ipc

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// FuzzScanPublish: the fast path of decodePublish never accepts what the
// reference decoder (encoding/json) refuses, and what it accepts it reads
// the same: the same types and the same data bytes.
func FuzzScanPublish(f *testing.F) {
	addPublishSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte, ndjson bool) {
		const maxEventBytes = 1 << 10
		fast, ok := scanPublish(body, ndjson, maxEventBytes, DefaultMaxBatch)
		if !ok {
			return
		}
		ref, err := decodePublishReference(body, ndjson, maxEventBytes, DefaultMaxBatch)
		if err != nil {
			t.Fatalf("scanPublish(%q) accepted %d events; the reference refuses: %v", body, len(fast), err)
		}
		if len(fast) != len(ref) {
			t.Fatalf("scanPublish(%q) = %d events, reference %d", body, len(fast), len(ref))
		}
		for i := range fast {
			if fast[i].Type != ref[i].Type || !bytes.Equal(fast[i].Data, ref[i].Data) {
				t.Fatalf("scanPublish(%q) event %d = %q %q, reference %q %q", body, i, fast[i].Type, fast[i].Data, ref[i].Type, ref[i].Data)
			}
		}
	})
}

// TestScanPublishTakesTheCommonBodies pins that the fast path, not the
// reference decoder, reads what clients usually send.
func TestScanPublishTakesTheCommonBodies(t *testing.T) {
	for _, tc := range []struct {
		name   string
		body   string
		ndjson bool
		n      int
	}{
		{"one event", `{"type":"build:step","data":{"n":3,"s":"x\"y","f":[1.5e3,-0,true,null]}}`, false, 1},
		{"no data", `{"type":"a:b"}`, false, 1},
		{"array with white space", "[\n {\"type\": \"a:b\", \"data\": 1},\n {\"data\": \"é\", \"type\": \"a:c\"}\n]\n", false, 2},
		{"ndjson", "{\"type\":\"a:b\"}\r\n\n{\"type\":\"a:c\",\"data\":{}}", true, 2},
		{"a thousand", "[" + strings.Repeat(`{"type":"a:b","data":{"pad":"xxxx"}},`, 999) + `{"type":"a:b"}]`, false, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events, ok := scanPublish([]byte(tc.body), tc.ndjson, 1<<20, DefaultMaxBatch)
			if !ok || len(events) != tc.n {
				t.Fatalf("scanPublish = %d events, %v; want %d, true", len(events), ok, tc.n)
			}
		})
	}
}

// TestScanPublishLeavesErrorsToTheReference pins that every refusal,
// whatever its kind, comes from the reference decoder with its message.
func TestScanPublishLeavesErrorsToTheReference(t *testing.T) {
	for _, body := range []string{
		`{"type":"a:b","data":{bad}}`, `{"type":"stream:x"}`, `{"type":"a:b","id":1}`, `[` + strings.Repeat(`{"type":"a:b"},`, 1000) + `{"type":"a:b"}]`,
		`{"type":"a:b","data":"` + strings.Repeat("x", 2000) + `"}`, ``, `[]`,
	} {
		if _, ok := scanPublish([]byte(body), false, 1<<10, DefaultMaxBatch); ok {
			t.Errorf("scanPublish(%.60q) accepted a body the reference refuses", body)
		}
	}
}

// TestTypeCacheParsesOnceAndRefusesAsParseTypeDoes: a type read through
// the cache is what bus.ParseType gives, a bad or reserved one is refused
// every time and never cached, and the cache stops growing at its bound
// while types past it still parse.
func TestTypeCacheParsesOnceAndRefusesAsParseTypeDoes(t *testing.T) {
	for _, s := range []string{"build:step", "build:step", "a:b"} {
		got, err := parseTypeBytes([]byte(s))
		if err != nil || got.String() != s {
			t.Errorf("parseTypeBytes(%q) = %v, %v", s, got, err)
		}
	}
	for _, s := range []string{"stream:ready", "localbus:x", "nofamily", "a:", ""} {
		for range 2 {
			if _, err := parseTypeBytes([]byte(s)); err == nil {
				t.Errorf("parseTypeBytes(%q) accepted it", s)
			}
		}
		if m := typeCache.Load(); m != nil {
			if _, ok := (*m)[s]; ok {
				t.Errorf("refused type %q is cached", s)
			}
		}
	}
	for i := range 2 * maxCachedTypes {
		s := fmt.Sprintf("fill:t%d", i)
		if got, err := parseTypeBytes([]byte(s)); err != nil || got.String() != s {
			t.Fatalf("parseTypeBytes(%q) = %v, %v", s, got, err)
		}
	}
	if n := len(*typeCache.Load()); n != maxCachedTypes {
		t.Errorf("%d types cached, want the bound %d", n, maxCachedTypes)
	}
}
