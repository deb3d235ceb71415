// Command ohd is the host daemon: see `ohd serve --help` and README.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/ohd-dev/ohd/pkg/daemon"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := daemon.Main(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
