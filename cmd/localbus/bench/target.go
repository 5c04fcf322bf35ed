package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// eventType is the type of every event the bench publishes.
const eventType = "bench:event"

// payload builds event data of exactly size bytes: {"pad":"xxx…"}, or
// with a due time {"due":NANOSECONDS,"pad":"…"}, the due time written
// with 19 digits so every event has the same size.
type payload struct {
	size int
	buf  []byte
}

func (p *payload) data(due int64) []byte {
	b := p.buf[:0]
	if due != 0 {
		b = append(b, `{"due":`...)
		d := strconv.AppendInt(nil, due, 10)
		for range 19 - len(d) {
			b = append(b, '0')
		}
		b = append(b, d...)
		b = append(b, `,"pad":"`...)
	} else {
		b = append(b, `{"pad":"`...)
	}
	for len(b) < p.size-2 {
		b = append(b, 'x')
	}
	b = append(b, `"}`...)
	p.buf = b
	return b
}

// limits are the figures of the daemon's /api/v1/caps the bench uses.
type limits struct {
	RingSize       int   `json:"ringSize"`
	MaxQueuedBytes int64 `json:"maxQueuedBytes"`
	MaxSubscribers int   `json:"maxSubscribers"`
	MaxEventBytes  int64 `json:"maxEventBytes"`
	MaxBatch       int   `json:"maxBatch"`
}

// target is what a scenario runs against: the daemon or the baseline.
type target interface {
	// name is "daemon" or "baseline".
	name() string
	// limits returns the server's limits.
	limits() limits
	// newSession makes a session for the run; ring 0 means the default.
	// It returns the path of its routes: /api/v1/sessions/ID.
	newSession(ctx context.Context, ring int) (string, error)
	// open opens a stream.
	open(ctx context.Context, o streamOptions) (stream, error)
	// publisher returns a publisher to path's session.
	publisher(ctx context.Context, path string, size int) (publisher, error)
	// pid is the server's process, for memory figures; 0 if unknown.
	pid() int
	// close deletes what newSession made and releases the target.
	close(ctx context.Context)
}

// publisher publishes the bench's events. It is not safe for concurrent
// use.
type publisher interface {
	// batch publishes n events and returns the last id.
	batch(ctx context.Context, n int) (last uint64, err error)
	// one publishes one event carrying its due time (Unix nanoseconds).
	one(ctx context.Context, due int64) (last uint64, err error)
	Close() error
}

// daemon is a running localbus daemon reached at ep.
type daemon struct {
	ep       endpoint
	lim      limits
	version  string
	durab    string // "disk" or "memory", "" when the daemon does not say
	fsync    string // the journal's sync mode with "disk"
	peer     int
	sessions []string // created by the bench, deleted by close
	prefix   string
	keep     bool
	n        int
}

func newDaemon(ctx context.Context, c Config) (*daemon, error) {
	ep, err := newEndpoint(c.Socket, c.URL, c.Key)
	if err != nil {
		return nil, err
	}
	body, err := ep.call(ctx, http.MethodGet, "/api/v1/caps", nil, http.StatusOK)
	if err != nil {
		return nil, err
	}
	var caps struct {
		Version    string `json:"version"`
		Limits     limits `json:"limits"`
		Durability string `json:"durability"`
		Fsync      string `json:"fsync"`
	}
	if err := json.Unmarshal(body, &caps); err != nil {
		return nil, fmt.Errorf("bench: /api/v1/caps: %v", err)
	}
	d := &daemon{
		ep: ep, lim: caps.Limits, version: caps.Version, durab: caps.Durability, fsync: caps.Fsync,
		prefix: c.Session, keep: c.KeepSession, peer: c.PID,
	}
	if d.prefix == "" {
		d.prefix = fmt.Sprintf("bench-%08x", rand.Uint32())
	}
	if d.peer == 0 && ep.network == "unix" {
		d.peer = peerPID(ctx, ep)
	}
	return d, nil
}

func (d *daemon) name() string    { return "daemon" }
func (d *daemon) limits() limits  { return d.lim }
func (d *daemon) pid() int        { return d.peer }
func (d *daemon) String() string  { return d.ep.String() }
func (d *daemon) Version() string { return d.version }

