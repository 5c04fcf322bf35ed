package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"strings"

	"github.com/localbus/localbus/ipc/client"
)

func ExampleClient_PublishStream() {
	socket, stop := exampleDaemon()
	defer stop()

	c := &client.Client{Socket: socket}
	defer c.CloseIdleConnections()
	ctx := context.Background()

	// A producer that writes NDJSON as it goes, like a command's stdout
	// (c.PublishStream(ctx, "build-17", os.Stdin)): each line is published
	// as soon as it is read, all in one request.
	pr, pw := io.Pipe()
	go func() {
		defer pw.Close()
		for step := 1; step <= 3; step++ {
			fmt.Fprintf(pw, "{\"type\":\"build:step\",\"data\":{\"step\":%d}}\n", step)
		}
	}()
	r, err := c.PublishStream(ctx, "build-17", pr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("published %d events, ids %d to %d\n", r.Count, r.FirstID, r.LastID)

	// Each line is its own unit: a bad line stops the publish there, and
	// the lines before it stay published.
	in := strings.NewReader("{\"type\":\"build:done\",\"data\":true}\nnot an event\n{\"type\":\"build:step\",\"data\":{}}\n")
	_, err = c.PublishStream(ctx, "build-17", in)
	var pe *client.PublishStreamError
	var ae *client.APIError
	if errors.As(err, &pe) && errors.As(err, &ae) {
		fmt.Printf("stopped at line %d (%s), ids %v published before it\n", pe.Line, ae.Code, pe.Published.IDs)
	}
	// Output:
	// published 3 events, ids 1 to 3
	// stopped at line 2 (invalid_event), ids [4] published before it
}
