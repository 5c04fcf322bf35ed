package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/localbus/localbus/ipc/wire"
)

// drawSessionList draws a sessions list with any values the types allow,
// strings of any bytes included.
func drawSessionList(t *rapid.T) wire.SessionList {
	str := rapid.OneOf(rapid.StringMatching(`[a-z0-9-]{0,12}`), rapid.String(),
		rapid.Map(rapid.SliceOf(rapid.Byte()), func(b []byte) string { return string(b) }))
	num := rapid.OneOf(rapid.Float64Range(-1e300, 1e300), rapid.Float64Range(-1e-6, 1e-6), rapid.SampledFrom([]float64{0, 0.1, 1e21, 1e-7, 123456.5}))
	var l wire.SessionList
	for range rapid.IntRange(0, 8).Draw(t, "sessions") {
		s := wire.SessionInfo{
			ID: str.Draw(t, "id"), Epoch: str.Draw(t, "epoch"), LastID: rapid.Uint64().Draw(t, "lastId"),
			Subscribers: rapid.Int().Draw(t, "subscribers"), Consumers: rapid.Int().Draw(t, "consumers"),
			Ring: wire.RingInfo{Count: rapid.Int().Draw(t, "count"), Bytes: rapid.Int64().Draw(t, "bytes"),
				MaxCount: rapid.Int().Draw(t, "maxCount"), MaxBytes: rapid.Int64().Draw(t, "maxBytes")},
			PublishRate: num.Draw(t, "publishRate"), DeliverRate: num.Draw(t, "deliverRate"),
		}
		if rapid.Bool().Draw(t, "earliest") {
			e := rapid.Uint64().Draw(t, "earliestId")
			s.EarliestID = &e
		}
		if rapid.Bool().Draw(t, "durable") {
			s.Durability = &wire.DurabilityInfo{BytesOnDisk: rapid.Int64().Draw(t, "onDisk"), LastSyncedID: rapid.Uint64().Draw(t, "synced")}
		}
		l.Sessions = append(l.Sessions, s)
	}
	if rapid.Bool().Draw(t, "more") {
		l.Next = str.Draw(t, "next")
	}
	return l
}

// TestSessionListReadsAsEncodingJSONReadsIt reads lists as the daemon
// writes them, and written otherwise (indented, members in another order,
// members it does not know), and gets what encoding/json gets.
func TestSessionListReadsAsEncodingJSONReadsIt(t *testing.T) {
	t.Parallel()
	// The reader names each field it reads: a field added to the wire
	// types must be added to it (and to drawSessionList).
	for typ, names := range map[reflect.Type][]string{
		reflect.TypeFor[wire.SessionList]():    listNames,
		reflect.TypeFor[wire.SessionInfo]():    sessionNames,
		reflect.TypeFor[wire.RingInfo]():       ringNames,
		reflect.TypeFor[wire.DurabilityInfo](): durabilityNames,
	} {
		var tags []string
		for f := range typ.Fields() {
			tags = append(tags, strings.Split(f.Tag.Get("json"), ",")[0])
		}
		if !slices.Equal(tags, names) {
			t.Errorf("%v has the members %v; readSessionList reads %v", typ, tags, names)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		l := drawSessionList(t)
		body, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		switch rapid.IntRange(0, 2).Draw(t, "form") {
		case 1: // indented
			var b bytes.Buffer
			json.Indent(&b, body, " ", "\t")
			body = b.Bytes()
		case 2: // members in key order, and some the reader does not know
			var m map[string]any
			d := json.NewDecoder(bytes.NewReader(body))
			d.UseNumber() // numbers as they are, not as float64
			if err := d.Decode(&m); err != nil {
				t.Fatal(err)
			}
			m["zz"] = []any{map[string]any{"a": []any{true, false, nil, "x\"y"}}, -1.5e3}
			if ss, ok := m["sessions"].([]any); ok && len(ss) > 0 {
				ss[0].(map[string]any)["aNew"] = map[string]any{"n": 1}
				ss[0].(map[string]any)["ring"].(map[string]any)["later"] = "x"
			}
			if body, err = json.Marshal(m); err != nil {
				t.Fatal(err)
			}
		}
		var want wire.SessionList
		if err := json.Unmarshal(body, &want); err != nil {
			t.Fatal(err)
		}
		got, err := readSessionList(body)
		if err != nil {
			t.Fatalf("readSessionList(%s): %v", body, err)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Fatalf("readSessionList(%s) differs from encoding/json (-want +got):\n%s", body, d)
		}
	})
}

