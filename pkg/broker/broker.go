package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ohd-dev/ohd/pkg/egress"
	"github.com/ohd-dev/ohd/pkg/peercred"
)

// Options configure a Broker. The zero value of every field but RuntimeDir,
// Key and Backend is a safe default.
type Options struct {
	// RuntimeDir holds the sockets: <RuntimeDir>/conversations/<id>/
	// broker.sock, with the token in <RuntimeDir>/conversations/<id>/token.
	// Required, absolute. The conversations directory is created 0711 so a
	// conversation's uid can reach its own directory; keep RuntimeDir short
	// (a socket path is at most 107 bytes).
	RuntimeDir string
	// Key is the 32-byte broker key (see DeriveKey). Required.
	Key []byte
	// Backend answers what the broker needs from ohd's store. Required.
	Backend Backend
	// Logger receives operational messages (names, never values). nil
	// discards them.
	Logger *slog.Logger
	// Limits bound each conversation; zero fields take their defaults.
	Limits Limits
	// HTTPClient reaches LLM providers and OAuth token endpoints. nil means
	// a client with dial, TLS and response-header timeouts and the
	// environment's proxy settings. The broker never follows redirects
	// with it (a redirect is passed to the caller).
	HTTPClient *http.Client
	// EgressAllow are egress destinations granted to every conversation
	// (ohd serve --egress-allow), in egress.ParseDest's form; New refuses
	// an invalid one.
	EgressAllow []string
	// EgressPolicy checks egress targets; nil means the host's resolver
	// and interface addresses.
	EgressPolicy *egress.Policy
	// Now is the clock (tests). nil means time.Now.
	Now func() time.Time
}

// Limits bound what one conversation can ask of the broker. Each
// conversation has its own budget, so one busy conversation cannot starve
// another.
type Limits struct {
	// MaxBody bounds request bodies (git-credential); default 64 KiB.
	MaxBody int64
	// MaxProxyBody bounds request bodies forwarded to an LLM provider
	// (prompts are large); default 32 MiB.
	MaxProxyBody int64
	// MaxInFlight is the number of requests of no kind (whoami, the list
	// of secrets, unknown routes) one conversation may have in progress;
	// default 8; negative means no limit. Requests over a budget are
	// refused at once with 429.
	MaxInFlight int
	// GitInFlight, SecretInFlight, LLMInFlight, OAuthInFlight and
	// MCPInFlight are the separate budgets of requests in progress per
	// conversation for each kind, so that open LLM or MCP streams or
	// callers waiting on a hung OAuth token endpoint never starve git
	// (TestOneBudgetCannotStarveAnother). Defaults: git 8, secret 8, LLM
	// 32 (streams stay open for minutes), OAuth 8, MCP 16 (a streamable
	// HTTP client keeps a GET stream open per server); negative means no
	// limit.
	GitInFlight, SecretInFlight, LLMInFlight, OAuthInFlight, MCPInFlight int
	// MaxConns caps the connections one conversation may hold open to its
	// socket (idle keep-alive ones included); default DefaultMaxConns
	// (128: the in-flight budgets' sum and headroom); negative means
	// no limit. A connection over it gets 429 rate_limited and is closed.
	MaxConns int
	// EgressConns caps the egress connections (GET /v1/egress/{dest})
	// one conversation may hold open at once; default
	// DefaultEgressConns; negative means no limit. One over it is
	// refused with 429 rate_limited (audit reason in_flight).
	EgressConns int
	// EgressRate is the refill rate per second of the conversation's
	// bucket of new egress connections, and EgressBurst its size;
	// defaults DefaultEgressRate and DefaultEgressBurst; a negative
	// EgressRate means no limit. Egress connections also take a token of
	// the conversation's request bucket (Rate).
	EgressRate  float64
	EgressBurst int
	// Rate is the refill rate per second of the conversation's token
	// bucket; default 50; negative means no limit.
	Rate float64
	// Burst is the bucket's size; default 100.
	Burst int
	// ReadHeaderTimeout cuts off a client that does not send its request
	// headers in time; default 5s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle that long; default 2m.
	IdleTimeout time.Duration
}

