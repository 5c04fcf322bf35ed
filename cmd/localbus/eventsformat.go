package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"text/template"
	"time"

	"github.com/localbus/localbus/ipc/client"
)

// columns lays out the lines of localbus events: each column but the last
// is padded to the widest value it has shown so far, so the columns line up
// as a stream goes on without waiting for its end.
type columns struct{ widths []int }

// line returns the values as one line, separated by two spaces.
func (c *columns) line(values ...string) string {
	if len(c.widths) < len(values) {
		c.widths = append(c.widths, make([]int, len(values)-len(c.widths))...)
	}
	var b strings.Builder
	for i, v := range values {
		if i > 0 {
			b.WriteString("  ")
		}
		b.WriteString(v)
		if i == len(values)-1 {
			break
		}
		n := len([]rune(v))
		c.widths[i] = max(c.widths[i], n)
		b.WriteString(strings.Repeat(" ", c.widths[i]-n))
	}
	b.WriteByte('\n')
	return b.String()
}

// timeLayout is the local time of a line of localbus events.
const timeLayout = "2006-01-02 15:04:05.000"

// localTime returns the envelope's timestamp in local time, or the
// timestamp as sent when it is not one.
func localTime(ts string) string {
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		if ts == "" {
			return "-"
		}
		return ts
	}
	return t.Local().Format(timeLayout)
}

// templateEvent is what a --format template sees: the envelope, with the
// data as JSON text and the time parsed.
type templateEvent struct {
	ID         uint64    `json:"id,omitempty"`
	V          int       `json:"v"`
	Type       string    `json:"type"`
	Session    string    `json:"session,omitempty"`
	Seq        uint64    `json:"seq,omitempty"`
	Data       rawJSON   `json:"data"`
	Timestamp  string    `json:"timestamp"`
	Originator string    `json:"originator,omitempty"`
	Time       time.Time `json:"-"`
}

// rawJSON is JSON text that prints as itself and marshals as itself.
type rawJSON json.RawMessage

func (r rawJSON) String() string { return string(r) }

// MarshalJSON implements json.Marshaler.
func (r rawJSON) MarshalJSON() ([]byte, error) {
	if len(r) == 0 {
		return []byte("null"), nil
	}
	return r, nil
}

func newTemplateEvent(fr client.Frame) templateEvent {
	ev := templateEvent{
		ID: fr.ID, V: fr.V, Type: fr.Type, Session: fr.Session, Seq: fr.Seq,
		Data: rawJSON(fr.Data), Timestamp: fr.Timestamp, Originator: fr.Originator,
	}
	if t, err := time.Parse(time.RFC3339Nano, fr.Timestamp); err == nil {
		ev.Time = t.Local()
	}
	return ev
}

// formatFields names what a --format template can read, for its errors.
const formatFields = "{{.ID}} {{.V}} {{.Type}} {{.Session}} {{.Seq}} {{.Data}} {{.Timestamp}} {{.Originator}} {{.Time}}"

// unknownField is how text/template reports a field an event does not have.
var unknownField = regexp.MustCompile(`can't evaluate field (\w+) in type`)

// parseFormat parses a --format template. Its functions: json (the value
// as JSON), upper, lower. It runs the template once on a sample event, so
// a field that no event has is refused before the stream opens, in the
// user's words rather than Go's.
func parseFormat(s string) (*template.Template, error) {
	tmpl, err := template.New("format").Option("missingkey=error").Funcs(template.FuncMap{
		"json": func(v any) (string, error) {
			b, err := json.Marshal(v)
			return string(b), err
		},
		"upper": strings.ToUpper,
		"lower": strings.ToLower,
	}).Parse(s)
	if err != nil {
		return nil, errors.New("line " + strings.TrimPrefix(err.Error(), "template: format:"))
	}
	sample := templateEvent{ID: 1, V: 1, Type: "app:sample", Data: rawJSON("{}"), Time: time.Now()}
	if err := tmpl.Execute(io.Discard, sample); err != nil {
		if m := unknownField.FindStringSubmatch(err.Error()); m != nil {
			return nil, fmt.Errorf("an event has no field .%s; it has %s", m[1], formatFields)
		}
		return nil, errors.New("at " + strings.TrimPrefix(err.Error(), "template: format:"))
	}
	return tmpl, nil
}
