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
	"strings"
	"syscall"
	"time"
)

// exitCrash is the status the process exits with when STANDIN_EXIT_AFTER
// fires, so a test can tell the simulated crash from any other failure.
const exitCrash = 3

// exitStartup is the status of a failed start-up (the conversations
// directory cannot be created): uvicorn exits non-zero when the lifespan
// fails (reference §6).
const exitStartup = 1

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
	cfg, err := configFromEnv(getenv)
	if err != nil {
		log.Error("standin: bad configuration", "err", err)
		return 2
	}
	if err := cfg.parseArgs(args[1:], getenv("STANDIN_ADDR") != ""); err != nil {
		fmt.Fprintf(stderr, "usage: %s [--host HOST] [--port PORT] (the rest by environment; see the package documentation): %v\n", args[0], err)
		return 2
	}
	if len(cfg.Keys) == 0 {
		log.Warn("standin: no session API key configured (OH_SESSION_API_KEYS_0); authentication is off")
	}
	// The lifespan runs before uvicorn binds (reference §6): a server that
	// cannot create its conversations directory never listens.
	srv, err := NewServer(cfg, log)
	if err != nil {
		log.Error("standin: Application startup failed. Exiting.", "err", err)
		return exitStartup
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		log.Error("standin: listen", "addr", cfg.Addr, "err", err)
		return 1
	}
	log.Info("standin: listening", "addr", ln.Addr().String(), "conversation_id", cfg.ConversationID)

	serveCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if getenv("STANDIN_ADDR") == "" {
		// The image's other servers: VS Code and the desktop (ports.go).
		host, _, _ := net.SplitHostPort(cfg.Addr)
		srv.servePorts(serveCtx, host)
	}
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
	// ConversationsPath is OH_CONVERSATIONS_PATH; default the agent
	// server's relative workspace/conversations (reference §6 "Default
	// paths"), i.e. /workspace/conversations from the image's WORKDIR /.
	ConversationsPath string
	// BashEventsDir is OH_BASH_EVENTS_DIR; default the relative
	// workspace/bash_events (config.py L272-276 @v1.43.1), made on first
	// use, not at start-up (bash.go).
	BashEventsDir string
	// VSCode is OH_ENABLE_VSCODE (default true), Desktop OH_ENABLE_VNC
	// (default false), VSCodeBasePath OH_VSCODE_BASE_PATH (ports.go).
	VSCode, Desktop bool
	VSCodeBasePath  string
	// LeaseTTL is OH_LEASE_TTL_SECONDS (seconds, default 45; 0 disables
	// the conversation lease: lease.go).
	LeaseTTL time.Duration
	// SecretKey keys the cipher of persisted secrets: OH_SECRET_KEY, else
	// SESSION_API_KEY, else OH_SESSION_API_KEYS_0 (reference §1, "Where S
	// comes from"); "" persists secrets in plaintext.
	SecretKey string
}

// parseArgs reads the agent server's --host and --port (reference §6
// "Arguments", __main__.py L215-296): the host defaults to 0.0.0.0 when a
// session key is configured, else 127.0.0.1; the port to 8000. With
// keepAddr (STANDIN_ADDR set, for tests) arguments still parse but the
// address stays.
func (c *Config) parseArgs(args []string, keepAddr bool) error {
	host, port := "127.0.0.1", "8000"
	if len(c.Keys) > 0 {
		host = "0.0.0.0"
	}
	for len(args) > 0 {
		name, val, hasVal := strings.Cut(args[0], "=")
		if name != "--host" && name != "--port" {
			return fmt.Errorf("unknown argument %q", args[0])
		}
		if !hasVal {
			if len(args) < 2 {
				return fmt.Errorf("%s needs a value", name)
			}
			val, args = args[1], args[1:]
		}
		args = args[1:]
		if name == "--host" {
			host = val
		} else if n, err := strconv.Atoi(val); err != nil || n < 0 || n > 65535 {
			return fmt.Errorf("--port %q: want a port number", val)
		} else {
			port = val
		}
	}
	if !keepAddr {
		c.Addr = net.JoinHostPort(host, port)
	}
	return nil
}

// errConfig marks a configuration error.
var errConfig = errors.New("bad configuration")

// configFromEnv reads the configuration through getenv.
func configFromEnv(getenv func(string) string) (Config, error) {
	cfg := Config{
		Addr:              "0.0.0.0:8000",
		Runtime:           "local",
		ConversationsPath: "workspace/conversations",
		BashEventsDir:     "workspace/bash_events",
	}
	if v := getenv("OH_BASH_EVENTS_DIR"); v != "" {
		cfg.BashEventsDir = v
	}
	cfg.VSCodeBasePath = getenv("OH_VSCODE_BASE_PATH")
	var err error
	if cfg.VSCode, err = boolEnv(getenv, "OH_ENABLE_VSCODE", true); err != nil {
		return cfg, err
	}
	if cfg.Desktop, err = boolEnv(getenv, "OH_ENABLE_VNC", false); err != nil {
		return cfg, err
	}
	cfg.LeaseTTL = 45 * time.Second
	if v := getenv("OH_LEASE_TTL_SECONDS"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			return cfg, fmt.Errorf("OH_LEASE_TTL_SECONDS %q: %w: want seconds >= 0", v, errConfig)
		}
		cfg.LeaseTTL = time.Duration(f * float64(time.Second))
	}
	if v := getenv("OH_CONVERSATIONS_PATH"); v != "" {
		cfg.ConversationsPath = v
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
	cfg.SecretKey = getenv("OH_SECRET_KEY")
	if cfg.SecretKey == "" {
		cfg.SecretKey = getenv("SESSION_API_KEY")
	}
	if cfg.SecretKey == "" {
		cfg.SecretKey = getenv("OH_SESSION_API_KEYS_0")
	}
	if v := getenv("OHD_CONVERSATION_ID"); v != "" {
		id, err := parseUUID(v)
		if err != nil {
			return cfg, fmt.Errorf("OHD_CONVERSATION_ID %q: %w: %w", v, errConfig, err)
		}
		cfg.ConversationID = id
	}
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

// boolEnv reads a boolean as pydantic does (true/false, 1/0, yes/no,
// on/off, any case); def when unset.
func boolEnv(getenv func(string) string, name string, def bool) (bool, error) {
	switch strings.ToLower(getenv(name)) {
	case "":
		return def, nil
	case "1", "true", "yes", "on", "t", "y":
		return true, nil
	case "0", "false", "no", "off", "f", "n":
		return false, nil
	}
	return false, fmt.Errorf("%s %q: %w: want true or false", name, getenv(name), errConfig)
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
