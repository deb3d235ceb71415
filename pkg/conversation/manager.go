package conversation

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/failpoint"
	"github.com/ohd-dev/ohd/pkg/metrics"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/store"
	"github.com/ohd-dev/ohd/pkg/worktree"
)

// Paths inside every container.
const (
	// ContainerBrokerDir is where the conversation's broker directory is
	// mounted (read-only).
	ContainerBrokerDir = "/run/ohd"
	// ContainerHelper is where a static ohctl is mounted, when configured.
	ContainerHelper = "/run/ohd/bin/ohctl"
	// InnerKeyFile is the name of the inner session key file in the
	// broker directory (0400, owned by the conversation's uid).
	InnerKeyFile = "session-api-key"
	// InnerSecretKeyFile is the name of the inner server's cipher key
	// file in the broker directory (0400, owned by the conversation's
	// uid); its value is stable for the conversation's life.
	InnerSecretKeyFile = "secret-key"
)

// Errors callers test with errors.Is.
var (
	// ErrNotFound: no conversation with that id (or it was deleted).
	ErrNotFound = errors.New("conversation not found")
	// ErrInvalid: the request is malformed; nothing was changed.
	ErrInvalid = errors.New("invalid request")
	// ErrConflict: the request conflicts with the conversation's state.
	ErrConflict = errors.New("conflict")
)

// StepError is the error of a create that failed at one step; everything
// the earlier steps provisioned has been undone.
type StepError struct {
	ID   string
	Step string // "worktree", "broker", "image", "container", "forward"
	Err  error
}

