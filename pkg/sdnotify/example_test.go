package sdnotify_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/ohd-dev/ohd/pkg/sdnotify"
)

// A daemon takes the sockets systemd passed by name, binds the rest itself,
// and tells systemd when it serves and when it stops. Outside systemd every
// sdnotify call does nothing.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.Default()

	passed, err := sdnotify.Listeners() // first: it clears LISTEN_* for children
	if err != nil {
		log.Error("socket activation", "err", err)
		return
	}
	var ln net.Listener
	if lns := passed["api"]; len(lns) > 0 {
		ln = lns[0] // the .socket unit owns the address, mode and owner
	} else if ln, err = net.Listen("tcp", "127.0.0.1:8000"); err != nil {
		log.Error("listen", "err", err)
		return
	}
	srv := &http.Server{Handler: http.NotFoundHandler()}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	if _, err := sdnotify.Ready(); err != nil {
		log.Warn("tell systemd we are ready", "err", err)
	}
	<-ctx.Done()
	_, _ = sdnotify.Stopping()
	_ = srv.Shutdown(context.Background())
	<-served
}
