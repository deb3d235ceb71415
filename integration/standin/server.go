package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ohd-dev/ohd/pkg/openhands"
)

// version is reported by /server_info.
const version = "ohd-standin/1"

// Server is the standin agent server: its configuration, the in-memory
// conversations and the routes.
type Server struct {
	cfg     Config
	log     *slog.Logger
	started time.Time
	keys    [][sha256.Size]byte
	convs   *store
	mux     *http.ServeMux

	// track counts running handlers, so Serve returns only after every
	// handler (WebSocket sessions included) has finished.
	track tracker
	// bg is cancelled when Serve shuts down: it ends what outlives a
	// request (bash-events commands).
	bg       context.Context
	cancelBg context.CancelFunc
	bash     bashEvents
}

// NewServer returns a server for cfg that logs to log. It fails when the
// conversations directory cannot be created or loaded, as the agent
// server's lifespan does (reference §6 "Startup sequence").
func NewServer(cfg Config, log *slog.Logger) (*Server, error) {
	var cipher *openhands.Fernet
	if cfg.SecretKey != "" {
		cipher = openhands.NewFernet(cfg.SecretKey)
	} else {
		// store.py L369-380: no cipher, secrets persisted in plaintext.
		log.Warn("standin: no OH_SECRET_KEY and no session key: persisted secrets are not encrypted")
	}
	convs, err := openStore(cfg.ConversationsPath, cipher)
	if err != nil {
		return nil, fmt.Errorf("conversations directory %s: %w", cfg.ConversationsPath, err)
	}
	if cfg.LeaseTTL > 0 {
		convs.lease = newLeases(cfg.LeaseTTL)
	}
	s := &Server{
		cfg:     cfg,
		log:     log,
		started: time.Now(),
		convs:   convs,
		mux:     http.NewServeMux(),
	}
	s.bash.dir = cfg.BashEventsDir
	if s.bash.dir == "" {
		s.bash.dir = "workspace/bash_events"
	}
	s.bg, s.cancelBg = context.WithCancel(context.Background())
	for _, k := range cfg.Keys {
		s.keys = append(s.keys, sha256.Sum256([]byte(k)))
	}
	s.routes()
	return s, nil
}

// routes registers every route; see the package documentation.
func (s *Server) routes() {
	m := s.mux
	m.HandleFunc("GET /alive", s.alive)
	m.HandleFunc("GET /health", s.health)
	m.HandleFunc("GET /ready", s.ready)
	m.HandleFunc("GET /server_info", s.serverInfo)

	m.HandleFunc("POST /api/conversations", s.keepCreateBody(s.startConversation))
	m.HandleFunc("GET /api/conversations", s.batchGetConversations)
	m.HandleFunc("GET /api/conversations/count", s.countConversations)
	m.HandleFunc("GET /api/conversations/search", s.searchConversations)
	m.HandleFunc("GET /api/conversations/{id}", s.getConversation)
	m.HandleFunc("DELETE /api/conversations/{id}", s.deleteConversation)
	m.HandleFunc("POST /api/conversations/{id}/fork", s.forkConversation)
	m.HandleFunc("POST /api/conversations/{id}/run", s.setStatus(statusRunning))
	m.HandleFunc("POST /api/conversations/{id}/pause", s.setStatus(statusPaused))
	m.HandleFunc("POST /api/conversations/{id}/exec", s.exec)
	m.HandleFunc("POST /api/conversations/{id}/events", s.sendMessage)
	m.HandleFunc("GET /api/conversations/{id}/events/search", s.searchEvents)
	m.HandleFunc("GET /api/conversations/{id}/standin/secrets", s.secretReport)
	m.HandleFunc("GET /api/file/download-trajectory/{id}", s.downloadTrajectory)

	for _, prefix := range []string{"", "/api/conversations/{id}"} {
		m.HandleFunc(prefix+"/echo/", s.echo)
		m.HandleFunc("GET "+prefix+"/redirect", s.redirect)
		m.HandleFunc("GET "+prefix+"/error", s.failure)
		m.HandleFunc("GET "+prefix+"/slow", s.slow)
		m.HandleFunc("GET "+prefix+"/stream", s.stream)
		m.HandleFunc("POST "+prefix+"/big", s.big)
	}

	m.HandleFunc("GET /sockets/events/{id}", s.events)
	m.HandleFunc("GET /sockets/session/{id}", s.session)
	m.HandleFunc("GET /sockets/bash-events", s.bashSocket)
	s.bashRoutes(m)
	s.portRoutes(m)
	s.mediationRoutes(m)
	s.runtimeRoutes(m)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeDetail(w, http.StatusNotFound, "Not Found")
	})
}

// unauthenticated are the agent server's "server details" routes, which it
// serves without a session key (probes must work before a client has one).
var unauthenticated = map[string]bool{
	"/alive":       true,
	"/health":      true,
	"/ready":       true,
	"/server_info": true,
}

// ServeHTTP logs the request, checks the session key and dispatches.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.track.add() {
		writeDetail(w, http.StatusServiceUnavailable, "Server is shutting down")
		return
	}
	defer s.track.done()

	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w}
	defer func() {
		// Path only: the query may carry session_api_key.
		s.log.Info("request", "method", r.Method, "path", r.URL.Path, "status", rec.code(), "dur", time.Since(start).Round(time.Microsecond))
	}()
	// Sockets authenticate in their handlers (acceptSocket: the key may
	// come in the first frame, after the accept).
	if !unauthenticated[r.URL.Path] && !strings.HasPrefix(r.URL.Path, "/sockets/") {
		if !s.authenticate(r) {
			writeDetail(rec, http.StatusUnauthorized, "Unauthorized")
			return
		}
	}
	s.mux.ServeHTTP(rec, r)
}

