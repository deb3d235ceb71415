package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/ohd-dev/ohd/pkg/conversation"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/store"
)

// Conversations is what the proxy needs from ohd's orchestrator;
// *conversation.Manager implements it (List returns every record, as
// store.Store.Conversations does).
type Conversations interface {
	// Create provisions a conversation and runs req.Forward before
	// marking it running; its error undoes everything.
	Create(ctx context.Context, req conversation.CreateRequest) (store.Conversation, error)
	// Get returns a record; conversation.ErrNotFound if unknown or deleted.
	Get(id string) (store.Conversation, error)
	// List returns every record, oldest first.
	List() []store.Conversation
	// Target returns where the inner server answers, starting a stopped
	// conversation again first.
	Target(ctx context.Context, id string) (conversation.Target, error)
	// Remove ends a conversation (snapshot, worktree, container, broker).
	Remove(ctx context.Context, id string, opts conversation.RemoveOptions) (store.Conversation, error)
	// Touch records activity for the idle timer.
	Touch(id string)
	// InnerInfo is the ConversationInfo the inner server persisted on the
	// host, for answers while it does not run; openhands.ErrNoState if
	// there is none.
	InnerInfo(id string) (json.RawMessage, error)
}

// Observer receives counters the daemon can export as metrics. Its
// methods are called on the request path and must not block.
type Observer interface {
	// ObserveRequest is called once per HTTP request with the route's
	// label (see the package documentation), the status answered and
	// the time taken (for a WebSocket, until it closed).
	ObserveRequest(route string, status int, d time.Duration)
	// WebSocketOpened is called when a client's WebSocket is accepted.
	WebSocketOpened()
	// WebSocketClosed is called when it ends, with the close code sent to
	// the client (1006 if none could be sent).
	WebSocketClosed(code int, d time.Duration)
}

// Timeouts bound the proxy's waits. A zero field takes its default.
type Timeouts struct {
	// ReadHeader bounds reading a client's request headers. Default 10s.
	ReadHeader time.Duration
	// Idle closes a client's idle keep-alive connection. Default 2m.
	Idle time.Duration
	// Dial bounds connecting to an inner server. Default 5s.
	Dial time.Duration
	// ResponseHeader bounds the wait for an inner server's response
	// headers; the body may then stream for as long as it lasts.
	// Default 10m (some agent-server calls run an LLM round trip).
	ResponseHeader time.Duration
	// Metadata bounds each inner read made for GET, list, search and
	// count; on timeout ohd answers from its own records. Default 5s.
	Metadata time.Duration
	// WSAuth is how long a WebSocket client has to send its first-message
	// authentication. Default 10s.
	WSAuth time.Duration
	// WSWrite bounds writing one WebSocket message (or a ping's answer):
	// a client that does not read for this long is disconnected, so it
	// cannot hold the inner server's stream. Default 30s.
	WSWrite time.Duration
	// WSPing is the interval of keepalive pings to WebSocket clients.
	// Default 30s; negative disables them.
	WSPing time.Duration
	// Shutdown is the grace period Serve gives in-flight HTTP requests
	// when its context ends. Default 10s.
	Shutdown time.Duration
}

func (t *Timeouts) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&t.ReadHeader, 10*time.Second)
	def(&t.Idle, 2*time.Minute)
	def(&t.Dial, 5*time.Second)
	def(&t.ResponseHeader, 10*time.Minute)
	def(&t.Metadata, 5*time.Second)
	def(&t.WSAuth, 10*time.Second)
	def(&t.WSWrite, 30*time.Second)
	def(&t.WSPing, 30*time.Second)
	def(&t.Shutdown, 10*time.Second)
}

