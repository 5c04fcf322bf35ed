package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/localbus/localbus/daemon/daemontest"
	"github.com/localbus/localbus/ipc/client"
)

// BenchmarkTopRefresh is one refresh of top against 10,000 idle sessions:
// the snapshot fetched and decoded, then the frame drawn for a 120x40
// terminal.
func BenchmarkTopRefresh(b *testing.B) {
	d := daemontest.Start(b, daemontest.Options{Args: []string{"--max-sessions", "20000"}})
	c := &client.Client{Socket: d.Socket}
	defer c.CloseIdleConnections()
	ctx := context.Background()
	for i := range 10_000 {
		if _, err := c.CreateSession(ctx, fmt.Sprintf("s-%06d", i), 0); err != nil {
			b.Fatal(err)
		}
	}
	m := newTopModel(ctx, c, time.Second)
	m.view.width, m.view.height = 120, 40
	b.ReportAllocs()
	for b.Loop() {
		snap, err := fetchTop(ctx, c, "")
		if err != nil {
			b.Fatal(err)
		}
		m.Update(topFetched{snap: snap})
		_ = m.View()
	}
}
