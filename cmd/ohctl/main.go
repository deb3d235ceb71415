// Command ohctl is ohd's command-line client: see `ohctl --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/ohd-dev/ohd/pkg/ohctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := ohctl.Main(ctx, os.Args, ohctl.Env{Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}
