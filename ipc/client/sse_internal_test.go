package client

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

type sseEvent struct{ Event, Data string }

// decodeAll decodes every event of in and returns them with the error that
// ended the stream.
func decodeAll(in string) ([]sseEvent, time.Duration, error) {
	d := newSSEDecoder(strings.NewReader(in))
	var out []sseEvent
	for {
		ev, data, err := d.next()
		if err != nil {
			return out, d.retry, err
		}
		out = append(out, sseEvent{ev, string(data)})
	}
}

func TestSSEDecoder(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		want      []sseEvent
		wantRetry time.Duration
		wantErr   error
	}{
		{"daemon frames", "retry: 3000\n\nid: 1\nevent: a:b\ndata: {}\n\nevent: stream:slow\ndata: {\"x\":1}\n\n",
			[]sseEvent{{"a:b", "{}"}, {"stream:slow", `{"x":1}`}}, 3 * time.Second, io.EOF},
		{"comments and pings are skipped", ": ping\n\n:another\ndata: x\n\n", []sseEvent{{"", "x"}}, 0, io.EOF},
		{"multi-line data joins with newlines", "data: a\ndata:b\ndata\n\n", []sseEvent{{"", "a\nb\n"}}, 0, io.EOF},
		{"CRLF line ends", "event: e\r\ndata: d\r\n\r\n", []sseEvent{{"e", "d"}}, 0, io.EOF},
		{"CR line ends", "event: e\rdata: d\r\rdata: x\n\n", []sseEvent{{"e", "d"}, {"", "x"}}, 0, io.EOF},
		{"an event without data is not dispatched", "event: e\n\ndata: d\n\n", []sseEvent{{"", "d"}}, 0, io.EOF},
		{"only the first space is stripped", "data:  two\n\n", []sseEvent{{"", " two"}}, 0, io.EOF},
		{"a bad retry is ignored", "retry: soon\nretry: -5\ndata: d\n\n", []sseEvent{{"", "d"}}, 0, io.EOF},
		{"unknown fields are ignored", "foo: bar\nid: 9\ndata: d\n\n", []sseEvent{{"", "d"}}, 0, io.EOF},
		{"an event cut short is discarded", "data: whole\n\ndata: half", []sseEvent{{"", "whole"}}, 0, io.ErrUnexpectedEOF},
		{"an event without its blank line is discarded", "data: whole\n\ndata: no end\n", []sseEvent{{"", "whole"}}, 0, io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, retry, err := decodeAll(tt.in)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("events of %q (-want +got):\n%s", tt.in, diff)
			}
			if retry != tt.wantRetry {
				t.Errorf("retry = %v, want %v", retry, tt.wantRetry)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("final error = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestSSEDecoderReadsLongLines(t *testing.T) {
	long := strings.Repeat("x", 200<<10) // beyond the bufio buffer
	got, _, _ := decodeAll("data: " + long + "\n\n")
	if len(got) != 1 || got[0].Data != long {
		t.Fatalf("a %d-byte data line did not come through whole", len(long))
	}
}

// FuzzSSEDecoder checks that any input decodes without panicking, that
// every dispatched event came from a complete block, and that encoding the
// events again decodes to the same events.
func FuzzSSEDecoder(f *testing.F) {
	f.Add("retry: 3000\n\nid: 1\nevent: a:b\ndata: {}\n\n")
	f.Add(": ping\n\ndata: a\ndata: b\n\n")
	f.Add("event: e\r\ndata: d\r\n\r\ndata: half")
	f.Add("data\n\ndata:\n\n:\n\n")
	f.Fuzz(func(t *testing.T, in string) {
		got, _, _ := decodeAll(in)
		var re strings.Builder
		for _, ev := range got {
			if strings.ContainsAny(ev.Event, "\r\n") {
				t.Fatalf("event name %q spans lines", ev.Event)
			}
			if ev.Event != "" {
				re.WriteString("event: " + ev.Event + "\n")
			}
			for _, line := range strings.Split(ev.Data, "\n") {
				if strings.Contains(line, "\r") {
					t.Fatalf("data line %q contains a line end", line)
				}
				re.WriteString("data: " + line + "\n")
			}
			re.WriteString("\n")
		}
		again, _, err := decodeAll(re.String())
		if !errors.Is(err, io.EOF) {
			t.Fatalf("re-encoded stream ended with %v", err)
		}
		if diff := cmp.Diff(got, again); diff != "" {
			t.Fatalf("round trip of %q (-first +second):\n%s", in, diff)
		}
	})
}
