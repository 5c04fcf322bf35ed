package bus

import "testing"

// TestPublishTrustsACheckedTypeOnly: a type CheckType accepted is not
// validated again by Publish (a forged mark gets through, which is how a
// checked event's later validations are skipped); a type changed after the
// check is validated again and refused, with ValidatePublishType's error.
func TestPublishTrustsACheckedTypeOnly(t *testing.T) {
	b, err := New(Options{Session: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	forged := Event{Type: "trusted:x", Data: []byte(`1`), checkedType: "trusted:x"}
	forged.Type = "bad type" // as if checked, then changed
	_, _, err = b.Publish(forged)
	want := ValidatePublishType("bad type")
	if err == nil || err.Error() != want.Error() {
		t.Fatalf("Publish of a type changed after its check = %v, want %v", err, want)
	}
	ev := Event{Type: "app:ok", Data: []byte(`1`)}
	if err := ev.CheckType(); err != nil {
		t.Fatalf("CheckType(app:ok) = %v", err)
	}
	if !ev.typeChecked() {
		t.Fatal("CheckType did not note the type as checked")
	}
	trusted := Event{Type: "stream:x", Data: []byte(`1`), checkedType: "stream:x"}
	if _, _, err := b.Publish(trusted); err != nil {
		t.Fatalf("Publish of a type marked checked = %v, want it trusted", err)
	}
	bad := Event{Type: "stream:x"}
	if err := bad.CheckType(); err == nil || err.Error() != ValidatePublishType("stream:x").Error() {
		t.Fatalf("CheckType(stream:x) = %v, want ValidatePublishType's refusal", err)
	}
	if bad.typeChecked() {
		t.Fatal("a refused type was noted as checked")
	}
}
