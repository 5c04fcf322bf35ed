package client

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/localbus/localbus/bus"
)

// A Frame is one frame of a stream: an event (ID > 0) or a reserved
// stream:* frame (ID == 0), decoded, with the JSON the daemon sent.
type Frame struct {
	bus.Envelope
	// Raw is the frame's one-line JSON envelope, exactly as received.
	Raw []byte
}

// Reserved reports whether the frame is a stream:* frame, which carries no
// id and does not move the cursor.
func (f Frame) Reserved() bool { return f.ID == 0 }

// DecodeData unmarshals the frame's data into v, e.g. a bus.GapData for a
// stream:gap frame.
func (f Frame) DecodeData(v any) error {
	if err := json.Unmarshal(f.Data, v); err != nil {
		return fmt.Errorf("client: %s data: %w", f.Type, err)
	}
	return nil
}

var errNoType = errors.New("client: malformed frame from the daemon: no type")

// decodeFrame decodes one envelope. raw must not be modified afterwards.
func decodeFrame(raw []byte) (Frame, error) {
	f := Frame{Raw: raw}
	if err := json.Unmarshal(raw, &f.Envelope); err != nil {
		return Frame{}, fmt.Errorf("client: malformed frame from the daemon: %w", err)
	}
	if f.Type == "" {
		return Frame{}, errNoType
	}
	return f, nil
}