func (e *StepError) Error() string {
	if e.Step == "image" {
		// Checked before the record: there was nothing to undo.
		return fmt.Sprintf("create conversation: step image failed: %v (nothing was created)", e.Err)
	}
	return fmt.Sprintf("create conversation %s: step %s failed: %v (everything provisioned was undone)", e.ID, e.Step, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

// Config configures a Manager. Fields marked required must be set; the zero
// value of the others is safe.
type Config struct {
	// Store is ohd's store (required).
	Store *store.Store
	// Worktrees creates host-side worktrees (required).
	Worktrees *worktree.Manager
	// Broker serves the per-conversation sockets (required).
	Broker *broker.Broker
	// Runtime runs containers (required): runtime.NewLocal() for none.
	Runtime runtime.Runtime
	// Image is the image reference of conversation containers (docker).
	Image string
	// InnerPort is the inner server's port in the container; 0 = 8000.
	InnerPort int
	// HealthPath is polled for readiness; "" = "/health".
	HealthPath string
	// ReadyTimeout bounds the readiness wait; 0 = 60s.
	ReadyTimeout time.Duration
	// Resources are the container limits; zero fields take defaults.
	Resources runtime.Resources
	// ReadOnlyRootfs runs containers with a read-only root and tmpfs /tmp.
	ReadOnlyRootfs bool
	// ForwardEnv names host environment variables passed to containers
	// (the operator's allow-list; they must not hold secrets).
	ForwardEnv []string
	// Getenv reads the host environment for ForwardEnv; nil = os.Getenv.
	Getenv func(string) string
	// Helper is the path of a static ohctl binary mounted into containers
	// at /run/ohd/bin/ohctl; it wraps the image's entrypoint to hand the
	// inner session key over without an environment variable, and serves
	// as git's credential helper. Required for the docker runtime.
	Helper string
	// HelperDir, if set, holds copies of Helper that ohd owns, named by
	// content hash (the daemon uses <state-dir>/bin): containers mount the
	// copy made from Helper at each start, so replacing or deleting
	// Helper (make install, make clean) never breaks a container's
	// mount. Empty mounts Helper itself.
	HelperDir string
	// IdleTimeout stops a running container after this long without
	// requests; 0 never stops idle containers.
	IdleTimeout time.Duration
	// StopTimeout is the grace period of a container stop; 0 = 10s.
	StopTimeout time.Duration
	// PublishInterval is how often RunPublisher checks each running
	// conversation's git view for a new commit to publish; 0 = 200ms.
	PublishInterval time.Duration
	// UndoRetryInterval is how often RunUndoRetries retries an unfinished
	// undo of a failed create; 0 = 30s.
	UndoRetryInterval time.Duration
	// OnStep, if set, is called after each step of a create or remove
	// with its duration, for metrics and benchmarks. Steps of a create:
	// "worktree", "broker", "container_create", "container_start",
	// "container_ready", "forward", "create_total"; of a remove:
	// "save_view" (a running conversation's work, saved through its
	// container), "remove_container", "remove_broker", "remove_worktree",
	// "remove_total". It must not block.
	OnStep func(id, step string, d time.Duration)
	// Metrics receives create results, container starts and deaths; nil
	// reports nothing.
	Metrics *metrics.Metrics
	// Protected are host paths no workspace may overlap (be, contain, or
	// lie inside): ohd's state, runtime and worktree directories, the
	// engine's socket, the credentials directory. A workspace is mounted
	// into a container read-write: one holding the master key or a socket
	// that grants root would hand the agent the host.
	Protected []string
	// RuntimeDir is ohd's runtime directory (required): broker sockets
	// live in <RuntimeDir>/conversations/<id>/.
	RuntimeDir string
	// InnerRoot holds the inner servers' state on the host, one
	// <InnerRoot>/<id>/ per conversation (openhands.DirsOf); required for
	// the docker runtime (the daemon uses <state-dir>/inner).
	InnerRoot string
	// InnerEnv are the operator's extra NAME=VALUE variables for inner
	// servers, checked by openhands.CheckExtraEnv.
	InnerEnv []string
	// Logger receives lifecycle logs; nil discards them.
	Logger *slog.Logger
}

// Manager runs the lifecycle of conversations. It is safe for concurrent
// use.
type Manager struct {
	cfg Config
	st  *store.Store
	wt  *worktree.Manager
	br  *broker.Broker
	rt  runtime.Runtime
	log *slog.Logger

	// locks serializes operations on one conversation (create, remove,
	// restart, stop); starts shares one restart attempt among callers.
	mu        sync.Mutex
	locks     map[string]*sync.Mutex
	starts    map[string]*startCall
	protected []string // canonical Config.Protected
	images    sync.Map // image ID -> runtime.Image
	helpers   *helperCopies

	// retired marks containers ohd itself stopped or removed, so the
	// engine's late events about them are not taken for a crash.
	retired map[string]time.Time

	// netns reaches running inner servers through their own network
	// namespaces.
	netns netnsCache

	// pub is RunPublisher's state; pubLocks serializes publishing per
	// conversation.
	pub      publisher
	pubLocks map[string]*sync.Mutex
}

type startCall struct {
	done chan struct{}
	conv store.Conversation
	err  error
}

// New returns a Manager.
func New(cfg Config) (*Manager, error) {
	if cfg.Store == nil || cfg.Worktrees == nil || cfg.Broker == nil || cfg.Runtime == nil || cfg.RuntimeDir == "" {
		return nil, errors.New("conversation manager: store, worktrees, broker, runtime and runtime dir are required")
	}
	if cfg.Runtime.Kind() == "docker" && cfg.Helper == "" {
		return nil, errors.New("conversation manager: the docker runtime needs a static ohctl to mount into containers (Helper)")
	}
	if cfg.Runtime.Kind() != "local" && cfg.InnerRoot == "" {
		return nil, errors.New("conversation manager: a container runtime needs a directory for the inner servers' state (InnerRoot)")
	}
	for _, kv := range cfg.InnerEnv {
		if err := openhands.CheckExtraEnv(kv); err != nil {
			return nil, fmt.Errorf("conversation manager: %w", err)
		}
	}
	if cfg.Getenv == nil {
		cfg.Getenv = os.Getenv
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.OnStep == nil {
		cfg.OnStep = func(string, string, time.Duration) {}
	}
	var helpers *helperCopies
	if cfg.HelperDir != "" && cfg.Helper != "" {
		helpers = &helperCopies{src: cfg.Helper, dir: cfg.HelperDir}
	}
	return &Manager{
		cfg: cfg, st: cfg.Store, wt: cfg.Worktrees, br: cfg.Broker, rt: cfg.Runtime, log: cfg.Logger, helpers: helpers,
		locks: map[string]*sync.Mutex{}, starts: map[string]*startCall{}, retired: map[string]time.Time{},
		pub: publisher{inflight: map[string]bool{}, failed: map[string]failedPublish{}, live: map[string]map[string]string{}}, pubLocks: map[string]*sync.Mutex{},
		protected: canonicalPaths(append([]string{cfg.RuntimeDir}, cfg.Protected...)),
	}, nil
}

// Runtime returns the runtime conversations run in.
func (m *Manager) Runtime() runtime.Runtime { return m.rt }

// Store returns the store.
func (m *Manager) Store() *store.Store { return m.st }

func (m *Manager) lock(id string) func() { return m.lockIn(m.locks, id) }

// lockIn takes the mutex of id in locks (made on first use, under m.mu).
func (m *Manager) lockIn(locks map[string]*sync.Mutex, id string) func() {
	m.mu.Lock()
	l, ok := locks[id]
	if !ok {
		l = &sync.Mutex{}
		locks[id] = l
	}
	m.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// tryLock takes the mutex of id if no one holds it.
func (m *Manager) tryLock(id string) (func(), bool) {
	m.mu.Lock()
	l, ok := m.locks[id]
	if !ok {
		l = &sync.Mutex{}
		m.locks[id] = l
	}
	m.mu.Unlock()
	if !l.TryLock() {
		return nil, false
	}
	return l.Unlock, true
}

// every calls fn every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn()
	}
}

// CreateRequest asks for a new conversation.
type CreateRequest struct {
	// ID is the conversation's UUID; "" generates one.
	ID string
	// Workspace is the absolute host path of the workspace (required).
	Workspace string
	// Worktree asks for a git worktree of the workspace's repository. A
	// workspace that is not a git repository starts without one, and the
	// record's notes say so.
	Worktree bool
	// StartPoint is an explicit start point for the worktree's branch.
	StartPoint string
	// Grants are the conversation's initial grants.
	Grants store.Grants
	// Request is a secret-free copy of the API's create body, kept in the
	// record.
	Request json.RawMessage
	// Prepare, if set, runs under the conversation's lock once the
	// create's record exists and before anything else is made: it keeps
	// the create's own credentials (named "<id>.<name>", which every undo
	// and removal of the conversation deletes) and returns their grants,
	// added to Grants. A create of an existing conversation never runs it.
	Prepare func(ctx context.Context, id string) (store.Grants, error)
	// Forward, if set, runs after the container is ready and before the
	// conversation is marked running (the conversation API forwards its
	// create to the inner server here). Its error undoes everything.
	Forward func(ctx context.Context, c store.Conversation, t Target) error
}

// Validate checks a request without side effects.
func (r *CreateRequest) Validate() error {
	if r.ID != "" && !store.ValidID(r.ID) {
		return fmt.Errorf("%w: conversation id %q is not a UUID (8-4-4-4-12 lower-case hex digits)", ErrInvalid, r.ID)
	}
	if r.Workspace == "" {
		return fmt.Errorf("%w: no workspace: pass the absolute path of a directory", ErrInvalid)
	}
	if len(r.Workspace) > maxPath {
		return fmt.Errorf("%w: the workspace path is %d bytes long, the limit is %d", ErrInvalid, len(r.Workspace), maxPath)
	}
	if r.StartPoint != "" && !r.Worktree {
		return fmt.Errorf("%w: a start point was given without a worktree: add --worktree (worktree: true) or drop the start point", ErrInvalid)
	}
	return ValidateGrants(r.Grants)
}

// maxPath is the longest workspace path accepted (Linux's PATH_MAX).
const maxPath = 4096

// checkProtected refuses a workspace (or repository git dir) that is,
// contains, or lies inside one of the protected paths.
func (m *Manager) checkProtected(repo worktree.Repo) error {
	for _, p := range m.protected {
		for _, path := range []string{repo.Workspace, repo.CommonDir} {
			if path == "" {
				continue
			}
			if overlaps(path, p) {
				return fmt.Errorf("%w: the workspace %s overlaps %s, which ohd keeps from containers (its state, sockets, worktrees, or the engine's socket): choose a project directory", ErrInvalid, path, p)
			}
		}
	}
	return nil
}

// overlaps reports whether a and b are the same path or one contains the
// other.
func overlaps(a, b string) bool {
	return a == b || strings.HasPrefix(a, strings.TrimSuffix(b, "/")+"/") || strings.HasPrefix(b, strings.TrimSuffix(a, "/")+"/")
}

// canonicalPaths resolves symlinks of each path that exists (its parent
// for one that does not), so overlap checks compare what the kernel sees.
func canonicalPaths(paths []string) []string {
	var out []string
	for _, p := range paths {
		if p == "" || !filepath.IsAbs(p) {
			continue
		}
		p = filepath.Clean(p)
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		} else if r, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
			p = filepath.Join(r, filepath.Base(p))
		}
		out = append(out, p)
	}
	return out
}