// Options configure a Server. Conversations and Keys are required; the zero
// value of every other field is safe.
type Options struct {
	// Conversations is ohd's orchestrator (required).
	Conversations Conversations
	// Keys are the accepted session API keys (at least one, none empty):
	// clients send one in X-Session-API-Key.
	Keys [][]byte
	// AllowRemote lets Serve accept a listener on a non-loopback address.
	// The daemon sets it only when the operator configured the keys
	// (not for a generated key file). Default false: loopback only.
	AllowRemote bool
	// Logger receives the proxy's logs (never a key or a header value);
	// nil discards them.
	Logger *slog.Logger
	// MaxBody bounds a request body; a larger one is refused with 413.
	// Default 16 MiB.
	MaxBody int64
	// MaxWSMessage bounds one WebSocket message in either direction; a
	// larger one closes the connection with 1009. Default 16 MiB.
	MaxWSMessage int64
	// Timeouts bound waits; zero fields take their defaults.
	Timeouts Timeouts
	// CORSOrigins are browser origins (scheme://host[:port]) allowed to
	// call the API besides loopback pages (--cors-origin; see cors.go).
	// Nil: pages on localhost, 127.0.0.1 and [::1] only. A WebSocket
	// upgrade carrying an Origin is checked against the same rule.
	CORSOrigins []string
	// WorkspaceRoots are directories under which a create's missing
	// working_dir is made (--workspace-root), besides the upstream's home
	// (its GET /api/file/home). Nil, without an upstream: a missing
	// working_dir is refused.
	WorkspaceRoots []string
	// Observer, if set, receives request and WebSocket counters.
	Observer Observer
	// Upstream, if set, is the operator's own agent server (--upstream):
	// every route that is not a conversation's (settings, profiles,
	// server info, /api/file/home, /sockets/bash-events, ...) passes to
	// it. nil: those routes answer 404 naming the flag.
	Upstream *url.URL
	// UpstreamSecretKey is the upstream's OH_SECRET_KEY
	// (--upstream-secret-key-file): ohd opens the Fernet tokens Canvas
	// copies from the upstream's settings into a create body with it.
	// It never reaches a container.
	UpstreamSecretKey []byte
	// Secrets keeps what secret mediation takes out of create and
	// secrets bodies (the daemon passes its store). nil: a body carrying
	// a credential is refused.
	Secrets SecretStore
	// Metrics, if set, is served at GET /metrics behind the same key
	// check as every other route (a Prometheus scrape config can send the
	// X-Session-API-Key header; ohd's --metrics-listen is the key-less,
	// loopback-only alternative).
	Metrics http.Handler
}

// Server is the conversation API. Build it with New; serve it with Serve,
// or mount Handler in another server.
type Server struct {
	conv Conversations
	keys keySet
	log  *slog.Logger
	opts Options
	t    Timeouts
	obs  Observer

	mux          *http.ServeMux
	forwardRoute http.Handler    // the mux's handler of /api/conversations/{id}/{tail...}
	transport    *http.Transport // requests with a body, WebSocket dials
	inner        *innerTransport // every forwarded request (GET and HEAD synchronously)
	dialer       *net.Dialer
	client       *http.Client // metadata reads and the create forward
	rp           *httputil.ReverseProxy
	up           *upstream // nil without Options.Upstream
	med          *openhands.Mediator
	corsPolicy   corsPolicy
	started      time.Time
	homeMu       sync.Mutex
	upstreamHome string // the upstream's home, once learned (workdir.go)
	capsMu       sync.Mutex
	imageCaps    map[string][]string // inner /server_info capabilities by image ID
	bashMu       sync.Mutex
	bashOwners   map[string]string // bash command id -> conversation, for calls without cid (pathroute.go)
	forkMu       sync.Mutex
	forking      map[string]int // fork ids a source's server holds for a fork in flight (fork.go)

	// WebSocket bookkeeping: closing is closed when Serve shuts down, so
	// every bridge closes with 1001; wsWG counts running WebSocket
	// handlers, and wsDone (under wsMu) refuses new ones once Serve waits.
	closeOnce sync.Once
	closing   chan struct{}
	wsMu      sync.Mutex
	wsDone    bool
	wsWG      sync.WaitGroup
}

