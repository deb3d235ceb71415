package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// exitCrash is the status the process exits with when STANDIN_EXIT_AFTER
// fires, so a test can tell the simulated crash from any other failure.
const exitCrash = 3

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args, os.Getenv, os.Stderr)
	stop()
	os.Exit(code)
}

// run starts the server described by the environment and serves until ctx
// ends (status 0), STANDIN_EXIT_AFTER fires (status 3) or serving fails
// (status 1).
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if len(args) > 1 {
		fmt.Fprintf(stderr, "usage: %s (configured by environment; see the package documentation)\n", args[0])
		return 2
	}
	cfg, err := configFromEnv(getenv)
	if err != nil {
		log.Error("standin: bad configuration", "err", err)
		return 2
	}
	if len(cfg.Keys) == 0 {
		log.Warn("standin: no session API key configured (OH_SESSION_API_KEYS_0); authentication is off")
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		log.Error("standin: listen", "addr", cfg.Addr, "err", err)
		return 1
	}
	log.Info("standin: listening", "addr", ln.Addr().String(), "conversation_id", cfg.ConversationID)

	srv := NewServer(cfg, log)
	serveCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(serveCtx, ln) }()

	var crash <-chan time.Time
	if cfg.ExitAfter > 0 {
		t := time.NewTimer(cfg.ExitAfter)
		defer t.Stop()
		crash = t.C
	}
	select {
	case err := <-errc:
		if err != nil {
			log.Error("standin: serve", "err", err)
			return 1
		}
		return 0
	case <-crash:
		fmt.Fprintf(stderr, "standin: simulated crash: exiting with status %d after STANDIN_EXIT_AFTER=%s\n", exitCrash, cfg.ExitAfter)
		cancel()
		<-errc
		return exitCrash
	}
}

// Config is what the standin reads from its environment (see the package
// documentation for the variable names).
type Config struct {
	// Addr is the TCP listen address; default 0.0.0.0:8000.
	Addr string
	// Keys are the accepted session API keys; none means no authentication.
	Keys []string
	// ConversationID is the conversation this container serves, if known.
	ConversationID string
	// Runtime is reported by /server_info; default "local".
	Runtime string
	// HealthDelay keeps /health and /ready at 503 this long after start.
	HealthDelay time.Duration
	// ExitAfter makes the process exit with status 3 this long after start.
	ExitAfter time.Duration
	// AnyID makes the WebSocket route accept any conversation id.
	AnyID bool
}

// errConfig marks a configuration error.
var errConfig = errors.New("bad configuration")

// configFromEnv reads the configuration through getenv.
func configFromEnv(getenv func(string) string) (Config, error) {
	cfg := Config{
		Addr:    "0.0.0.0:8000",
		Runtime: "local",
	}
	if v := getenv("STANDIN_ADDR"); v != "" {
		cfg.Addr = v
	}
	if v := getenv("OH_CONVERSATION_RUNTIME"); v != "" {
		cfg.Runtime = v
	}
	for i := 0; ; i++ {
		k := getenv("OH_SESSION_API_KEYS_" + strconv.Itoa(i))
		if k == "" {
			break
		}
		cfg.Keys = append(cfg.Keys, k)
	}
	if v := getenv("OHD_CONVERSATION_ID"); v != "" {
		id, err := parseUUID(v)
		if err != nil {
			return cfg, fmt.Errorf("OHD_CONVERSATION_ID %q: %w: %w", v, errConfig, err)
		}
		cfg.ConversationID = id
	}
	var err error
	if cfg.HealthDelay, err = durationEnv(getenv, "STANDIN_HEALTH_DELAY"); err != nil {
		return cfg, err
	}
	if cfg.ExitAfter, err = durationEnv(getenv, "STANDIN_EXIT_AFTER"); err != nil {
		return cfg, err
	}
	switch v := getenv("STANDIN_ANY_ID"); v {
	case "", "0", "false":
	case "1", "true":
		cfg.AnyID = true
	default:
		return cfg, fmt.Errorf("STANDIN_ANY_ID %q: %w: want 1 or 0", v, errConfig)
	}
	return cfg, nil
}

func durationEnv(getenv func(string) string, name string) (time.Duration, error) {
	v := getenv(name)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s %q: %w: want a duration such as 2s", name, v, errConfig)
	}
	return d, nil
}
