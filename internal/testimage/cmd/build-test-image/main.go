// Command build-test-image builds the Docker image ohd's container tests
// run (ohd-test-agent:dev; see internal/testimage). It is what
// `make test-image` runs, through scripts/build-test-image.sh, from the
// module's checkout.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ohd-dev/ohd/internal/testimage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	ref := fs.String("ref", testimage.Ref, "image reference to build and tag")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after this long")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected arguments %q\n", args[0], fs.Args())
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	start := time.Now()
	if err := testimage.Build(ctx, *ref); err != nil {
		fmt.Fprintf(stderr, "build-test-image: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "built %s in %s\n", *ref, time.Since(start).Round(100*time.Millisecond))
	return 0
}