const (
	defaultMaxBody           = 64 << 10
	defaultMaxProxyBody      = 32 << 20
	defaultMaxInFlight       = 8
	defaultGitInFlight       = 8
	defaultSecretInFlight    = 8
	defaultLLMInFlight       = 32
	defaultOAuthInFlight     = 8
	defaultMCPInFlight       = 16
	defaultRate              = 50
	defaultBurst             = 100
	defaultReadHeaderTimeout = 5 * time.Second
	defaultIdleTimeout       = 2 * time.Minute
	maxHeaderBytes           = 64 << 10
)

// DefaultMaxConns is Limits.MaxConns's default: the sum of the default
// in-flight budgets (80: every kind's budget can be full at once, each
// request on its own connection) plus 48 for idle keep-alive connections
// (a client's pool keeps some open between requests), so that full LLM,
// MCP and OAuth budgets never refuse the next git-credential connection
// (TestOneBudgetCannotStarveAnother).
const DefaultMaxConns = defaultMaxInFlight + defaultGitInFlight + defaultSecretInFlight +
	defaultLLMInFlight + defaultOAuthInFlight + defaultMCPInFlight + 48

func (l Limits) withDefaults() Limits {
	if l.MaxBody <= 0 {
		l.MaxBody = defaultMaxBody
	}
	if l.MaxProxyBody <= 0 {
		l.MaxProxyBody = defaultMaxProxyBody
	}
	for _, f := range []struct {
		v   *int
		def int
	}{
		{&l.MaxInFlight, defaultMaxInFlight}, {&l.GitInFlight, defaultGitInFlight},
		{&l.SecretInFlight, defaultSecretInFlight}, {&l.LLMInFlight, defaultLLMInFlight},
		{&l.OAuthInFlight, defaultOAuthInFlight}, {&l.MCPInFlight, defaultMCPInFlight},
		{&l.MaxConns, DefaultMaxConns}, {&l.EgressConns, DefaultEgressConns},
	} {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if l.Rate == 0 {
		l.Rate = defaultRate
	}
	if l.Burst <= 0 {
		l.Burst = defaultBurst
	}
	if l.EgressRate == 0 {
		l.EgressRate = DefaultEgressRate
	}
	if l.EgressBurst <= 0 {
		l.EgressBurst = DefaultEgressBurst
	}
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = defaultReadHeaderTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = defaultIdleTimeout
	}
	return l
}

// Grants are the names a conversation may use, per kind. A Git entry is a
// host ("github.com", "git.example.com:8443") or a host and a path prefix
// ("github.com/acme" or "github.com/acme/widgets").
type Grants struct {
	Secrets []string `json:"secrets"`
	Git     []string `json:"git"`
	LLM     []string `json:"llm"`
	OAuth   []string `json:"oauth"`
	MCP     []string `json:"mcp"`
	// GitOptions are the options of Git entries that have any, by entry
	// (see GitOptions).
	GitOptions map[string]GitOptions `json:"-"`
	// Net are egress destinations (egress.ParseDest): HOST[:PORT],
	// *.DOMAIN[:PORT] or IP:PORT.
	Net []string `json:"net"`
}

// Conversation is what the broker needs to know about a conversation.
type Conversation struct {
	ID string
	// UID and GID own the conversation's directory, socket and token; a
	// peer must run as UID (or root).
	UID, GID int
	// Epoch is the current token epoch; rotation and revocation bump it.
	Epoch  uint64
	Grants Grants
}

// GitCredential is the credential configured for a git host.
type GitCredential struct {
	Username string
	Password []byte
	// Scheme is how the git relay reaches the host: "https" (also for
	// "") or "http".
	Scheme string
	// Bearer sends Password as "Authorization: Bearer"; otherwise the
	// relay sends Basic with Username and Password.
	Bearer bool
}

