package share_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/localbus/localbus/bus/share"
)

func TestPeerTextRoundTrips(t *testing.T) {
	t.Parallel()
	for _, p := range []share.Peer{share.Unknown, share.Privileged, share.UID(0), share.UID(65534), share.UID(1<<32 - 1), share.Key("ci"), share.Key("a.b_c-9")} {
		got, err := share.Parse(p.String())
		if err != nil || got != p {
			t.Errorf("Parse(%q) = %v, %v; want %v", p.String(), got, err, p)
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var back share.Peer
		if err := json.Unmarshal(b, &back); err != nil || back != p {
			t.Errorf("JSON %s = %v, %v; want %v", b, back, err, p)
		}
	}
}

func TestPeerParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want share.Peer
		err  bool
	}{
		{"", share.Unknown, false}, // absent: stored before peers were
		{"unknown", share.Unknown, false},
		{"privileged", share.Privileged, false},
		{"uid:65534", share.UID(65534), false},
		{"key:ci", share.Key("ci"), false},
		{"uid:", share.Unknown, true},
		{"uid:-1", share.Unknown, true},
		{"uid:007", share.Unknown, true}, // one spelling per uid
		{"uid:4294967296", share.Unknown, true},
		{"key:", share.Unknown, true},
		{"key:.x", share.Unknown, true},
		{"key:a b", share.Unknown, true},
		{"key:" + string(make([]byte, 65)), share.Unknown, true},
		{"root", share.Unknown, true},
		{"UID:1", share.Unknown, true},
	}
	for _, tt := range tests {
		got, err := share.Parse(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("Parse(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.err)
		}
		if err != nil && !errors.Is(err, share.ErrBadPeer) {
			t.Errorf("Parse(%q) error %v, want ErrBadPeer", tt.in, err)
		}
	}
	if share.UID(0).IsPrivileged() {
		t.Error("UID(0) is privileged: the caller decides who is, and says so with Privileged")
	}
	if (share.Peer{}) != share.Unknown || share.Unknown.IsPrivileged() {
		t.Error("the zero Peer must be Unknown, and not privileged")
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "unknown", "privileged", "uid:1", "key:ci", "uid:01", "key:-"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := share.Parse(s)
		if err != nil {
			if p != share.Unknown {
				t.Fatalf("Parse(%q) failed with %v but returned %v", s, err, p)
			}
			return
		}
		// Accepted text has one spelling: what String writes ("" aside).
		if s != "" && p.String() != s {
			t.Fatalf("Parse(%q) = %v, which String writes %q", s, p, p.String())
		}
		if again, err := share.Parse(p.String()); err != nil || again != p {
			t.Fatalf("Parse(String(%v)) = %v, %v", p, again, err)
		}
	})
}