// New returns a Server for opts.
func New(opts Options) (*Server, error) {
	if opts.Conversations == nil {
		return nil, errors.New("new conversation API: no Conversations given")
	}
	keys, err := newKeySet(opts.Keys)
	if err != nil {
		return nil, fmt.Errorf("new conversation API: %w", err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = 16 << 20
	}
	if opts.MaxWSMessage <= 0 {
		opts.MaxWSMessage = 16 << 20
	}
	opts.Timeouts.defaults()
	cp, err := newCORSPolicy(opts.CORSOrigins)
	if err != nil {
		return nil, fmt.Errorf("new conversation API: %w", err)
	}
	s := &Server{
		conv: opts.Conversations, keys: keys, log: opts.Logger, opts: opts, t: opts.Timeouts,
		obs: opts.Observer, closing: make(chan struct{}), corsPolicy: cp, started: time.Now(),
		imageCaps:  map[string][]string{},
		bashOwners: map[string]string{},
	}
	s.transport = &http.Transport{
		// Never an HTTP proxy from the environment: inner servers are
		// on this host.
		Proxy:                 nil,
		DialContext:           s.dialInnerConn,
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: s.t.ResponseHeader,
		ExpectContinueTimeout: time.Second,
		// Bodies pass through as the inner server encoded them.
		DisableCompression: true,
	}
	s.dialer = &net.Dialer{Timeout: s.t.Dial, KeepAlive: 30 * time.Second}
	s.inner = &innerTransport{
		fallback: s.transport, dial: s.dialInnerConn, responseHeader: s.t.ResponseHeader, dialTimeout: s.t.Dial,
		idleTimeout: 90 * time.Second, maxIdlePerHost: 64, maxIdle: 512,
	}
	s.client = &http.Client{
		Transport: s.inner,
		// An inner redirect is answered, never followed.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	s.rp = s.newReverseProxy()
	if opts.Upstream != nil {
		s.up = s.newUpstream(opts.Upstream)
	}
	s.med = s.newMediator()
	s.routes()
	return s, nil
}

// serveHTTP routes a request. A request for a conversation's forwarded
// route (/api/conversations/{id}/{tail...}, the hot path) goes straight
// to it when the mux would send it there anyway (a clean path, not
// CONNECT): matching it against the mux's dozen patterns cost more than
// the routing work itself.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Origin") != "" {
		if isUpgrade(r) && !s.wsOriginAllowed(w, r) {
			return
		}
		s.cors(s.dispatch)(w, r)
		return
	}
	s.dispatch(w, r)
}