// LLMProfile is an LLM provider and the key to reach it.
type LLMProfile struct {
	Name, Model string
	// BaseURL is where proxied requests go: the path after .../proxy/ is
	// appended to it.
	BaseURL string
	APIKey  []byte
	// AllowDisclosure lets GET /v1/llm/{profile} hand the key to the
	// conversation. Without it the key is only ever injected by the proxy.
	AllowDisclosure bool
	// AuthHeader is the header the key goes in: "" means
	// "Authorization: Bearer <key>"; any other name (e.g. "x-api-key")
	// carries the bare key.
	AuthHeader string
}

// MCPServer is a remote MCP server (streamable HTTP) and the credential
// headers the broker injects into every request proxied to it.
type MCPServer struct {
	Name string
	// URL is the server's endpoint: a proxied request with no path after
	// .../proxy goes to it exactly, one with a path to URL + "/" + path.
	URL     string
	Headers []Header
}

// Header is one header to inject: Name, and its value.
type Header struct {
	Name  string
	Value []byte
}

// OAuthServer is an OAuth 2 authorization server and the tokens ohd holds
// for it.
type OAuthServer struct {
	Name, TokenURL, ClientID                string
	ClientSecret, RefreshToken, AccessToken []byte
	// Expiry of AccessToken; zero means it does not expire.
	Expiry time.Time
}

// AuditRecord is one request to the broker: names and outcome, never
// values.
type AuditRecord struct {
	Time         time.Time // when the request arrived
	Conversation string    // the socket's conversation
	Route        string    // the route pattern, e.g. "GET /v1/secrets/{name}"; "" for no route
	Kind         string    // "secret", "git", "llm", "oauth", "mcp", or ""
	Name         string    // the name asked for (a git host[/path]), or ""
	PeerPID      int       // from SO_PEERCRED, at connect time; -1 if unknown
	PeerUID      int       // from SO_PEERCRED; -1 if unknown
	Allowed      bool      // the request passed every check and was served
	Status       int       // the HTTP status answered (the provider's, for the LLM proxy)
	Code         string    // the error code if refused ("" if allowed)
	// Reason says precisely why a request was refused (e.g. "stale_epoch",
	// "peer_uid", "rate", "in_flight"); "" if allowed. The caller is told
	// less (see doc.go).
	Reason string
	// Detail adds names the record is about, e.g. a push's refs asked,
	// allowed and refused; never a value.
	Detail string
	// Egress connections only: Addr is the address dialled ("" if none
	// was), BytesOut and BytesIn the bytes sent to it and received from
	// it, Duration how long the connection was open.
	Addr              string
	BytesOut, BytesIn int64
	Duration          time.Duration
}

// Backend is what the broker needs from ohd: the daemon implements it on
// its store. Every method but Audit is called on the request path and must
// be cheap (Conversation on every request: serve it from memory).
type Backend interface {
	// Conversation returns the conversation id, or ErrNotFound if it is
	// unknown or ended.
	Conversation(ctx context.Context, id string) (Conversation, error)
	// Secret returns the value of a secret, or ErrNotFound. The broker
	// neither keeps nor modifies the slice.
	Secret(ctx context.Context, name string) ([]byte, error)
	// GitCredential returns the credential configured for host (lower
	// case, with ":port" if not the default), or ErrNotFound.
	GitCredential(ctx context.Context, host string) (GitCredential, error)
	// LLMProfile returns a profile, or ErrNotFound.
	LLMProfile(ctx context.Context, name string) (LLMProfile, error)
	// MCPServer returns an MCP server with its header values, or
	// ErrNotFound.
	MCPServer(ctx context.Context, name string) (MCPServer, error)
	// OAuthServer returns a server and its current tokens, or ErrNotFound.
	// After SaveOAuthTokens returns, OAuthServer must return the saved
	// tokens.
	OAuthServer(ctx context.Context, name string) (OAuthServer, error)
	// SaveOAuthTokens stores tokens the broker obtained by refreshing;
	// refresh is the (possibly rotated) refresh token to keep.
	SaveOAuthTokens(ctx context.Context, name string, access, refresh []byte, expiry time.Time) error
	// GitBranchCreators returns, of refs in repository repo of host (the
	// path as the relay was asked for it), those a conversation created
	// through the relay (RecordGitBranches), each with that
	// conversation's id. Called once per push that updates a branch under
	// refs/heads/openhands/ another conversation may have made.
	GitBranchCreators(ctx context.Context, host, repo string, refs []string) (map[string]string, error)
	// RecordGitBranches records durably that conversation id created refs
	// in repository repo of host through the relay (the host reported
	// them updated), replacing any earlier creator of the same refs.
	RecordGitBranches(ctx context.Context, id, host, repo string, refs []string) error
	// Audit records a request. It must not block: batch the writes.
	Audit(rec AuditRecord)
	// AuditErr returns non-nil while audit records cannot be made durable
	// (the state directory is full): the broker then refuses every request
	// with 503 audit_unavailable, and serves again once it returns nil.
	// Called on every request: make it an atomic load.
	AuditErr() error
}