// ValidateGrants checks every granted name.
func ValidateGrants(g store.Grants) error {
	for _, kind := range store.Kinds {
		for _, name := range *g.List(kind) {
			if err := ValidateGrant(kind, name); err != nil {
				return err
			}
		}
	}
	return nil
}

// ValidateGrant checks one grant: kind is secret, git, llm, oauth or mcp;
// a git name is "host[:port][/path/prefix]", the others are store names.
func ValidateGrant(kind, name string) error {
	switch kind {
	case store.KindSecret, store.KindLLM, store.KindOAuth, store.KindMCP:
		if !store.ValidName(name) {
			return fmt.Errorf("%w: %s name %q: use 1-128 characters of A-Z a-z 0-9 . _ - (not starting with . or -)", ErrInvalid, kind, name)
		}
	case store.KindGit:
		if !validGitGrant(name) {
			return fmt.Errorf("%w: git grant %q: use host[:port][/path/prefix], e.g. github.com/my-org", ErrInvalid, name)
		}
	default:
		return fmt.Errorf("%w: grant kind %q: use one of %s", ErrInvalid, kind, strings.Join(store.Kinds, ", "))
	}
	return nil
}

func validGitGrant(s string) bool {
	if s == "" || len(s) > 512 || strings.Contains(s, "//") || strings.HasSuffix(s, "/") {
		return false
	}
	host, path, _ := strings.Cut(s, "/")
	if host == "" || strings.HasPrefix(host, ".") || strings.HasPrefix(host, "-") {
		return false
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == ':' || c == '[' || c == ']') {
			return false
		}
	}
	for _, seg := range strings.Split(path, "/") {
		if path != "" && (seg == "" || seg == "." || seg == "..") {
			return false
		}
	}
	for i := 0; i < len(path); i++ {
		if c := path[i]; c < 0x21 || c == 0x7f || c == '?' || c == '#' || c == '%' || c == '\\' {
			return false
		}
	}
	return true
}