// TestSessionListRefusesWhatIsNotAList refuses each body, as encoding/json
// does, and every cut of a valid one.
func TestSessionListRefusesWhatIsNotAList(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		``, ` `, `[]`, `"x"`, `1`, `nul`, `{`, `{"sessions"}`, `{"sessions":}`, `{"sessions":[}`, `{"sessions":{}}`,
		`{"sessions":[1]}`, `{"sessions":["x"]}`, `{"sessions":[{"id":1}]}`, `{"sessions":[{"lastId":-1}]}`,
		`{"sessions":[{"lastId":1.5}]}`, `{"sessions":[{"lastId":1e3}]}`, `{"sessions":[{"lastId":18446744073709551616}]}`,
		`{"sessions":[{"subscribers":"3"}]}`, `{"sessions":[{"subscribers":true}]}`, `{"sessions":[{"publishRate":"1"}]}`,
		`{"sessions":[{"publishRate":01}]}`, `{"sessions":[{"publishRate":1.}]}`, `{"sessions":[{"publishRate":-}]}`,
		`{"sessions":[{"publishRate":1e}]}`, `{"sessions":[{"publishRate":+1}]}`, `{"sessions":[{"ring":[]}]}`,
		`{"sessions":[{"durability":1}]}`, `{"sessions":[{"earliestId":"1"}]}`, `{"sessions":[],}`, `{"sessions":[],"next":}`,
		`{"sessions":[{"id":"a` + "\n" + `"}]}`, `{"sessions":[{"id":"\x"}]}`, `{"sessions":[{"id":"\u12"}]}`,
		`{"sessions":[{"x":tru}]}`, `{"sessions":[{"x":[1,]}]}`, `{"sessions":[{"x":{"a"}}]}`, `{"sessions":[{"x":"\q"}]}`,
		`{"sessions":[]} x`, `{"sessions":[]}{}`, `{"next":"a" "sessions":[]}`, `{sessions:[]}`,
	} {
		if _, err := readSessionList([]byte(body)); !errors.Is(err, errSyntax) {
			t.Errorf("readSessionList(%q) = %v, want a refusal", body, err)
		}
		var l wire.SessionList
		if json.Unmarshal([]byte(body), &l) == nil {
			t.Errorf("encoding/json reads %q: the case proves nothing", body)
		}
	}
	valid := `{"sessions":[{"id":"s-1","epoch":"e\u00e9","lastId":3,"earliestId":1,"subscribers":2,"consumers":0,` +
		`"ring":{"count":3,"bytes":90,"maxCount":8000,"maxBytes":67108864},"publishRate":0.5,"deliverRate":1e-7,` +
		`"durability":{"bytesOnDisk":120,"lastSyncedId":3}}],"next":"s-1"}`
	if _, err := readSessionList([]byte(valid)); err != nil {
		t.Fatalf("readSessionList(%s): %v", valid, err)
	}
	for n := range len(valid) {
		if _, err := readSessionList([]byte(valid[:n])); err == nil {
			t.Errorf("readSessionList(%q) read a cut body", valid[:n])
		}
	}
}

// TestSessionListNestingIsBounded refuses members nested deeper than
// encoding/json allows, without exhausting the stack.
func TestSessionListNestingIsBounded(t *testing.T) {
	t.Parallel()
	deep := `{"x":` + string(bytes.Repeat([]byte("["), 20000)) + string(bytes.Repeat([]byte("]"), 20000)) + `}`
	if _, err := readSessionList([]byte(deep)); !errors.Is(err, errSyntax) {
		t.Errorf("20,000 levels: %v, want a refusal", err)
	}
	ok := `{"x":` + string(bytes.Repeat([]byte("["), 100)) + string(bytes.Repeat([]byte("]"), 100)) + `}`
	if _, err := readSessionList([]byte(ok)); err != nil {
		t.Errorf("100 levels: %v", err)
	}
}

// FuzzSessionList holds readSessionList to encoding/json: the same
// answer for every body, or an error from both.
func FuzzSessionList(f *testing.F) {
	f.Add([]byte(`{"sessions":[{"id":"a","lastId":1,"ring":{"count":1},"durability":null}],"next":"a"}`))
	f.Add([]byte(`{"sessions":null,"SESSIONS":[{"ID":"x","lastid":2,"\u0069d":"y","durability":{"bytesondisk":1}}]}`))
	f.Add([]byte(`{"sessions":[{"id":"a","lastId":1},{"id":"b"}],"sessions":[{"epoch":"e"}],"sessions":[{},{}]}`))
	f.Add([]byte(`{"ſessions":[{"K":1,"ring":{"maxcount":1.5}}],"next":"\u00e9\ud800"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := readSessionList(body)
		var want wire.SessionList
		jerr := json.Unmarshal(body, &want)
		switch {
		case err == nil && jerr != nil:
			t.Fatalf("readSessionList(%q) = %+v, encoding/json refuses it: %v", body, got, jerr)
		case err != nil && jerr == nil:
			t.Fatalf("readSessionList(%q): %v; encoding/json reads %+v", body, err, want)
		case err == nil:
			if d := cmp.Diff(want, got); d != "" {
				t.Fatalf("readSessionList(%q) differs from encoding/json (-want +got):\n%s", body, d)
			}
		}
	})
}
