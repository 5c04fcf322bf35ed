package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/localbus/localbus/bus"
	"github.com/localbus/localbus/bus/hub"
	"github.com/localbus/localbus/ipc"
	"github.com/localbus/localbus/ipc/client"
	"github.com/localbus/localbus/ipc/ipctest"
)

// exampleDaemon serves the router on a socket in a temporary directory,
// standing in for "localbus serve", and returns the socket and a function
// that stops it.
func exampleDaemon() (socket string, stop func()) {
	dir, err := os.MkdirTemp("", "lbex")
	if err != nil {
		log.Fatal(err)
	}
	h, err := hub.New(hub.Options{AutoCreate: true})
	if err != nil {
		log.Fatal(err)
	}
	socket = filepath.Join(dir, "localbus.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		log.Fatal(err)
	}
	router := ipc.New(ipc.Options{Hub: h, Logger: slog.New(slog.DiscardHandler), Settings: ipc.Settings{Authenticate: ipctest.AllowAll}})
	srv := &http.Server{Handler: router}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	return socket, func() {
		h.EndStreams(bus.EndShutdown)
		srv.Shutdown(context.Background())
		router.Wait(context.Background())
		<-done
		h.Close()
		os.RemoveAll(dir)
	}
}

func ExampleClient_Publish() {
	socket, stop := exampleDaemon()
	defer stop()

	c := &client.Client{Socket: socket, ClientID: "example"}
	defer c.CloseIdleConnections()
	ctx := context.Background()
	id, err := c.Publish(ctx, "build-17", "build:step", map[string]any{"step": "compile"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("published id", id)

	r, err := c.PublishBatch(ctx, "build-17", []client.Event{
		{Type: "build:step", Data: map[string]any{"step": "test"}},
		{Type: "build:done", Data: map[string]any{"ok": true}},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("published ids", r.IDs)
	// Output:
	// published id 1
	// published ids [2 3]
}

func ExampleClient_Stream() {
	socket, stop := exampleDaemon()
	defer stop()

	c := &client.Client{Socket: socket}
	defer c.CloseIdleConnections()
	ctx := context.Background()
	c.Publish(ctx, "build-17", "build:step", map[string]any{"n": 1})
	c.Publish(ctx, "build-17", "build:step", map[string]any{"n": 2})

	// Since 0 replays the whole ring, then follows live events. The stream
	// reconnects and resumes by itself until ctx ends or Close.
	st, err := c.Stream(ctx, client.StreamOptions{Session: "build-17", Since: new(uint64)})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	for {
		f, err := st.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		switch {
		case !f.Reserved():
			fmt.Printf("%d %s %s\n", f.ID, f.Type, f.Data)
		case f.Type == bus.TypeGap:
			var gap bus.GapData
			f.DecodeData(&gap)
			fmt.Println("missed events:", gap.Reason)
		case f.Type == bus.TypeReplayed:
			fmt.Println("caught up")
			return
		}
	}
	// Output:
	// 1 build:step {"n":1}
	// 2 build:step {"n":2}
	// caught up
}

func ExampleStream_Cursor() {
	socket, stop := exampleDaemon()
	defer stop()

	c := &client.Client{Socket: socket}
	defer c.CloseIdleConnections()
	ctx := context.Background()
	c.Publish(ctx, "s", "app:hello", nil)

	// Follow live, remember where the stream was, and resume there later:
	// events published in between are delivered, none twice.
	st, err := c.Stream(ctx, client.StreamOptions{Session: "s"})
	if err != nil {
		log.Fatal(err)
	}
	st.Next(ctx) // stream:ready: the cursor is the bus's last id
	id, epoch, _ := st.Cursor()
	st.Close()

	c.Publish(ctx, "s", "app:missed", nil)

	st, err = c.Stream(ctx, client.StreamOptions{Session: "s", Since: &id, Epoch: epoch})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	for {
		f, err := st.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if !f.Reserved() {
			fmt.Println(f.ID, f.Type)
			return
		}
	}
	// Output:
	// 2 app:missed
}

func ExampleEndedError() {
	socket, stop := exampleDaemon()
	defer stop()

	c := &client.Client{Socket: socket}
	defer c.CloseIdleConnections()
	ctx := context.Background()
	_, err := c.Stream(ctx, client.StreamOptions{Session: "no-such-session"})
	var ended *client.EndedError
	if errors.As(err, &ended) {
		fmt.Println("ended for good:", ended.Reason)
	}
	// Output:
	// ended for good: not_found
}

// Example is the Go example of the README: publish one event, then follow
// the session from its first event. Outside a test, the zero Client dials
// the default socket.
func Example() {
	socket, stop := exampleDaemon()
	defer stop()

	ctx := context.Background()
	c := &client.Client{Socket: socket} // the default socket when Socket is ""
	if _, err := c.Publish(ctx, "build-17", "build:step", map[string]int{"n": 1}); err != nil {
		log.Fatal(err)
	}
	st, err := c.Stream(ctx, client.StreamOptions{Session: "build-17", Since: new(uint64)})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	for {
		f, err := st.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if !f.Reserved() { // stream:* frames say what happens to the stream
			fmt.Println(f.ID, f.Type, string(f.Data))
			return
		}
	}
	// Output: 1 build:step {"n":1}
}

// A service that restarts resumes where it stopped without keeping ids:
// it follows the session through a consumer, which the daemon keeps, and
// acknowledges each event once handled. After a restart of the service,
// or of the daemon, its stream starts after its last acknowledgement.
func ExampleStream_Ack() {
	socket, stop := exampleDaemon()
	defer stop()

	c := &client.Client{Socket: socket}
	defer c.CloseIdleConnections()
	ctx := context.Background()
	for n := 1; n <= 3; n++ {
		c.Publish(ctx, "build-17", "build:step", map[string]any{"n": n})
	}

	handle := func(limit int) {
		st, err := c.Stream(ctx, client.StreamOptions{Session: "build-17", Consumer: "deploy", Ack: client.AckExplicit})
		if err != nil {
			log.Fatal(err)
		}
		defer st.Close()
		for handled := 0; handled < limit; {
			f, err := st.Next(ctx)
			if errors.Is(err, client.ErrReplaced) {
				log.Fatal("another instance took the consumer over")
			}
			if err != nil {
				log.Fatal(err)
			}
			if f.Reserved() {
				continue
			}
			fmt.Printf("handled %d %s\n", f.ID, f.Data)
			if err := st.Ack(ctx, f.ID); err != nil {
				log.Fatal(err)
			}
			handled++
		}
	}
	handle(2) // the service stops after two events...
	handle(1) // ...and its next run starts after the second
	// Output:
	// handled 1 {"n":1}
	// handled 2 {"n":2}
	// handled 3 {"n":3}
}
