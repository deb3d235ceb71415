package conversation

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/egress"
	"github.com/ohd-dev/ohd/pkg/failpoint"
	"github.com/ohd-dev/ohd/pkg/gitboundary"
	"github.com/ohd-dev/ohd/pkg/metrics"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/store"
	"github.com/ohd-dev/ohd/pkg/worktree"
	"github.com/ohd-dev/ohd/pkg/worktree/mountplan"
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
	// Egress is the egress mode of new containers: store.EgressBroker
	// (network mode none, HTTP(S)_PROXY set to the relay's forward proxy;
	// the runtime must implement runtime.NetnsOpener) or store.EgressOpen
	// ("" means open: the engine's network).
	Egress string
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
	// "worktree", "share" (the agent's own uid given the trees it writes),
	// "broker", "container_create", "container_start",
	// "container_ready", "forward", "create_total"; of a remove:
	// "save_view" (a running conversation's work, saved through its
	// container), "remove_container", "remove_broker", "remove_worktree",
	// "release" (in place or a plain folder: the tree given back to its
	// owner), "remove_total". It must not block.
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
	// AgentUID and AgentGID are the user a container runs as: a uid of
	// its own, neither root nor a repository's owner, so that the user's
	// git refuses every git directory the agent makes (package
	// gitboundary); required for a container runtime (ohd serve
	// --agent-uid: the system user ohd-agent, else 10001).
	AgentUID, AgentGID int
	// KeptRoot holds what a removal moves out of the user's tree, one
	// <KeptRoot>/<id>/git-dirs per conversation (the daemon uses
	// <state-dir>/kept); "" moves nothing out.
	KeptRoot string
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
	// tw are the running conversations' tree watchers (watchtree.go).
	tw treeWatchers

	// inPlaceLocks serialize, per work tree, the check that it has no
	// in-place conversation with the writing of a new one's record.
	inPlaceLocks map[string]*sync.Mutex

	// git is the host git's ownership check, run once (checkBoundary).
	git hostGit

	// retrying are the conversations whose interrupted removal a
	// background retry is finishing (under mu); retries is their owner's
	// wait group (RunUndoRetries waits for them).
	retrying map[string]bool
	retries  sync.WaitGroup

	// execs are the execs still starting and the conversations whose
	// removal holds them off (BeginExec, holdExecs).
	execs execGate
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
	if cfg.Runtime.Kind() != "local" && cfg.Helper == "" {
		return nil, errors.New("conversation manager: a container runtime needs a static ohctl to mount into containers (Helper)")
	}
	if cfg.Runtime.Kind() != "local" && cfg.AgentUID == 0 {
		return nil, errors.New("conversation manager: a container runtime needs the agent's own uid (AgentUID; ohd serve --agent-uid)")
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
		retrying: map[string]bool{}, inPlaceLocks: map[string]*sync.Mutex{},
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
		uid, gid := agentOf(conv)
		if err := writeOwnedFile(filepath.Join(ep.Dir, InnerKeyFile), key, 0o400, uid, gid); err != nil {
			return nil, err
		}
		if err := m.writeInnerState(conv, ep.Dir); err != nil {
			return nil, err
		}
		if err := m.writeGitRelayConfig(conv); err != nil {
			return nil, err
		}
		if err := writeSystemGitConfig(conv, ep.Dir); err != nil {
			return nil, err
		}
		if err := ensureMountpoint(filepath.Join(ep.Dir, "bin", "ohctl"), uid, gid); err != nil {
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

// ownerOf returns the owner of path: for a directory a live
// conversation's agent has borrowed (gitboundary.Borrow, e.g. a plain
// folder a second conversation is made on), the user's it was.
func ownerOf(path string) (int, int, error) {
	return gitboundary.OwnerOf(path)
}

// brokerConversation is c as the broker serves it: its socket, token and
// key files belong to the user its container runs as (agentOf).
func brokerConversation(c store.Conversation) broker.Conversation {
	uid, gid := agentOf(c)
	return broker.Conversation{
		ID: c.ID, UID: uid, GID: gid, Epoch: c.BrokerEpoch,
		Grants: broker.Grants{Secrets: c.Grants.Secrets, Git: c.Grants.Git, LLM: c.Grants.LLM, OAuth: c.Grants.OAuth, MCP: c.Grants.MCP, Net: c.Grants.Net,
			GitOptions: brokerGitOptions(c.Grants.GitOptions)},
	}
}

func worktreeOf(c store.Conversation) worktree.Worktree {
	if c.InPlace {
		return inPlaceOf(c)
	}
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

// workspaceMounts is the part of conv's container spec that mounts its
// workspace: the worktree's or in place's plan (worktree.MountPlan), or a
// plain folder's (worktree.PlainFolderMounts), the pointers the user's git
// follows fixed in each.
func (m *Manager) workspaceMounts(conv store.Conversation) ([]runtime.Mount, error) {
	var plan []mountplan.Mount
	var err error
	if conv.Worktree != "" || conv.InPlace {
		plan, err = m.wt.MountPlan(worktreeOf(conv))
	} else {
		// A plain folder: the repositories in it are the user's.
		plan, err = m.wt.PlainFolderMounts(conv.Workspace, conv.UID, conv.GID)
	}
	if err != nil {
		return nil, err
	}
	mounts := make([]runtime.Mount, 0, len(plan))
	for _, p := range plan {
		mounts = append(mounts, runtime.Mount{Source: p.Source, Target: p.Target, ReadOnly: p.ReadOnly})
	}
	return mounts, nil
}

// spec builds the container spec of conv.
func (m *Manager) spec(ctx context.Context, conv store.Conversation) (runtime.Spec, error) {
	mounts, err := m.workspaceMounts(conv)
	if err != nil {
		return runtime.Spec{}, err
	}
	return m.specWith(ctx, conv, mounts)
}

// specWith is spec with conv's workspace mounts (workspaceMounts) made
// already.
func (m *Manager) specWith(ctx context.Context, conv store.Conversation, mounts []runtime.Mount) (runtime.Spec, error) {
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
	)
	for _, dir := range inner.Mounted() {
		mounts = append(mounts, runtime.Mount{Source: dir, Target: dir})
	}
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
	uid, gid := agentOf(conv)
	return runtime.Spec{
		ConversationID: conv.ID,
		ServerID:       m.st.ServerID(),
		Image:          conv.ImageID,
		UID:            uid,
		GID:            gid,
		Mounts:         mounts,
		Env:            m.env(conv),
		Entrypoint: []string{ContainerHelper, "inner-exec",
			"--env-file", openhands.SessionKeyEnv + "=" + ContainerBrokerDir + "/" + InnerKeyFile,
			"--env-file", openhands.SecretKeyEnv + "=" + ContainerBrokerDir + "/" + InnerSecretKeyFile, "--"},
		Cmd:            cmd,
		InnerPort:      m.cfg.InnerPort,
		NoNetwork:      conv.Egress == store.EgressBroker,
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
	// Relayed git hosts go through the broker relay, which injects the
	// credential (DESIGN §5, gitrelay.go): their url rewrites are in a
	// file ohd rewrites when the grants change.
	git = append(git, [2]string{"include.path", ContainerGitRelayConfig})
	env = append(env, "GIT_CONFIG_SYSTEM="+ContainerSystemGitConfig, "GIT_CONFIG_COUNT="+strconv.Itoa(len(git)))
	for i, kv := range git {
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, kv[0]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, kv[1]))
	}
	if conv.Egress == store.EgressBroker {
		// The container's only way out: the relay's forward proxy
		// (DESIGN §5). The relay itself is on loopback, so not proxied.
		proxy := "http://" + broker.RelayAddr
		env = append(env, "HTTP_PROXY="+proxy, "HTTPS_PROXY="+proxy, "http_proxy="+proxy, "https_proxy="+proxy,
			"NO_PROXY="+egress.NoProxyHosts, "no_proxy="+egress.NoProxyHosts)
	}
	for _, name := range m.cfg.ForwardEnv {
		if v, ok := lookupEnv(m.cfg.Getenv, name); ok {
			env = append(env, name+"="+v)
		}
	}
	return append(env, m.cfg.InnerEnv...)
}

// egressMode is the egress mode of a new conversation: none for the
// local runtime.
func (m *Manager) egressMode() string {
	if m.rt.Kind() == "local" {
		return ""
	}
	if m.cfg.Egress == store.EgressBroker {
		return store.EgressBroker
	}
	return store.EgressOpen
}

// openNetns enters the network namespace of a container without network.
func (m *Manager) openNetns(ctx context.Context, containerID string) (*runtime.NetnsDialer, error) {
	opener, ok := m.rt.(runtime.NetnsOpener)
	if !ok {
		return nil, fmt.Errorf("the %s runtime cannot reach a container without network: run ohd serve --egress open", m.rt.Kind())
	}
	return opener.OpenNetns(ctx, containerID)
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
// host (openhands.DirsOf: home and its .openhands, conversations and bash events, owned by the
// conversation's uid, 0700, kept across containers) and writes the inner
// server's stable cipher key into the broker directory (0400).
func (m *Manager) writeInnerState(conv store.Conversation, brokerDir string) error {
	key, err := m.st.InnerSecretKey(conv.ID, newInnerKey)
	if err != nil {
		return err
	}
	uid, gid := agentOf(conv)
	if err := writeOwnedFile(filepath.Join(brokerDir, InnerSecretKeyFile), key, 0o400, uid, gid); err != nil {
		return err
	}
	d := openhands.DirsOf(m.cfg.InnerRoot, conv.ID)
	if err := os.MkdirAll(m.cfg.InnerRoot, 0o711); err != nil {
		return fmt.Errorf("inner state: %w", err)
	}
	// Persistence ($HOME/.openhands) is made inside Home, a directory the
	// agent writes: Mkdir does not follow a link planted there, and Lchown
	// would change only the link.
	for _, dir := range append(append([]string{d.Root}, d.Mounted()...), d.Persistence) {
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("inner state: %w", err)
		}
		if os.Geteuid() == 0 {
			if err := os.Lchown(dir, uid, gid); err != nil {
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