// Endpoint is where a conversation's broker lives on the host.
type Endpoint struct {
	Dir       string // <RuntimeDir>/conversations/<id>, to bind-mount at /run/ohd
	Socket    string // Dir/broker.sock
	TokenFile string // Dir/token
}

// Socket and token file names inside a conversation's directory, and where
// the directory is mounted in a container.
const (
	SocketName         = "broker.sock"
	TokenName          = "token"
	ContainerDir       = "/run/ohd"
	DefaultSocket      = ContainerDir + "/" + SocketName
	DefaultTokenFile   = ContainerDir + "/" + TokenName
	EnvSocket          = "OHD_BROKER_SOCKET"
	EnvTokenFile       = "OHD_BROKER_TOKEN_FILE"
	conversationsDir   = "conversations"
	maxSocketPathBytes = 107
)

// Broker serves one Unix socket per conversation. Its methods are safe for
// concurrent use.
type Broker struct {
	opts   Options
	limits Limits
	key    []byte
	log    *slog.Logger
	now    func() time.Time
	hc     *http.Client
	oauth  flights
	root   string // <RuntimeDir>/conversations

	egressAllow []egress.Dest // granted to every conversation
	policy      *egress.Policy

	ctx    context.Context // cancelled by Shutdown: ends OAuth refreshes
	cancel context.CancelFunc
	wg     sync.WaitGroup // serve goroutines and OAuth refreshes

	mu     sync.Mutex // guards convs and closed; held across Open/Close file work (rare, not the request path)
	convs  map[string]*conversation
	closed bool
}

// conversation is one socket and its server.
type conversation struct {
	b    *Broker
	id   string
	ep   Endpoint
	srv  *http.Server
	ln   *net.UnixListener
	done chan struct{} // closed when Serve returned
	lim  limiter
	mac  atomic.Pointer[macEntry]
	net  egressState
}

type macEntry struct {
	epoch uint64
	mac   string
}

