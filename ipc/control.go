package ipc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/ipc/wire/grammar"
)

// A controlFrame is a WebSocket control frame from a client (SPEC §5).
type controlFrame struct {
	Op string
	// Types is the filter named; nil with Null for {"types": null}.
	Types *bus.Filter
	// Null reports that "types" was JSON null (only "set" accepts it).
	Null bool
	// ID is the id an ack acknowledges.
	ID uint64
}

// Control ops.
const (
	opSubscribe   = "subscribe"
	opUnsubscribe = "unsubscribe"
	opSet         = "set"
	opAck         = "ack"   // a consumer's acknowledgement (SPEC §2.4)
	opAcked       = "acked" // its reply, once stored
)

// parseControl decodes and validates one control frame. It accepts exactly
// {"op": OP, "types": [...]} (and "types": null for set), or
// {"op": "ack", "id": N}; anything else is an error whose text is fit for
// the client.
func parseControl(data []byte) (controlFrame, error) {
	var raw struct {
		Op    string          `json:"op"`
		Types json.RawMessage `json:"types"`
		ID    json.RawMessage `json:"id"`
	}
	if err := decodeStrict(data, &raw); errors.Is(err, errTrailing) {
		return controlFrame{}, errors.New("malformed control frame: trailing data")
	} else if err != nil {
		return controlFrame{}, fmt.Errorf("malformed control frame: %v", err)
	}
	cf := controlFrame{Op: raw.Op}
	switch raw.Op {
	case opSubscribe, opUnsubscribe, opSet:
		if raw.ID != nil {
			return cf, fmt.Errorf(`%s takes no "id"`, raw.Op)
		}
	case opAck:
		if raw.Types != nil {
			return cf, errors.New(`ack takes no "types"`)
		}
		if raw.ID == nil {
			return cf, errors.New(`missing "id": ack needs the id of the last event handled`)
		}
		id, err := grammar.ParseCursor(string(bytes.TrimSpace(raw.ID)))
		if err != nil {
			return cf, errors.New(`"id" must be an event id: a whole number from 0 to 2^53-1`)
		}
		cf.ID = id
		return cf, nil
	case "":
		return cf, errors.New(`missing "op": want subscribe, unsubscribe, set or ack`)
	default:
		return cf, fmt.Errorf("unknown op %q: want subscribe, unsubscribe, set or ack", shorten(raw.Op))
	}
	if len(raw.Types) == 0 {
		return cf, errors.New(`missing "types"`)
	}
	if bytes.Equal(bytes.TrimSpace(raw.Types), []byte("null")) {
		if raw.Op != opSet {
			return cf, fmt.Errorf(`%s needs a list of types; only set accepts null`, raw.Op)
		}
		cf.Null = true
		return cf, nil
	}
	var list []string
	if err := json.Unmarshal(raw.Types, &list); err != nil {
		return cf, errors.New(`"types" must be a list of strings or null`)
	}
	f, err := bus.NewFilter(list)
	if err != nil {
		var ie *bus.InputError
		if errors.As(err, &ie) {
			return cf, fmt.Errorf("types: %s", ie.Reason+valueSuffix(ie.Value))
		}
		return cf, err
	}
	cf.Types = f
	return cf, nil
}

func valueSuffix(v string) string {
	if v == "" {
		return ""
	}
	return fmt.Sprintf(" (%q)", v)
}

func shorten(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// controlReply is the server's answer to a control frame.
type controlReply struct {
	Op      string   `json:"op"`
	Types   []string `json:"types"`
	Message string   `json:"message,omitempty"`
}

// MarshalJSON writes "types" for subscribed replies only.
func (r controlReply) MarshalJSON() ([]byte, error) {
	if r.Op == "error" {
		return json.Marshal(struct {
			Op      string `json:"op"`
			Message string `json:"message"`
		}{r.Op, r.Message})
	}
	return json.Marshal(struct {
		Op    string   `json:"op"`
		Types []string `json:"types"`
	}{r.Op, r.Types})
}

func errorReply(msg string) []byte {
	b, _ := json.Marshal(controlReply{Op: "error", Message: msg})
	return b
}

// applyControl applies one control frame to sub, whose consumer is cs
// (nil for none), and returns the reply: nil for an ack taken, which the
// consumer's acker answers once it is stored. A refused frame leaves the
// filter and the consumer as they were.
func applyControl(sub *bus.Subscription, cs *consumerStream, data []byte) []byte {
	cf, err := parseControl(data)
	if err != nil {
		return errorReply(err.Error())
	}
	if cf.Op == opAck {
		return cs.ack(cf.ID)
	}
	// Names are checked first (SPEC §5): an out-of-family name on a family
	// stream is an error even where the op would change nothing, such as
	// subscribe on an unfiltered stream.
	if fam := sub.Family(); !fam.IsZero() && !cf.Types.Within(fam.String()) {
		return errorReply("types: outside family " + fam.String())
	}
	cur := sub.Filter()
	var next *bus.Filter
	switch cf.Op {
	case opSubscribe:
		var err error
		if next, err = cur.Add(cf.Types); err != nil {
			return errorReply("types: " + inputReason(err))
		}
	case opUnsubscribe:
		if cur == nil {
			return errorReply("the stream is unfiltered: nothing to unsubscribe from; use set")
		}
		var ok bool
		next, ok = cur.Remove(cf.Types)
		if !ok {
			return errorReply("that would remove every type; use set")
		}
	case opSet:
		next = cf.Types
	}
	if err := sub.SetFilter(next); err != nil {
		var ie *bus.InputError
		if errors.As(err, &ie) {
			return errorReply("types: " + ie.Reason)
		}
		return errorReply(err.Error())
	}
	b, _ := json.Marshal(controlReply{Op: "subscribed", Types: next.Types()})
	return b
}