// Target is where a running conversation's inner server answers.
type Target struct {
	// Addr is "127.0.0.1:<port>"; "" for the local runtime.
	Addr string
	// InnerKey is the inner session key the proxy sends.
	InnerKey []byte
	// Dial, when not nil, connects to the inner server from inside its
	// container's network namespace; the proxy uses it instead of dialing
	// Addr (which stays the name of this target: connections are pooled
	// by it, and error bodies are scrubbed of it).
	Dial func(ctx context.Context) (net.Conn, error)
	// DialAddr is the inner server's address as Dial reaches it (inside
	// the container); it is scrubbed from answers too.
	DialAddr string
}

// Create provisions a conversation; see the package comment.
func (m *Manager) Create(ctx context.Context, req CreateRequest) (store.Conversation, error) {
	if err := req.Validate(); err != nil {
		return store.Conversation{}, err
	}
	repo, err := m.wt.Inspect(ctx, req.Workspace)
	if err != nil {
		return store.Conversation{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := m.checkProtected(repo); err != nil {
		return store.Conversation{}, err
	}
	id := req.ID
	replaceFailed := false
	if id == "" {
		id = store.NewID()
	} else if old, err := m.st.Conversation(id); err == nil {
		// A client retrying a failed create with the same id gets a new
		// attempt once the failed record owns nothing any more.
		if old.State != store.StateFailed {
			return store.Conversation{}, fmt.Errorf("%w: conversation %s already exists (%s)", ErrConflict, id, old.State)
		}
		if old.UndoPending {
			if err := m.retryUndo(ctx, old); err != nil {
				return store.Conversation{}, fmt.Errorf("%w: conversation %s failed and undoing it is not finished (%v): retry later", ErrConflict, id, err)
			}
		}
		replaceFailed = true
	}
	var plan worktree.Worktree
	if repo.IsGit && req.Worktree {
		if plan, err = m.wt.Plan(ctx, worktree.AddOptions{Repo: repo, Inspected: true, ConversationID: id, StartPoint: req.StartPoint, View: m.views()}); err != nil {
			if errors.Is(err, worktree.ErrGit) {
				return store.Conversation{}, &StepError{ID: id, Step: "worktree", Err: err}
			}
			return store.Conversation{}, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	var img runtime.Image
	if m.rt.Kind() != "local" {
		if img, err = m.rt.ResolveImage(ctx, m.cfg.Image); err != nil {
			return store.Conversation{}, &StepError{ID: id, Step: "image", Err: err}
		}
		m.images.Store(img.ID, img)
	}
	uid, gid := repo.UID, repo.GID
	if !repo.IsGit {
		if uid, gid, err = ownerOf(repo.Workspace); err != nil {
			return store.Conversation{}, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	conv := store.Conversation{
		ID: id, State: store.StateProvisioning, Runtime: m.rt.Kind(),
		Workspace: repo.Workspace, WorkingDir: repo.Workspace,
		UID: uid, GID: gid, Grants: req.Grants, BrokerEpoch: 1,
		Image: img.Ref, ImageID: img.ID, Request: req.Request,
	}
	if req.Worktree && !repo.IsGit {
		conv.Notes = append(conv.Notes, "the workspace is not a git repository: started without a worktree, the workspace is mounted at its own path")
	}
	if plan.Path != "" {
		// Recorded before the worktree exists: a crash right after git
		// worktree add still leaves reconcile enough to remove it.
		conv.Repo, conv.CommonDir, conv.Worktree, conv.Branch = plan.Repo, plan.CommonDir, plan.Path, plan.Branch
		conv.StartPoint, conv.StartCommit = plan.StartPoint, plan.StartCommit
		conv.WorkingDir = filepath.Join(plan.Path, repo.Prefix)
		conv.GitLayout, conv.GitView, conv.Published = store.GitLayoutShared, plan.View, plan.StartCommit
		if plan.View != "" {
			conv.GitLayout = store.GitLayoutView
		}
	}
	if img.Floating {
		conv.Notes = append(conv.Notes, fmt.Sprintf("image %s is a floating reference; it was pinned to %s for this conversation", img.Ref, img.ID))
		m.log.Warn("floating image reference: pin a version tag or digest", "image", img.Ref, "id", img.ID)
	}
	unlock := m.lock(id)
	defer unlock()
	if replaceFailed {
		if err := m.st.DeleteConversation(id); err != nil {
			return store.Conversation{}, fmt.Errorf("create conversation %s: replace the failed record: %w", id, err)
		}
	}
	if err := m.st.CreateConversationWithKey(conv, newInnerKey()); err != nil {
		if errors.Is(err, store.ErrExists) {
			return store.Conversation{}, fmt.Errorf("%w: conversation %s already exists", ErrConflict, id)
		}
		return store.Conversation{}, fmt.Errorf("create conversation %s: %w", id, err)
	}
	failpoint.Hit("create/after-record")
	// A step that panics (a bug) still has its create undone and its
	// record finished, before the panic goes on to the caller.
	defer func() {
		if r := recover(); r != nil {
			m.log.Error("conversation create panicked; undoing", "id", id, "panic", r)
			m.cfg.Metrics.CreateResult(false, "internal")
			_, _ = m.fail(conv, &StepError{ID: id, Step: "internal", Err: fmt.Errorf("ohd failed internally: %v", r)})
			panic(r)
		}
	}()
	if req.Prepare != nil {
		g, err := req.Prepare(ctx, id)
		if err != nil {
			m.cfg.Metrics.CreateResult(false, "mediate")
			return m.fail(conv, &StepError{ID: id, Step: "mediate", Err: err})
		}
		conv.Grants = conv.Grants.Merge(g)
	}
	conv, err = m.provision(ctx, conv, repo, req)
	if err != nil {
		m.cfg.Metrics.CreateResult(false, failedStep(err))
		return m.fail(conv, err)
	}
	m.cfg.Metrics.CreateResult(true, "")
	return conv, nil
}

// failedStep names the step of a failed create for metrics: the
// container's own step (create, start, ready) when the runtime says.
func failedStep(err error) string {
	var se *StepError
	if !errors.As(err, &se) {
		return ""
	}
	var start *runtime.StartError
	if se.Step == "container" && errors.As(se.Err, &start) {
		return "container_" + start.Step
	}
	return se.Step
}

// startFailedStep is the runtime's failed step of a container start.
func startFailedStep(err error) string {
	var start *runtime.StartError
	if errors.As(err, &start) {
		return start.Step
	}
	return ""
}

func (m *Manager) provision(ctx context.Context, conv store.Conversation, repo worktree.Repo, req CreateRequest) (store.Conversation, error) {
	id := conv.ID
	var err error
	t0 := time.Now()
	step := time.Now()
	done := func(name string) {
		m.cfg.OnStep(id, name, time.Since(step))
		step = time.Now()
	}
	if repo.IsGit && req.Worktree {
		planned := worktreeOf(conv)
		wt, werr := m.wt.Add(ctx, worktree.AddOptions{Repo: repo, ConversationID: id, StartPoint: req.StartPoint, Planned: &planned, View: m.views()})
		if werr != nil {
			return conv, &StepError{ID: id, Step: "worktree", Err: werr}
		}
		// The steps' results are kept in memory and written once, with the
		// state running: a crash before that leaves a provisioning record,
		// and reconcile finds what was made by the record's planned
		// worktree path (worktree.Find), the socket directory's name and
		// the containers' labels.
		conv.Repo, conv.CommonDir, conv.Worktree, conv.AdminID = wt.Repo, wt.CommonDir, wt.Path, wt.AdminID
		conv.Branch, conv.StartPoint, conv.StartCommit = wt.Branch, wt.StartPoint, wt.StartCommit
		conv.WorkingDir = filepath.Join(wt.Path, repo.Prefix)
		conv.GitView, conv.Published = wt.View, wt.StartCommit
		done("worktree")
		failpoint.Hit("create/after-worktree")
	}
	innerKey, err := m.openBroker(ctx, conv)
	if err != nil {
		return conv, &StepError{ID: id, Step: "broker", Err: err}
	}
	conv.BrokerDir = m.brokerDir(id)
	done("broker")
	failpoint.Hit("create/after-broker")
	var target Target
	if m.rt.Kind() != "local" {
		spec, err := m.spec(ctx, conv)
		if err != nil {
			return conv, &StepError{ID: id, Step: "container", Err: err}
		}
		inst, err := m.rt.Start(ctx, spec)
		if err != nil {
			m.cfg.Metrics.ContainerStart(false, startFailedStep(err))
			return conv, &StepError{ID: id, Step: "container", Err: err}
		}
		m.cfg.Metrics.ContainerStart(true, "")
		m.cfg.OnStep(id, "container_create", inst.Timings.Create)
		m.cfg.OnStep(id, "container_start", inst.Timings.Start)
		m.cfg.OnStep(id, "container_ready", inst.Timings.Ready)
		step = time.Now()
		failpoint.Hit("create/after-start")
		conv.ContainerID, conv.ContainerName, conv.HostPort = inst.ContainerID, inst.Name, inst.HostPort
		target = Target{Addr: inst.Addr, InnerKey: innerKey}
	}
	if req.Forward != nil {
		if err := req.Forward(ctx, conv, target); err != nil {
			return conv, &StepError{ID: id, Step: "forward", Err: err}
		}
		done("forward")
		failpoint.Hit("create/after-forward")
	}
	made := conv
	conv, err = m.st.UpdateConversation(id, func(c *store.Conversation) error {
		created := c.CreatedAt
		*c = made
		c.CreatedAt, c.State, c.LastActiveAt = created, store.StateRunning, time.Now().UTC()
		return nil
	})
	if err != nil {
		return made, &StepError{ID: id, Step: "record", Err: err}
	}
	m.cfg.OnStep(id, "create_total", time.Since(t0))
	m.log.Info("conversation created", "id", id, "runtime", conv.Runtime, "worktree", conv.Worktree, "container", shortID(conv.ContainerID))
	return conv, nil
}

// fail undoes whatever a failed create provisioned and records the failure.
func (m *Manager) fail(conv store.Conversation, cause error) (store.Conversation, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	step := "record"
	var se *StepError
	if errors.As(cause, &se) {
		step = se.Step
	}
	m.log.Warn("conversation create failed; undoing", "id", conv.ID, "step", step, "err", cause)
	// conv is the in-memory record of the create (what each completed step
	// made), or the stored one when reconcile undoes a crashed create.
	_, uerr := m.teardown(ctx, conv, undoCreate)
	if uerr != nil {
		m.log.Error("undo of a failed create incomplete; ohd retries it", "id", conv.ID, "err", uerr)
		cause = fmt.Errorf("%w; undo incomplete, ohd retries it: %v", cause, uerr)
	}
	if _, err := m.st.UpdateConversation(conv.ID, func(c *store.Conversation) error {
		c.State = store.StateFailed
		c.Error = cause.Error()
		c.FailedStep = step
		c.UndoPending = uerr != nil
		if uerr == nil {
			c.ContainerID, c.HostPort = "", 0
		}
		return nil
	}); err != nil {
		// The record stays provisioning; RunUndoRetries finishes it once
		// the store takes writes again, without a restart.
		m.log.Error("recording a failed create failed; ohd retries it", "id", conv.ID, "err", err)
	}
	return store.Conversation{}, cause
}

// openBroker makes sure the inner key exists, opens the broker socket and
// writes the key file into the broker directory. It returns the key.
func (m *Manager) openBroker(ctx context.Context, conv store.Conversation) ([]byte, error) {
	key, err := m.st.InnerKey(conv.ID)
	if errors.Is(err, store.ErrNotFound) {
		key = newInnerKey()
		err = m.st.SetInnerKey(conv.ID, key)
	}
	if err != nil {
		return nil, err
	}
	ep, err := m.br.Open(ctx, brokerConversation(conv))
	if err != nil {
		return nil, err
	}
	if m.rt.Kind() != "local" {
		if err := writeOwnedFile(filepath.Join(ep.Dir, InnerKeyFile), key, 0o400, conv.UID, conv.GID); err != nil {
			return nil, err
		}
		if err := m.writeInnerState(conv, ep.Dir); err != nil {
			return nil, err
		}
		if err := ensureMountpoint(filepath.Join(ep.Dir, "bin", "ohctl"), conv.UID, conv.GID); err != nil {
			return nil, err
		}
	}
	return key, nil
}

func (m *Manager) brokerDir(id string) string {
	return filepath.Join(m.cfg.RuntimeDir, "conversations", id)
}

func newInnerKey() []byte {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("conversation: crypto/rand failed: " + err.Error())
	}
	return []byte(base64.RawURLEncoding.EncodeToString(b))
}

// writeOwnedFile writes data atomically to path with mode, owned by uid:gid.
func writeOwnedFile(path string, data []byte, mode os.FileMode, uid, gid int) error {
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Chmod(mode)
	}
	if werr == nil && os.Geteuid() == 0 {
		werr = f.Chown(uid, gid)
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, werr)
	}
	return nil
}

// ensureMountpoint creates an empty file at path (and its directory) for a
// bind mount of a file onto a read-only mounted directory.
func ensureMountpoint(path string, uid, gid int) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o555)
	if err != nil {
		return err
	}
	f.Close()
	if os.Geteuid() == 0 {
		_ = os.Lchown(filepath.Dir(path), uid, gid)
		_ = os.Lchown(path, uid, gid)
	}
	return nil
}

func ownerOf(path string) (int, int, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, 0, err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, fmt.Errorf("stat %s: no owner information", path)
	}
	return int(sys.Uid), int(sys.Gid), nil
}