// New returns a Broker serving nothing yet; Open starts conversations.
func New(opts Options) (*Broker, error) {
	if opts.RuntimeDir == "" || !filepath.IsAbs(opts.RuntimeDir) {
		return nil, fmt.Errorf("new broker: runtime dir %q must be an absolute path", opts.RuntimeDir)
	}
	if len(opts.Key) != KeySize {
		return nil, fmt.Errorf("new broker: key is %d bytes, want %d (use DeriveKey)", len(opts.Key), KeySize)
	}
	if opts.Backend == nil {
		return nil, errors.New("new broker: no backend")
	}
	b := &Broker{
		opts:   opts,
		limits: opts.Limits.withDefaults(),
		key:    append([]byte(nil), opts.Key...),
		log:    opts.Logger,
		now:    opts.Now,
		root:   filepath.Join(filepath.Clean(opts.RuntimeDir), conversationsDir),
		convs:  make(map[string]*conversation),
	}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	if b.now == nil {
		b.now = time.Now
	}
	b.hc = noRedirects(opts.HTTPClient)
	allow, err := egress.ParseDests(opts.EgressAllow)
	if err != nil {
		return nil, fmt.Errorf("new broker: egress allow: %w", err)
	}
	b.egressAllow, b.policy = allow, opts.EgressPolicy
	if b.policy == nil {
		b.policy = &egress.Policy{}
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b, nil
}

// Open starts serving conversation conv: it creates
// <RuntimeDir>/conversations/<id>/ (0700) with broker.sock (0600) and
// token (0400), all owned by conv.UID:conv.GID, writes the token of
// conv.Epoch, and serves the socket until Close or Shutdown.
//
// Open is idempotent. For a conversation this Broker already serves it
// rewrites the token for conv.Epoch and returns the same Endpoint. For a
// directory left by an earlier ohd (a restart) it keeps the directory (its
// inode, which a container has bind-mounted) and atomically replaces the
// stale socket with a live one; a token of the same epoch keeps working,
// as tokens depend only on the key, the id and the epoch.
func (b *Broker) Open(ctx context.Context, conv Conversation) (Endpoint, error) {
	if !ValidID(conv.ID) {
		return Endpoint{}, fmt.Errorf("open broker %q: %w", conv.ID, ErrInvalidID)
	}
	if conv.UID < 0 || conv.GID < 0 {
		return Endpoint{}, fmt.Errorf("open broker %s: invalid owner %d:%d", conv.ID, conv.UID, conv.GID)
	}
	if err := ctx.Err(); err != nil {
		return Endpoint{}, fmt.Errorf("open broker %s: %w", conv.ID, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return Endpoint{}, fmt.Errorf("open broker %s: %w", conv.ID, ErrClosed)
	}
	if c, ok := b.convs[conv.ID]; ok {
		if err := b.writeToken(conv.ID, conv.Epoch, conv.UID, conv.GID); err != nil {
			return Endpoint{}, fmt.Errorf("open broker %s: %w", conv.ID, err)
		}
		return c.ep, nil
	}
	ep := b.endpoint(conv.ID)
	if len(ep.Socket) > maxSocketPathBytes {
		return Endpoint{}, fmt.Errorf("open broker %s: socket path %s is %d bytes, the limit is %d: use a shorter runtime dir", conv.ID, ep.Socket, len(ep.Socket), maxSocketPathBytes)
	}
	if err := b.prepareDir(ep.Dir, conv.UID, conv.GID); err != nil {
		return Endpoint{}, fmt.Errorf("open broker %s: %w", conv.ID, err)
	}
	if err := b.writeToken(conv.ID, conv.Epoch, conv.UID, conv.GID); err != nil {
		return Endpoint{}, fmt.Errorf("open broker %s: %w", conv.ID, err)
	}
	ln, err := b.listen(ep.Socket, conv.UID, conv.GID)
	if err != nil {
		return Endpoint{}, fmt.Errorf("open broker %s: %w", conv.ID, err)
	}
	c := &conversation{b: b, id: conv.ID, ep: ep, ln: ln, done: make(chan struct{})}
	c.lim.init(b.limits)
	c.net.init(b.limits)
	c.srv = &http.Server{
		Handler:           c,
		ConnContext:       peercred.ConnContext,
		ConnState:         c.connState,
		ReadHeaderTimeout: b.limits.ReadHeaderTimeout,
		IdleTimeout:       b.limits.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(b.log.With("conversation", conv.ID).Handler(), slog.LevelDebug),
	}
	b.convs[conv.ID] = c
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer close(c.done)
		if err := c.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			b.log.Error("broker socket stopped", "conversation", c.id, "err", err)
		}
	}()
	b.log.Debug("broker open", "conversation", conv.ID, "socket", ep.Socket)
	return ep, nil
}

