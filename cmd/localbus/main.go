package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/localbus/localbus/cmd/localbus/bench"
)

func main() {
	// "localbus bench --baseline" runs this executable again as its
	// baseline server; that process serves and exits here.
	bench.ServeBaselineIfAsked()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
