package daemontest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// RequestTimeout bounds each request Do makes.
const RequestTimeout = 10 * time.Second

// Do sends a request with body (none when "") to the daemon and returns the
// status and the response body. It fails the test if the daemon cannot be
// reached.
func (d *Daemon) Do(t testing.TB, method, path, body string) (int, []byte) {
	t.Helper()
	status, b, err := d.TryDo(method, path, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return status, b
}

// TryDo is Do that returns the error instead of failing the test, for use
// from goroutines other than the test's.
func (d *Daemon) TryDo(method, path, body string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), RequestTimeout)
	defer cancel()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://localbus"+path, r)
	if err != nil {
		return 0, nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.Client().Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// ErrorBody is the JSON body of an error answer (SPEC §6).
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// DecodeError decodes an error answer's body, failing the test if it is not
// one.
func DecodeError(t testing.TB, body []byte) ErrorBody {
	t.Helper()
	var e ErrorBody
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Code == "" {
		t.Fatalf("body %q is not a JSON error (%v)", body, err)
	}
	return e
}
