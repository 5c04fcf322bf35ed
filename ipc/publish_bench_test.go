package ipc_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/ipc/ipctest"
)

// BenchmarkPublishOverSocket measures single-event publishes the way
// clients send them: keep-alive HTTP/1.1 connections over the Unix socket,
// each sending a request and reading its reply, back to back, with no
// subscriber. The clients are raw and allocate nothing per request, so
// the allocations per op are the server's: net/http's and the router's.
func BenchmarkPublishOverSocket(b *testing.B) {
	for _, conns := range []int{1, 32} {
		b.Run(fmt.Sprintf("conns=%d", conns), func(b *testing.B) {
			srv := ipctest.New(b, ipctest.Options{Hub: hub.Options{AutoCreate: true}})
			body := `{"type":"bench:event","data":{"pad":"` + strings.Repeat("x", 246) + `"}}`
			req := []byte("POST /api/v1/sessions/s/events HTTP/1.1\r\nHost: localbus\r\nContent-Type: application/json\r\nContent-Length: " +
				strconv.Itoa(len(body)) + "\r\n\r\n" + body)
			clients := make([]*rawPublisher, conns)
			for i := range clients {
				c, err := srv.Dial(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				clients[i] = &rawPublisher{c: c, r: bufio.NewReaderSize(c, 4096), req: req}
				if err := clients[i].do(); err != nil { // the session's creation, before timing
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			per := b.N / conns
			errs := make([]error, conns)
			for i, c := range clients {
				n := per
				if i == 0 {
					n += b.N % conns
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range n {
						if err := c.do(); err != nil {
							errs[i] = err
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// rawPublisher sends one prepared request and reads its reply.
type rawPublisher struct {
	c   net.Conn
	r   *bufio.Reader
	req []byte
}

func (p *rawPublisher) do() error {
	if _, err := p.c.Write(p.req); err != nil {
		return err
	}
	status, err := p.r.ReadSlice('\n')
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(status, []byte("HTTP/1.1 200 ")) {
		return fmt.Errorf("reply %q", status)
	}
	n := -1
	for {
		line, err := p.r.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		if v, ok := bytes.CutPrefix(line, []byte("Content-Length: ")); ok {
			n, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
		}
	}
	if n < 0 {
		return fmt.Errorf("reply without Content-Length")
	}
	_, err = p.r.Discard(n)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}
