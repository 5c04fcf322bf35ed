package ipc

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// storedBefore is a remembered publish as the journal has always stored
// it (the "reply" of a key record), from before the router owned its
// shape.
const storedBefore = `{"status":200,"contentType":"application/json","body":"eyJpZHMiOlsxXSwibGFzdElkIjoxfQo="}`

// TestPublishResultReadsAndWritesTheStoredForm pins the on-disk form of a
// remembered publish: a key stored before replays, and a result kept now
// is stored in the same form.
func TestPublishResultReadsAndWritesTheStoredForm(t *testing.T) {
	t.Parallel()
	want := publishResult{Status: 200, ContentType: "application/json", Body: []byte("{\"ids\":[1],\"lastId\":1}\n")}
	got, err := decodeResult([]byte(storedBefore))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decodeResult(%s) mismatch (-want +got):\n%s", storedBefore, diff)
	}
	if enc := string(want.encode()); enc != storedBefore {
		t.Errorf("encode() = %s, want %s", enc, storedBefore)
	}
	for _, bad := range []string{`null`, `{}`, `"x"`, `{"status":"200"}`} {
		if r, err := decodeResult([]byte(bad)); err == nil {
			t.Errorf("decodeResult(%s) = %+v, want an error", bad, r)
		}
	}
}