// peerPID asks the kernel who listens on a Unix socket. Under socket
// activation the answer is the service manager, which is no use: 0.
func peerPID(ctx context.Context, ep endpoint) int {
	c, err := ep.dial(ctx)
	if err != nil {
		return 0
	}
	defer c.Close()
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0
	}
	var cred *syscall.Ucred
	raw.Control(func(fd uintptr) {
		cred, _ = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	})
	if cred == nil || cred.Pid <= 1 {
		return 0
	}
	if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", cred.Pid)); err == nil && strings.TrimSpace(string(comm)) == "systemd" {
		return 0
	}
	return int(cred.Pid)
}

// newSession creates a session. The first is named after the prefix, the
// next ones PREFIX-2, PREFIX-3…; one that exists already is used as it is.
// A caller that may not create sessions (no admin scope) gets one by
// publishing to it, when the daemon creates sessions on first publish.
func (d *daemon) newSession(ctx context.Context, ring int) (string, error) {
	d.n++
	id := d.prefix
	if d.n > 1 {
		id = fmt.Sprintf("%s-%d", d.prefix, d.n)
	}
	req, _ := json.Marshal(struct {
		ID       string `json:"id"`
		RingSize int    `json:"ringSize,omitempty"`
	}{id, ring})
	path := "/api/v1/sessions/" + id
	_, err := d.ep.call(ctx, http.MethodPost, "/api/v1/sessions", req, http.StatusCreated)
	var se *StatusError
	switch {
	case err == nil:
		d.sessions = append(d.sessions, id)
	case errors.As(err, &se) && se.Status == http.StatusConflict:
		// It exists: the user named it.
	case errors.As(err, &se) && se.Status == http.StatusForbidden:
		body := []byte(`{"type":"bench:create","data":null}`)
		if _, err := d.ep.call(ctx, http.MethodPost, path+"/events", body, http.StatusOK); err != nil {
			return "", fmt.Errorf("bench: creating session %s: %w", id, err)
		}
	default:
		return "", err
	}
	return path, nil
}

func (d *daemon) open(ctx context.Context, o streamOptions) (stream, error) {
	return openStream(ctx, d.ep, o)
}

func (d *daemon) close(ctx context.Context) {
	if d.keep {
		return
	}
	for _, id := range d.sessions {
		d.ep.call(ctx, http.MethodDelete, "/api/v1/sessions/"+id, nil, http.StatusNoContent)
	}
	d.sessions = nil
}

// restPublisher publishes over one keep-alive connection.
type restPublisher struct {
	ep    endpoint
	rc    *restConn
	path  string
	p     payload
	body  []byte
	bodyN int // the events in body, for batch
	reply []byte
}

func (d *daemon) publisher(ctx context.Context, path string, size int) (publisher, error) {
	rc, err := d.ep.rest(ctx)
	if err != nil {
		return nil, err
	}
	return &restPublisher{ep: d.ep, rc: rc, path: path + "/events", p: payload{size: size}}, nil
}

func (p *restPublisher) Close() error { return p.rc.Close() }

func (p *restPublisher) batch(ctx context.Context, n int) (uint64, error) {
	if p.bodyN != n {
		b := []byte{'['}
		for i := range n {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"type":"`+eventType+`","data":`...)
			b = append(b, p.p.data(0)...)
			b = append(b, '}')
		}
		p.body, p.bodyN = append(b, ']'), n
	}
	return p.post(ctx, p.body)
}

func (p *restPublisher) one(ctx context.Context, due int64) (uint64, error) {
	b := append(p.body[:0], `{"type":"`+eventType+`","data":`...)
	b = append(b, p.p.data(due)...)
	p.body, p.bodyN = append(b, '}'), 0
	return p.post(ctx, p.body)
}

func (p *restPublisher) post(ctx context.Context, body []byte) (uint64, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Minute)
	}
	status, reply, err := p.rc.do(http.MethodPost, p.path, body, deadline, p.reply)
	if errors.Is(err, errConnClosing) {
		p.rc.Close()
		p.rc, err = p.ep.rest(ctx)
	}
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, fmt.Errorf("bench: publish: %w", err)
	}
	p.reply = reply
	if status != http.StatusOK {
		return 0, &StatusError{Method: http.MethodPost, Path: p.path, Status: status, Body: string(bytes.TrimSpace(reply))}
	}
	// The reply ends with "lastId":N}: read it without decoding the ids.
	i := bytes.LastIndex(reply, []byte(`"lastId":`))
	if i < 0 {
		return 0, fmt.Errorf("bench: publish reply without lastId: %.200s", reply)
	}
	var last uint64
	for _, c := range reply[i+len(`"lastId":`):] {
		if c < '0' || c > '9' {
			break
		}
		last = last*10 + uint64(c-'0')
	}
	return last, nil
}
