package ipc

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/localbus/localbus/ipc/wire"
)

// TestSessionListIsWhatWriteJSONWrites writes lists of any sessions, and
// gets the bytes writeJSON writes for them.
func TestSessionListIsWhatWriteJSONWrites(t *testing.T) {
	t.Parallel()
	// appendSessionList writes the list's two members itself; each
	// session goes through encoding/json, whatever its fields.
	if n := reflect.TypeFor[wire.SessionList]().NumField(); n != 2 {
		t.Fatalf("wire.SessionList has %d fields: appendSessionList writes sessions and next alone", n)
	}
	rapid.Check(t, func(t *rapid.T) {
		str := rapid.OneOf(rapid.StringMatching(`[a-z0-9-]{0,12}`), rapid.String(),
			rapid.Map(rapid.SliceOf(rapid.Byte()), func(b []byte) string { return string(b) }))
		num := rapid.OneOf(rapid.Float64Range(-1e300, 1e300), rapid.SampledFrom([]float64{0, 1e-7, 1e21, 0.5}))
		list := wire.SessionList{Sessions: []wire.SessionInfo{}}
		for range rapid.IntRange(0, 6).Draw(t, "sessions") {
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
			list.Sessions = append(list.Sessions, s)
		}
		if rapid.Bool().Draw(t, "more") {
			list.Next = str.Draw(t, "next")
		}
		want := httptest.NewRecorder()
		writeJSON(want, http.StatusOK, list)
		got := httptest.NewRecorder()
		writeSessionList(got, slices.Values(list.Sessions), list.Next)
		if !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) || got.Code != want.Code ||
			!reflect.DeepEqual(got.Header(), want.Header()) {
			t.Fatalf("writeSessionList: %d %v %s\nwriteJSON: %d %v %s", got.Code, got.Header(), got.Body, want.Code, want.Header(), want.Body)
		}
	})
}

// TestSessionListThatCannotBeEncodedIsAnError answers a rate json cannot
// write (never one the daemon computes) with writeJSON's 500, not with
// half a list.
func TestSessionListThatCannotBeEncodedIsAnError(t *testing.T) {
	t.Parallel()
	w := httptest.NewRecorder()
	writeSessionList(w, slices.Values([]wire.SessionInfo{{ID: "a"}, {ID: "b", PublishRate: math.NaN()}}), "")
	var eb wire.ErrorBody
	if err := json.Unmarshal(w.Body.Bytes(), &eb); err != nil || w.Code != http.StatusInternalServerError || eb.Error.Code != wire.CodeInternal {
		t.Errorf("a NaN rate: %d %s, want 500 internal", w.Code, w.Body)
	}
}