func (s *Server) dispatch(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect && isForwardPath(r.URL) {
		s.forwardRoute.ServeHTTP(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// isForwardPath reports whether the mux routes u's path to
// "/api/conversations/{id}/{tail...}": an id segment followed by a slash,
// in a path the mux would not redirect to its clean form.
func isForwardPath(u *url.URL) bool {
	if !strings.HasPrefix(u.Path, conversationsPrefix) {
		return false
	}
	return isForwardPathString(u.Path, u.EscapedPath())
}

// isForwardPathString is isForwardPath for a path p and its escaped form.
func isForwardPathString(p, escaped string) bool {
	if !strings.HasPrefix(p, conversationsPrefix) {
		return false
	}
	rest, ok := strings.CutPrefix(escaped, conversationsPrefix)
	if !ok || strings.IndexByte(rest, '/') <= 0 || isPortTail(rest) {
		return false
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}

// Serve serves the conversation API on ln until ctx ends. It refuses a
// listener on a non-loopback address unless Options.AllowRemote is set
// (ErrNonLoopback). At shutdown, WebSockets are closed with 1001 (going
// away) and in-flight requests get Timeouts.Shutdown to finish; Serve
// returns once every handler has returned.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if err := s.checkListener(ln); err != nil {
		ln.Close()
		return err
	}
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	hs := &http.Server{
		Handler:           http.HandlerFunc(s.serveHTTP),
		ReadHeaderTimeout: s.t.ReadHeader,
		IdleTimeout:       s.t.Idle,
		MaxHeaderBytes:    1 << 20,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	// The front reads every connection first and answers the hot path's
	// requests itself; net/http's server gets the rest (front.go).
	f := newFront(s, ln, base)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(f.handoff) }()
	acceptc := make(chan error, 1)
	go func() { acceptc <- f.acceptLoop() }()
	var err error
	select {
	case err = <-errc:
	case err = <-acceptc:
	case <-ctx.Done():
	}
	s.closeOnce.Do(func() { close(s.closing) })
	sctx, cancel := context.WithTimeout(context.Background(), s.t.Shutdown)
	var fwg sync.WaitGroup
	fwg.Go(func() { f.shutdown(sctx) })
	_ = hs.Shutdown(sctx)
	fwg.Wait()
	cancel()
	if ctx.Err() != nil {
		err = nil
	}
	cancelBase()
	_ = hs.Close()
	f.close()
	f.wg.Wait()
	s.inner.CloseIdleConnections()
	s.wsMu.Lock()
	s.wsDone = true
	s.wsMu.Unlock()
	s.wsWG.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// wsStart registers a WebSocket handler with Serve's shutdown; false if
// Serve has finished waiting for them.
func (s *Server) wsStart() bool {
	s.wsMu.Lock()
	defer s.wsMu.Unlock()
	if s.wsDone {
		return false
	}
	s.wsWG.Add(1)
	return true
}

func (s *Server) checkListener(ln net.Listener) error {
	a, ok := ln.Addr().(*net.TCPAddr)
	if !ok || a.IP.IsLoopback() || s.opts.AllowRemote {
		return nil
	}
	return fmt.Errorf("serve conversation API on %s: %w: the address is not loopback and no session API keys were configured; listen on 127.0.0.1 or configure keys", a, ErrNonLoopback)
}

// Route labels passed to the Observer.
const (
	routeCreate     = "create"
	routeGet        = "get"
	routeBatchGet   = "batch_get"
	routeCount      = "count"
	routeSearch     = "search"
	routeDelete     = "delete"
	routeForward    = "forward"
	routeEvents     = "events"
	routeSession    = "session"
	routeAuth       = "auth"
	routeHealth     = "health"
	routeNotFound   = "not_found"
	routeMetrics    = "metrics"
	routeUpstream   = "upstream"
	routeServerInfo = "server_info"
)

func (s *Server) routes() {
	m := http.NewServeMux()
	s.mux = m
	health := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(body + "\n"))
		}
	}
	// The agent server's probes answer without a key; they say nothing
	// about conversations.
	m.Handle("GET /alive", s.route(routeHealth, false, health(`{"status":"ok"}`)))
	m.Handle("GET /health", s.route(routeHealth, false, health(`{"status":"ok"}`)))
	m.Handle("GET /ready", s.route(routeHealth, false, health(`{"status":"ready"}`)))
	// /server_info answers without a key, as the agent server's
	// (server_details_router.py L117, mounted without auth).
	m.Handle("GET /server_info", s.route(routeServerInfo, false, s.serverInfo))

	m.Handle("POST /api/conversations", s.route(routeCreate, true, s.create))
	m.Handle("GET /api/conversations", s.route(routeBatchGet, true, s.batchGet))
	m.Handle("/api/conversations", s.route(routeNotFound, true, methodNotAllowed("GET, POST")))
	m.Handle("GET /api/conversations/count", s.route(routeCount, true, s.count))
	m.Handle("GET /api/conversations/search", s.route(routeSearch, true, s.search))
	m.Handle("GET /api/conversations/{id}", s.route(routeGet, true, s.get))
	m.Handle("DELETE /api/conversations/{id}", s.route(routeDelete, true, s.remove))
	m.Handle("POST /api/conversations/prepare-for-sandbox-pause", s.route(routeUpstream, true, s.prepareForSandboxPause))
	m.Handle("POST /api/auth/workspace-session", s.route(routeAuth, true, s.workspaceSession))
	m.Handle("DELETE /api/auth/workspace-session", s.route(routeAuth, true, s.workspaceSession))
	m.Handle("/api/conversations/{id}", s.route(routeForward, true, s.forward))
	s.forwardRoute = s.route(routeForward, true, s.forward)
	m.Handle("/api/conversations/{id}/{tail...}", s.forwardRoute)
	// VS Code and the desktop of a conversation (ports.go).
	s.portRoutes(m)
	if s.opts.Metrics != nil {
		m.Handle("GET /metrics", s.route(routeMetrics, true, s.opts.Metrics.ServeHTTP))
	}
	// The WebSocket route authenticates itself (header, query or first
	// message).
	m.Handle("/sockets/events/{id}", s.route(routeEvents, false, s.socket("events")))
	m.Handle("/sockets/session/{id}", s.route(routeSession, false, s.socket("session")))
	// Everything else is not a conversation's: the upstream's, or a
	// deprecated global route with ?cid= (passUpstream authenticates).
	m.Handle("/", s.route(routeUpstream, false, s.passUpstream))
}

func methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeDetail(w, http.StatusMethodNotAllowed, "Method Not Allowed")
	}
}

// route wraps h with the request's bookkeeping: status recording for the
// Observer, header authentication when auth is set, and the refusal of
// X-Expose-Secrets.
func (s *Server) route(label string, auth bool, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w}
		defer func() {
			if s.obs != nil {
				s.obs.ObserveRequest(label, rec.code(), time.Since(start))
			}
		}()
		if auth && !s.keys.valid(requestKey(r)) {
			writeUnauthorized(rec)
			return
		}
		// Only the upstream's own routes may be asked for secrets
		// (passUpstream refuses it on the ?cid= routes).
		if label != routeUpstream && r.Header.Get(openhands.ExposeSecretsHeader) != "" {
			writeDetail(rec, http.StatusUnprocessableEntity, "X-Expose-Secrets is not supported through ohd: secrets never leave a conversation's container; drop the header")
			return
		}
		h(rec, r)
	})
}

// requestKey is the session key of an HTTP request: the
// X-Session-API-Key header, or, on the workspace routes the agent server
// lets a browser reach by cookie (GET /api/conversations/{id}/workspace
// [/{path}], ref §8), the cookie POST /api/auth/workspace-session set.
func requestKey(r *http.Request) string {
	// The canonical spelling: Get then need not canonicalize (a copy).
	if k := r.Header.Get("X-Session-Api-Key"); k != "" || r.Method != http.MethodGet {
		return k
	}
	fp, ok := parseForwardPath(r.URL.EscapedPath())
	if !ok || !fp.HasTail || !openhands.IsWorkspaceTail(fp.Tail) {
		return ""
	}
	c, err := r.Cookie(openhands.WorkspaceCookie)
	if err != nil {
		return ""
	}
	return c.Value
}

// recorder remembers the status for the Observer and keeps Flush and
// Hijack reachable through Unwrap (http.ResponseController and
// coder/websocket follow it).
type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 && code >= 200 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) Flush() { _ = http.NewResponseController(r.ResponseWriter).Flush() }

func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if r.status == 0 {
		r.status = http.StatusSwitchingProtocols
	}
	return http.NewResponseController(r.ResponseWriter).Hijack()
}

func (r *recorder) code() int {
	if r.status == 0 {
		return http.StatusOK
	}
	return r.status
}

// innerDialKey is the context key of a target's own dial function.
type innerDialKey struct{}

// innerDial is a Target's Dial, for the connections to its Addr.
type innerDial struct {
	addr string
	dial func(context.Context) (net.Conn, error)
}

// withTarget makes the transport reach t through t.Dial (inside its
// container's network namespace) when t has one.
func withTarget(ctx context.Context, t conversation.Target) context.Context {
	if t.Dial == nil {
		return ctx
	}
	return context.WithValue(ctx, innerDialKey{}, innerDial{addr: t.Addr, dial: t.Dial})
}

// dialInnerConn opens a connection to an inner server: through the
// target's own dial function when the request carries one for this
// address, else over TCP to the published port.
func (s *Server) dialInnerConn(ctx context.Context, network, addr string) (net.Conn, error) {
	if d, ok := ctx.Value(innerDialKey{}).(innerDial); ok && d.addr == addr {
		ctx, cancel := context.WithTimeout(ctx, s.t.Dial)
		defer cancel()
		return d.dial(ctx)
	}
	return s.dialer.DialContext(ctx, network, addr)
}