func brokerConversation(c store.Conversation) broker.Conversation {
	return broker.Conversation{
		ID: c.ID, UID: c.UID, GID: c.GID, Epoch: c.BrokerEpoch,
		Grants: broker.Grants{Secrets: c.Grants.Secrets, Git: c.Grants.Git, LLM: c.Grants.LLM, OAuth: c.Grants.OAuth, MCP: c.Grants.MCP},
	}
}

func worktreeOf(c store.Conversation) worktree.Worktree {
	return worktree.Worktree{
		ConversationID: c.ID, Repo: c.Repo, CommonDir: c.CommonDir, Path: c.Worktree,
		AdminID: c.AdminID, AdminDir: filepath.Join(c.CommonDir, "worktrees", c.AdminID),
		Branch: c.Branch, StartPoint: c.StartPoint, StartCommit: c.StartCommit, UID: c.UID, GID: c.GID,
		View: c.GitView,
	}
}

// views says whether new worktrees get their own git view: yes wherever the
// agent runs in a container (the local runtime's agent runs on the host,
// as the user, and uses the repository itself).
func (m *Manager) views() bool {
	return m.rt.Kind() != "local" && !failpoint.On("legacy/shared-git-layout")
}

// spec builds the container spec of conv.
func (m *Manager) spec(ctx context.Context, conv store.Conversation) (runtime.Spec, error) {
	var mounts []runtime.Mount
	if conv.Worktree != "" {
		plan, err := m.wt.MountPlan(worktreeOf(conv))
		if err != nil {
			return runtime.Spec{}, err
		}
		for _, p := range plan {
			mounts = append(mounts, runtime.Mount{Source: p.Source, Target: p.Target, ReadOnly: p.ReadOnly})
		}
	} else {
		mounts = append(mounts, runtime.Mount{Source: conv.Workspace, Target: conv.Workspace})
	}
	helper := m.cfg.Helper
	if m.helpers != nil {
		p, warn, err := m.helpers.current()
		if err != nil {
			return runtime.Spec{}, err
		}
		if warn != "" {
			m.log.Warn(warn, "id", conv.ID)
		}
		helper = p
	}
	inner := openhands.DirsOf(m.cfg.InnerRoot, conv.ID)
	mounts = append(mounts,
		runtime.Mount{Source: m.brokerDir(conv.ID), Target: ContainerBrokerDir, ReadOnly: true},
		runtime.Mount{Source: helper, Target: ContainerHelper, ReadOnly: true},
		runtime.Mount{Source: inner.Persistence, Target: inner.Persistence},
		runtime.Mount{Source: inner.Conversations, Target: inner.Conversations},
	)
	img, err := m.image(ctx, conv.ImageID)
	if err != nil {
		return runtime.Spec{}, err
	}
	// The agent server's arguments follow the image's entrypoint (ref §5);
	// an image with only a command (no entrypoint) gets them after it.
	cmd := append([]string{}, img.Entrypoint...)
	if len(cmd) == 0 {
		cmd = append(cmd, img.Cmd...)
	}
	if len(cmd) == 0 {
		return runtime.Spec{}, fmt.Errorf("image %s has neither entrypoint nor command: nothing to run", conv.Image)
	}
	port := m.cfg.InnerPort
	if port == 0 {
		port = 8000
	}
	cmd = append(cmd, openhands.Args(port)...)
	return runtime.Spec{
		ConversationID: conv.ID,
		ServerID:       m.st.ServerID(),
		Image:          conv.ImageID,
		UID:            conv.UID,
		GID:            conv.GID,
		Mounts:         mounts,
		Env:            m.env(conv),
		Entrypoint: []string{ContainerHelper, "inner-exec",
			"--env-file", openhands.SessionKeyEnv + "=" + ContainerBrokerDir + "/" + InnerKeyFile,
			"--env-file", openhands.SecretKeyEnv + "=" + ContainerBrokerDir + "/" + InnerSecretKeyFile, "--"},
		Cmd:            cmd,
		InnerPort:      m.cfg.InnerPort,
		Resources:      m.cfg.Resources,
		ReadOnlyRootfs: m.cfg.ReadOnlyRootfs,
		HealthPath:     m.cfg.HealthPath,
		ReadyTimeout:   m.cfg.ReadyTimeout,
	}, nil
}

