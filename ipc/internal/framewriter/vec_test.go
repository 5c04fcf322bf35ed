//go:build linux

package framewriter

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// unixPair returns both ends of a Unix stream connection in a temporary
// directory, closed when the test ends.
func unixPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestWriteBuffersSendsEveryByteInOrder: buffers, adjacent runs of one
// array among them, arrive whole and in order through a socket too small
// for them, over partial writes and more than IOV_MAX buffers.
func TestWriteBuffersSendsEveryByteInOrder(t *testing.T) {
	client, server := unixPair(t)
	server.(*net.UnixConn).SetWriteBuffer(4096)
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	var bufs [][]byte
	var want []byte
	for off := 0; off < len(big); {
		n := 1 + off%997
		if off+n > len(big) {
			n = len(big) - off
		}
		bufs = append(bufs, big[off:off+n:off+n]) // back to back, like a publish's frames
		want = append(want, big[off:off+n]...)
		if len(bufs)%5 == 0 {
			sep := []byte("\r\n")
			bufs = append(bufs, sep, nil)
			want = append(want, sep...)
		}
		off += n
	}
	if len(bufs) <= 1024 {
		t.Fatalf("only %d buffers: want more than IOV_MAX", len(bufs))
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(client, int64(len(want))))
		got <- b
	}()
	vc := newVecConn(server)
	if canWritev && vc.raw == nil {
		t.Fatal("a Unix connection should use writev")
	}
	wb := GetBuf()
	defer PutBuf(wb)
	if err := vc.writeBuffers(bufs, wb, 10*time.Second); err != nil {
		t.Fatalf("writeBuffers: %v", err)
	}
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("received %d bytes, want the %d written, in order", len(b), len(want))
	}
	for i, v := range wb.vec.iov[:cap(wb.vec.iov)] {
		if v.Base != nil {
			t.Fatalf("iovec %d still points to a buffer after the write", i)
		}
	}
}

// TestWriteBuffersHonoursTheDeadline: a peer that does not read cuts the
// write off at the deadline.
func TestWriteBuffersHonoursTheDeadline(t *testing.T) {
	_, server := unixPair(t)
	vc := newVecConn(server)
	wb := GetBuf()
	defer PutBuf(wb)
	err := vc.writeBuffers([][]byte{make([]byte, 8<<20)}, wb, 50*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("writeBuffers to a peer that does not read = %v, want a deadline error", err)
	}
}