// WriteToken atomically rewrites the token file of conversation id for
// epoch, owned by uid:gid and mode 0400. Rotation: the caller bumps the
// epoch in its store first (so Backend.Conversation returns it), then
// writes the token; from then on only the new token is accepted.
func (b *Broker) WriteToken(id string, epoch uint64, uid, gid int) error {
	if !ValidID(id) {
		return fmt.Errorf("write token %q: %w", id, ErrInvalidID)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return fmt.Errorf("write token %s: %w", id, ErrClosed)
	}
	if err := b.writeToken(id, epoch, uid, gid); err != nil {
		return fmt.Errorf("write token %s: %w", id, err)
	}
	return nil
}

// Close stops serving conversation id, cutting its open connections, and
// removes its directory (the conversation ended). It is not an error if
// the conversation is not served (after a restart) or the directory is
// already gone.
func (b *Broker) Close(id string) error {
	if !ValidID(id) {
		return fmt.Errorf("close broker %q: %w", id, ErrInvalidID)
	}
	// Held throughout, so an Open of the same id cannot interleave; the
	// server's Close does not wait for handlers, only for Serve to return.
	b.mu.Lock()
	defer b.mu.Unlock()
	if c := b.convs[id]; c != nil {
		delete(b.convs, id)
		c.srv.Close()
		c.net.closeAll()
		<-c.done
	}
	if err := removeAll(b.endpoint(id).Dir); err != nil {
		return fmt.Errorf("close broker %s: %w", id, err)
	}
	b.log.Debug("broker closed", "conversation", id)
	return nil
}

// Shutdown stops every socket, letting requests in progress finish until
// ctx ends (then it cuts them), and keeps the directories: a restarted ohd
// Opens them again. The Broker cannot be used afterwards.
func (b *Broker) Shutdown(ctx context.Context) error {
	b.mu.Lock()
	b.closed = true
	convs := make([]*conversation, 0, len(b.convs))
	for id, c := range b.convs {
		convs = append(convs, c)
		delete(b.convs, id)
	}
	b.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(convs))
	for i, c := range convs {
		wg.Go(func() {
			if err := c.srv.Shutdown(ctx); err != nil {
				c.srv.Close()
				errs[i] = fmt.Errorf("shutdown broker %s: %w", c.id, err)
			}
		})
	}
	wg.Wait()
	for _, c := range convs {
		c.net.closeAll()
	}
	b.cancel()
	b.wg.Wait()
	return errors.Join(errs...)
}

func (b *Broker) endpoint(id string) Endpoint {
	dir := filepath.Join(b.root, id)
	return Endpoint{Dir: dir, Socket: filepath.Join(dir, SocketName), TokenFile: filepath.Join(dir, TokenName)}
}

// expectedMAC returns the MAC text for this conversation at epoch,
// computed once per epoch.
func (c *conversation) expectedMAC(epoch uint64) string {
	if e := c.mac.Load(); e != nil && e.epoch == epoch {
		return e.mac
	}
	e := &macEntry{epoch: epoch, mac: computeMAC(c.b.key, c.id, strconv.FormatUint(epoch, 10))}
	c.mac.Store(e)
	return e.mac
}

// noRedirects returns a copy of hc (or of a default client) that hands
// redirects back instead of following them: a redirect must not carry an
// injected key or a client secret to another URL.
func noRedirects(hc *http.Client) *http.Client {
	var c http.Client
	if hc != nil {
		c = *hc
	} else {
		c.Transport = &http.Transport{
			Proxy: http.ProxyFromEnvironment,
			DialContext: (&net.Dialer{
				Timeout:   10 * time.Second,
				KeepAlive: 30 * time.Second,
			}).DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          100,
			MaxIdleConnsPerHost:   16,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: 5 * time.Minute, // non-streamed completions are slow
			ExpectContinueTimeout: time.Second,
			WriteBufferSize:       bodyWriteBuffer,
		}
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}