// env is the container's environment: names and paths only, never a
// secret value. The inner session key reaches the inner server through
// the key file and the entrypoint wrapper, not through docker inspect.
func (m *Manager) env(conv store.Conversation) []string {
	env := append(openhands.Env(openhands.DirsOf(m.cfg.InnerRoot, conv.ID)),
		"OHD_CONVERSATION_ID="+conv.ID,
		"OHD_BROKER_SOCKET="+ContainerBrokerDir+"/broker.sock",
		"OHD_BROKER_TOKEN_FILE="+ContainerBrokerDir+"/token",
	)
	// The helper is an absolute path: git runs it with get/store/erase
	// appended. The empty credential.helper first resets the list, so a
	// helper the image or the agent configured (store, cache) never sees
	// the broker's answer, cannot keep it at rest in the container, and
	// cannot answer after a revoke
	// (TestGitCredentialsNeverRestInTheContainer). useHttpPath lets
	// path-prefix grants match. (GIT_TERMINAL_PROMPT=0, so a refused
	// credential fails at once, comes with openhands.Env.)
	git := append(worktree.ContainerGitConfig(),
		[2]string{"credential.helper", ""},
		[2]string{"credential.helper", ContainerHelper + " git-credential"},
		[2]string{"credential.useHttpPath", "true"})
	env = append(env, "GIT_CONFIG_COUNT="+strconv.Itoa(len(git)))
	for i, kv := range git {
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, kv[0]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, kv[1]))
	}
	for _, name := range m.cfg.ForwardEnv {
		if v, ok := lookupEnv(m.cfg.Getenv, name); ok {
			env = append(env, name+"="+v)
		}
	}
	return append(env, m.cfg.InnerEnv...)
}

