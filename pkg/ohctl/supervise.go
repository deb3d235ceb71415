package ohctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/ohd-dev/ohd/pkg/broker"
)

// superviseInner runs the inner agent server (path, argv, env) as a child
// and serves the broker relay (broker.RelayAddr, the container's
// loopback) beside it for as long as it runs: the inner server's LLM
// base_url and LookupSecrets point there, so credentials reach it only as
// answers to requests the broker checks and audits, never as values in
// its configuration. Signals are passed on to the child; the exit status
// is the child's (128+signal when a signal ended it).
//
// The relay's address is bound before the child starts, so nothing the
// agent runs later can take it over.
func superviseInner(ctx context.Context, path string, argv, env []string, getenv func(string) string, stderr io.Writer) error {
	ln, err := net.Listen("tcp", broker.RelayAddr)
	if err != nil {
		return fmt.Errorf("inner-exec: serve the broker relay on %s: %w", broker.RelayAddr, err)
	}
	bc := broker.NewClient(getenv(broker.EnvSocket), getenv(broker.EnvTokenFile))
	defer bc.Close()
	relay := broker.NewRelay(bc)
	relay.ErrorLog = log.New(stderr, "ohctl inner-exec: relay: ", 0)
	srv := &http.Server{
		Handler:           relay,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	// The relay's address is also the container's HTTP(S)_PROXY: proxy
	// requests go out through the broker's egress route.
	go func() { _ = broker.ServeWithForwardProxy(srv, ln, bc) }()
	defer srv.Close()

	cmd := exec.Command(path)
	cmd.Args, cmd.Env = argv, env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("inner-exec: start %s: %w", path, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// stop is ctx.Done() until it fired once: a closed channel stays
	// ready, so keeping it would resend SIGTERM in a busy loop until the
	// child exits.
	stop := ctx.Done()
	for {
		select {
		case sig := <-sigs:
			_ = cmd.Process.Signal(sig)
		case err := <-done:
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					return exitError{code: 128 + int(ws.Signal())}
				}
				return exitError{code: ee.ExitCode()}
			}
			if err != nil {
				fmt.Fprintf(stderr, "inner-exec: %v\n", err)
				return exitError{code: ExitError}
			}
			return nil
		case <-stop:
			stop = nil
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
	}
}
