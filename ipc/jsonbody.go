package ipc

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// errTrailing is decodeStrict's error for anything but white space after
// the value.
var errTrailing = errors.New("unexpected data after the JSON value")

// decodeStrict decodes the one JSON value that b holds into v, refusing
// unknown fields and anything but white space after the value
// (`{"id":"a"}xyz`, `{"id":"a"}}`, a second value): every request body and
// control frame the router reads as one JSON value goes through it.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errTrailing
	}
	return nil
}