func lookupEnv(getenv func(string) string, name string) (string, bool) {
	v := getenv(name)
	return v, v != ""
}

// image returns the configuration of an image by its ID: resolved once,
// kept (an image ID names immutable content).
func (m *Manager) image(ctx context.Context, id string) (runtime.Image, error) {
	if v, ok := m.images.Load(id); ok {
		return v.(runtime.Image), nil
	}
	img, err := m.rt.ResolveImage(ctx, id)
	if err == nil {
		m.images.Store(id, img)
	}
	return img, err
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// writeInnerState makes the conversation's inner state directories on the
// host (openhands.DirsOf: persistence and conversations, owned by the
// conversation's uid, 0700, kept across containers) and writes the inner
// server's stable cipher key into the broker directory (0400).
func (m *Manager) writeInnerState(conv store.Conversation, brokerDir string) error {
	key, err := m.st.InnerSecretKey(conv.ID, newInnerKey)
	if err != nil {
		return err
	}
	if err := writeOwnedFile(filepath.Join(brokerDir, InnerSecretKeyFile), key, 0o400, conv.UID, conv.GID); err != nil {
		return err
	}
	d := openhands.DirsOf(m.cfg.InnerRoot, conv.ID)
	if err := os.MkdirAll(m.cfg.InnerRoot, 0o711); err != nil {
		return fmt.Errorf("inner state: %w", err)
	}
	for _, dir := range []string{d.Root, d.Persistence, d.Conversations} {
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("inner state: %w", err)
		}
		if os.Geteuid() == 0 {
			if err := os.Lchown(dir, conv.UID, conv.GID); err != nil {
				return fmt.Errorf("inner state: %w", err)
			}
		}
	}
	return nil
}

// InnerInfo is the ConversationInfo the conversation's inner server
// persisted on the host (openhands.ReadInfo), for answers while no
// container runs. It returns openhands.ErrNoState when there is none.
func (m *Manager) InnerInfo(id string) (json.RawMessage, error) {
	if m.cfg.InnerRoot == "" || !store.ValidID(id) {
		return nil, openhands.ErrNoState
	}
	d := openhands.DirsOf(m.cfg.InnerRoot, id)
	return openhands.ReadInfo(m.cfg.InnerRoot, id, filepath.Base(d.Conversations), filepath.Base(d.StateDir(id)))
}

// isInnerMount reports whether a container path is one of the inner
// server's state directories.
func (m *Manager) isInnerMount(target string) bool {
	return m.cfg.InnerRoot != "" && strings.HasPrefix(target, m.cfg.InnerRoot+"/")
}
