package bus_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/bustest"
)

// The seed corpora live in testdata/fuzz/FuzzXxx/.

func FuzzParseFilter(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		fl, err := bus.ParseFilter(s)
		if err != nil {
			if !isInputError(err, "types") || fl != nil {
				t.Fatalf("ParseFilter(%q) = %v, %#v; want nil, *InputError{Field: types}", s, fl.Types(), err)
			}
			return
		}
		types := fl.Types()
		if len(types) == 0 || len(types) > 256 {
			t.Fatalf("ParseFilter(%q) has %d entries", s, len(types))
		}
		seen := map[string]bool{}
		for _, e := range types {
			if seen[e] {
				t.Fatalf("ParseFilter(%q): %q twice", s, e)
			}
			seen[e] = true
			fam := bus.FamilyOf(e)
			if bus.IsReservedFamily(fam) {
				t.Fatalf("ParseFilter(%q) accepted reserved %q", s, e)
			}
			if strings.HasSuffix(e, ":*") {
				if !validFamily(fam) || fam+":*" != e {
					t.Fatalf("ParseFilter(%q) accepted %q", s, e)
				}
				if !fl.Match(fam + ":anything") {
					t.Fatalf("ParseFilter(%q).Match(%s:anything) = false", s, fam)
				}
			} else if !validType(e) {
				t.Fatalf("ParseFilter(%q) accepted %q", s, e)
			}
			if !fl.Match(e) && !strings.HasSuffix(e, ":*") {
				t.Fatalf("ParseFilter(%q).Match(%q) = false", s, e)
			}
			if !fl.Within(fam) && len(fl.Families()) == 1 {
				t.Fatalf("ParseFilter(%q).Within(%q) = false with one family", s, fam)
			}
		}
		for _, e := range strings.Split(s, ",") {
			if !seen[e] {
				t.Fatalf("ParseFilter(%q) dropped %q", s, e)
			}
		}
		for _, r := range []string{"stream:ready", "stream:gap", "localbus:reloaded"} {
			if fl.Match(r) {
				t.Fatalf("ParseFilter(%q).Match(%q) = true", s, r)
			}
		}
		again, err := bus.ParseFilter(strings.Join(types, ","))
		if err != nil || strings.Join(again.Types(), ",") != strings.Join(types, ",") {
			t.Fatalf("ParseFilter(Types() of %q) = %v, %v; want the same entries", s, again.Types(), err)
		}
	})
}

// FuzzPublish publishes one event with arbitrary type, data and originator:
// either it is refused with an *InputError and burns no id, or every
// subscriber gets a frame that is valid one-line UTF-8 JSON with the
// compacted data, in a well-formed SSE frame.
func FuzzPublish(f *testing.F) {
	f.Fuzz(func(t *testing.T, typ string, data []byte, originator string) {
		b, err := bus.New(bus.Options{Session: bustest.SessionID("s"), Epoch: testEpoch})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		s := subscribe(t, b, bus.SubscribeOptions{})
		s.Take(nil)
		pt, err := bus.ParseType(typ)
		if err != nil {
			if !isInputError(err, "type") || validType(typ) && !bus.IsReservedFamily(bus.FamilyOf(typ)) {
				t.Fatalf("ParseType(%q) = %v", typ, err)
			}
			return
		}
		e := bus.Event{Type: pt, Data: data, Originator: originator, Time: fixedTime}
		verr := bus.ValidateEvent(&e)
		_, last, err := b.Publish(e)
		if (verr == nil) != (err == nil) {
			t.Fatalf("ValidateEvent = %v but Publish = %v", verr, err)
		}
		if err != nil {
			if !bus.IsInputError(err) {
				t.Fatalf("Publish = %v, want an *InputError", err)
			}
			if b.LastID() != 0 {
				t.Fatalf("a refused event burned an id")
			}
			if frames, _ := s.Take(nil); len(frames) != 0 {
				t.Fatalf("a refused event reached a subscriber")
			}
			if json.Valid(data) && utf8.Valid(data) {
				t.Fatalf("Publish(%q, %q) = %v, want it accepted", typ, data, err)
			}
			return
		}
		if last != 1 {
			t.Fatalf("id = %d, want 1", last)
		}
		frames, _ := s.Take(nil)
		if len(frames) != 1 {
			t.Fatalf("got %d frames, want 1", len(frames))
		}
		fr := frames[0]
		js := fr.JSON()
		if !json.Valid(js) || !utf8.Valid(js) || bytes.ContainsAny(js, "\r\n") {
			t.Fatalf("envelope is not one line of valid UTF-8 JSON: %q", js)
		}
		if want := "id: 1\nevent: " + typ + "\ndata: " + string(js) + "\n\n"; string(fr.SSE()) != want {
			t.Fatalf("SSE = %q, want %q", fr.SSE(), want)
		}
		env := bustest.Decode(t, fr)
		var compact bytes.Buffer
		if len(bytes.TrimSpace(data)) == 0 {
			compact.WriteString("null")
		} else if err := json.Compact(&compact, data); err != nil {
			t.Fatalf("accepted data %q that does not compact: %v", data, err)
		}
		if !bytes.Equal(env.Data, compact.Bytes()) {
			t.Fatalf("data = %s, want %s", env.Data, compact.Bytes())
		}
		if utf8.ValidString(originator) && env.Originator != originator {
			t.Fatalf("originator = %q, want %q", env.Originator, originator)
		}
		if (originator == "") != !bytes.Contains(js, []byte(`"originator"`)) {
			t.Fatalf("originator present = %v for %q", !(originator == ""), originator)
		}
	})
}

// FuzzParseFrame feeds arbitrary bytes to the journal's frame parser: an
// error, or a frame whose SSE form is three lines and whose JSON is one.
func FuzzParseFrame(f *testing.F) {
	f.Fuzz(func(t *testing.T, envelope []byte) {
		fr, err := bus.ParseFrame(envelope)
		if err != nil {
			if !bus.IsInputError(err) {
				t.Fatalf("ParseFrame = %v, want an *InputError", err)
			}
			return
		}
		if fr.ID == 0 || fr.Reserved() || !validType(fr.Type) {
			t.Fatalf("ParseFrame = {ID %d, Type %q}", fr.ID, fr.Type)
		}
		js := fr.JSON()
		if !json.Valid(js) || bytes.ContainsAny(js, "\r\n") {
			t.Fatalf("JSON() = %q, want one line of JSON", js)
		}
		lines := strings.Split(strings.TrimSuffix(string(fr.SSE()), "\n\n"), "\n")
		if len(lines) != 3 || !strings.HasSuffix(string(fr.SSE()), "\n\n") {
			t.Fatalf("SSE() = %q, want id, event and data lines", fr.SSE())
		}
		if fr.Size() != len(fr.SSE()) {
			t.Fatalf("Size() = %d, want %d", fr.Size(), len(fr.SSE()))
		}
	})
}

// validFamily reports whether ParseFamily accepts f.
func validFamily(f string) bool {
	_, err := bus.ParseFamily(f)
	return err == nil
}

// validType reports whether t is family:name, in a reserved family or
// not: whether ParseType accepts it, or would in another family.
func validType(t string) bool {
	if fam := bus.FamilyOf(t); bus.IsReservedFamily(fam) {
		t = "x" + t[len(fam):]
	}
	_, err := bus.ParseType(t)
	return err == nil
}