// authenticate reports whether r carries a valid key in its
// X-Session-API-Key header, or no key is configured (dependencies.py
// L24-36: the HTTP routes take the header only).
func (s *Server) authenticate(r *http.Request) bool {
	if len(s.keys) == 0 {
		return true
	}
	v := r.Header.Get("X-Session-API-Key")
	return v != "" && s.validKey(v)
}

// validKey compares the digest of v with every configured key's digest in
// constant time, so neither a key's content nor its length leaks.
func (s *Server) validKey(v string) bool {
	d := sha256.Sum256([]byte(v))
	ok := 0
	for _, k := range s.keys {
		ok |= subtle.ConstantTimeCompare(d[:], k[:])
	}
	return ok == 1
}

// Serve serves HTTP on ln until ctx ends, then shuts down: in-flight
// requests get half a second, then every connection is closed and running
// handlers (WebSocket sessions, exec children) are cancelled. It returns
// once every handler has returned.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()

	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_ = hs.Shutdown(sctx)
		cancel()
		err = <-errc
	}
	cancelBase()
	s.cancelBg()
	_ = hs.Close()
	s.track.closeAndWait()
	s.convs.releaseLeases()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func (s *Server) alive(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) warmingUp() bool {
	return time.Since(s.started) < s.cfg.HealthDelay
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if s.warmingUp() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "starting"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	if s.warmingUp() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{
			"status": "initializing", "message": "Server is still initializing",
		})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// serverInfoResponse is the answer of GET /server_info.
type serverInfoResponse struct {
	Title               string  `json:"title"`
	Version             string  `json:"version"`
	Uptime              float64 `json:"uptime"`
	IdleTime            float64 `json:"idle_time"`
	ConversationID      string  `json:"conversation_id"`
	ConversationRuntime string  `json:"conversation_runtime"`
	UID                 int     `json:"uid"`
	GID                 int     `json:"gid"`
	PID                 int     `json:"pid"`
	WorkingDir          string  `json:"working_dir"`
	// Capabilities as the agent server's ServerInfo lists them
	// (server_details_router.py L61-67); the stand-in serves the scoped
	// runtime routes (runtime.go).
	Capabilities []string `json:"capabilities"`
}

func (s *Server) serverInfo(w http.ResponseWriter, r *http.Request) {
	wd, _ := os.Getwd()
	up := time.Since(s.started).Seconds()
	writeJSON(w, http.StatusOK, serverInfoResponse{
		Title:               "OpenHands Agent Server (ohd standin)",
		Version:             version,
		Uptime:              up,
		IdleTime:            up,
		ConversationID:      s.cfg.ConversationID,
		ConversationRuntime: s.cfg.Runtime,
		UID:                 os.Getuid(),
		GID:                 os.Getgid(),
		PID:                 os.Getpid(),
		WorkingDir:          wd,
		Capabilities:        []string{capabilityRuntimeRoutes},
	})
}

// writeJSON writes v as the JSON body with status code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, `{"detail":"cannot encode the answer"}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// writeDetail writes FastAPI's error shape {"detail": msg}.
func writeDetail(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"detail": msg})
}

// validationError is one entry of FastAPI's 422 body.
type validationError struct {
	Type  string `json:"type"`
	Loc   []any  `json:"loc"`
	Msg   string `json:"msg"`
	Input any    `json:"input"`
}

// writeValidation writes FastAPI's 422 shape {"detail":[...]}.
func writeValidation(w http.ResponseWriter, errs ...validationError) {
	writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": errs})
}

// statusRecorder remembers the status code for the request log and keeps
// http.Flusher and http.Hijacker (streaming and WebSockets) reachable.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) code() int {
	if r.status == 0 {
		return http.StatusOK
	}
	return r.status
}

// Unwrap lets http.ResponseController reach Flush and Hijack.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Flush forwards to the underlying writer (coder/websocket and older
// callers test for http.Flusher directly).
func (r *statusRecorder) Flush() {
	_ = http.NewResponseController(r.ResponseWriter).Flush()
}

// Hijack forwards to the underlying writer for the WebSocket upgrade.
func (r *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if r.status == 0 {
		r.status = http.StatusSwitchingProtocols
	}
	return http.NewResponseController(r.ResponseWriter).Hijack()
}

// tracker counts running handlers; once closed it refuses new ones and
// closeAndWait waits for the running ones.
type tracker struct {
	mu     sync.Mutex
	n      int
	closed bool
	idle   chan struct{}
}

func (t *tracker) add() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.n++
	return true
}

func (t *tracker) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n--
	if t.n == 0 && t.idle != nil {
		close(t.idle)
		t.idle = nil
	}
}

func (t *tracker) closeAndWait() {
	t.mu.Lock()
	t.closed = true
	if t.n == 0 {
		t.mu.Unlock()
		return
	}
	idle := make(chan struct{})
	t.idle = idle
	t.mu.Unlock()
	<-idle
}
