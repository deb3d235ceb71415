package daemon

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"time"

	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/control"
	"github.com/ohd-dev/ohd/pkg/egress"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/packcheck"
	"github.com/ohd-dev/ohd/pkg/proxy"
	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/runtime/kubernetes"
)

// Config is everything `ohd serve` can be told. Every field has a flag
// and an OHD_<NAME> environment variable (see cmd.go); zero values take
// the defaults documented on each field.
type Config struct {
	// StateDir holds the store (ohd.db), the master key, the generated
	// session API key, lock files and, by default, the worktrees.
	// Default: /var/lib/ohd as root, else $XDG_STATE_HOME/ohd
	// (~/.local/state/ohd).
	StateDir string
	// RuntimeDir holds the control socket and the per-conversation broker
	// directories. Default: /run/ohd as root, else $XDG_RUNTIME_DIR/ohd
	// (or <tmp>/ohd-<uid> when XDG_RUNTIME_DIR is unset).
	RuntimeDir string
	// ControlSocket is the path of ohctl's socket (0600, daemon uid and root
	// only). Default: <RuntimeDir>/ohd.sock.
	ControlSocket string
	// Listen is the conversation API's TCP address. Default
	// 127.0.0.1:8000; "" after defaults never happens; "off" disables it.
	// A non-loopback address is refused unless SessionAPIKeys are given.
	Listen string
	// Runtime is "docker", "local", "kubernetes", or "auto" (the
	// default): docker when the engine answers at start-up, else local
	// with a warning. kubernetes runs each conversation in a pod on
	// ohd's own node (package runtime/kubernetes); never chosen by auto.
	Runtime string
	// Kube configures the kubernetes runtime (--kube-*).
	Kube KubeConfig
	// Image is the conversation container image reference. Default
	// openhands.DefaultImage, the real agent server pinned to a version.
	Image string
	// WorktreeRoot is where worktrees are created:
	// <WorktreeRoot>/<conversation-id>/<repo-basename>.
	// Default: <StateDir>/worktrees.
	WorktreeRoot string
	// LogFormat is "text" (default) or "json".
	LogFormat string
	// LogLevel is "debug", "info" (default), "warn" or "error".
	LogLevel string
	// SessionAPIKeys are the conversation API's accepted keys. When none
	// are given (here, in SessionAPIKeyFile, or as the systemd credential
	// ohd-session-api-keys), one is generated at first start into
	// <StateDir>/session-api-key (0600).
	SessionAPIKeys []string
	// SessionAPIKeyFile holds accepted keys, one per line (# comments):
	// keeps them out of the command line and the environment.
	SessionAPIKeyFile string
	// Helper is a static ohctl binary mounted into containers. Default: the
	// ohctl next to the ohd executable.
	Helper string
	// IdleTimeout stops containers idle this long; 0 (default) never.
	IdleTimeout time.Duration
	// ForwardEnv names host environment variables forwarded to containers.
	// They must not hold secrets (docker inspect shows them).
	ForwardEnv []string
	// InnerEnv are extra NAME=VALUE variables for the inner servers
	// (--inner-env); names that look like secrets or that ohd sets are
	// refused (openhands.CheckExtraEnv).
	InnerEnv []string
	// ReadOnlyRootfs runs containers with a read-only root filesystem and
	// a tmpfs /tmp.
	ReadOnlyRootfs bool
	// MemoryBytes, NanoCPUs and PidsLimit are container limits; 0 takes
	// the defaults (4 GiB, 2 CPUs, 512).
	MemoryBytes, NanoCPUs, PidsLimit int64
	// ReadyTimeout bounds the wait for a container's health check; 0 =
	// 60s. HealthPath is the path polled; "" = /health.
	ReadyTimeout time.Duration
	HealthPath   string
	// EngineTimeout bounds each call ohd makes to the Docker engine (and
	// the start of each exec); 0 = 1m (runtime.DefaultEngineTimeout). A
	// call that outlives it is given up, logged, and shown by ohctl show
	// and ohctl doctor (--engine-timeout). On Kubernetes it is the exec's
	// watchdog and the kubelet's time to stop a pod past its grace period
	// (kubernetes.Options.EngineTimeout).
	EngineTimeout time.Duration
	// Network is the Docker network containers join; "" means
	// runtime.IsolatedNetwork (created if missing: containers cannot reach
	// each other). "bridge" is the engine's default network.
	Network string
	// MetricsListen, if set, serves Prometheus metrics on a separate
	// loopback address (they are also on the conversation API at /metrics,
	// behind its key).
	MetricsListen string
	// BrokerLimits are the credential broker's per-conversation budgets
	// (in flight per kind, open connections); zero fields take
	// broker.Limits' defaults.
	BrokerLimits broker.Limits
	// Egress is how containers reach the network (--egress): "broker"
	// (network mode none, out only through the broker's granted
	// destinations), "open" (the engine's network), or "auto" (the
	// default): broker where ohd can enter containers' network
	// namespaces, else open with a warning.
	Egress string
	// EgressAllow are egress destinations (HOST[:PORT], *.DOMAIN[:PORT],
	// IP:PORT; pkg/egress) granted to every conversation
	// (--egress-allow); none by default.
	EgressAllow []string
	// ImportLimits bound each import from a conversation's git view (the
	// pack's size, its objects, each object's and delta result's size, the
	// sum), MaxTreeDepth the nesting of its trees; zero fields take
	// packcheck's and worktree's defaults (--import-max-*).
	ImportLimits packcheck.Limits
	MaxTreeDepth int
	// Upstream is the operator's own agent server, in local mode
	// (--upstream URL): every route of the conversation API that is not a
	// conversation's passes to it. "" (default): those routes answer 404.
	// It must be on loopback unless UpstreamAllowRemote.
	Upstream string
	// UpstreamSecretKeyFile holds the upstream's OH_SECRET_KEY, with
	// which ohd opens the Fernet tokens Agent Canvas copies from the
	// upstream's settings into a create body. Default: the systemd
	// credential ohd-upstream-secret-key when present.
	UpstreamSecretKeyFile string
	// UpstreamAllowRemote accepts an Upstream that is not on loopback.
	UpstreamAllowRemote bool
	// CORSOrigins are browser origins allowed to call the conversation
	// API besides loopback pages (--cors-origin; proxy.ParseCORSOrigin).
	CORSOrigins []string
	// WorkspaceRoots are directories under which a create's missing
	// working_dir is made, besides the upstream's home
	// (--workspace-root); each must be an existing absolute directory.
	WorkspaceRoots []string
	// AgentUID and AgentGID are the user conversation containers run as
	// (--agent-uid, --agent-gid): a uid of its own, neither root nor any
	// repository's owner, so that the user's git refuses every git
	// directory the agent makes (package gitboundary). Default: the
	// system user (and group) ohd-agent when it exists, else 10001.
	AgentUID, AgentGID int
	// Getenv reads the environment; nil means os.Getenv (tests inject).
	Getenv func(string) string
}

// DefaultAgentUID is the agent's uid and gid when no system user ohd-agent
// exists: above the range distributions give people.
const DefaultAgentUID = 10001

// defaultAgentIDs are the ids of the system user and group ohd-agent, each
// DefaultAgentUID when absent.
func defaultAgentIDs() (uid, gid int) {
	uid, gid = DefaultAgentUID, DefaultAgentUID
	if u, err := user.Lookup("ohd-agent"); err == nil {
		if n, err := strconv.Atoi(u.Uid); err == nil {
			uid = n
		}
		if n, err := strconv.Atoi(u.Gid); err == nil {
			gid = n
		}
	}
	if g, err := user.LookupGroup("ohd-agent"); err == nil {
		if n, err := strconv.Atoi(g.Gid); err == nil {
			gid = n
		}
	}
	return uid, gid
}

// KubeConfig is what the kubernetes runtime is told.
type KubeConfig struct {
	// Kubeconfig is a kubeconfig file; "" uses the in-cluster
	// ServiceAccount (the DaemonSet in packaging/kubernetes).
	Kubeconfig string
	// Namespace holds the conversations' pods and network policies.
	// Default "ohd".
	Namespace string
	// Node is ohd's node, where its pods are pinned; "" reads NODE_NAME
	// (the downward API).
	Node string
	// PullImages lets the kubelet pull an image the node lacks; by
	// default only the node's images run.
	PullImages bool
	// PolicyEnforced: the operator says the cluster's network plugin
	// enforces NetworkPolicy (ohd can tell only for Calico and Cilium).
	PolicyEnforced bool
	// CRISocket is the node's container runtime's CRI socket, where ohd
	// reads an image's entrypoint. Default containerd's,
	// /run/containerd/containerd.sock.
	CRISocket string
}

// Defaults fills every zero field. It reads the environment (XDG dirs,
// CREDENTIALS_DIRECTORY is read later by the master key loader).
func (c *Config) Defaults() error {
	if c.Getenv == nil {
		c.Getenv = os.Getenv
	}
	if c.Network == "" {
		c.Network = runtime.IsolatedNetwork
	}
	if c.StateDir == "" || c.RuntimeDir == "" {
		state, run, err := control.DefaultDirs(c.Getenv)
		if err != nil {
			return err
		}
		if c.StateDir == "" {
			c.StateDir = state
		}
		if c.RuntimeDir == "" {
			c.RuntimeDir = run
		}
	}
	if c.ControlSocket == "" {
		c.ControlSocket = filepath.Join(c.RuntimeDir, "ohd.sock")
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8000"
	}
	if c.Runtime == "" {
		c.Runtime = "auto"
	}
	if c.Kube.CRISocket == "" {
		c.Kube.CRISocket = kubernetes.DefaultCRISocket
	}
	if c.Kube.Namespace == "" {
		c.Kube.Namespace = "ohd"
	}
	if c.Egress == "" {
		c.Egress = "auto"
	}
	if c.Image == "" {
		c.Image = openhands.DefaultImage
	}
	if c.WorktreeRoot == "" {
		c.WorktreeRoot = filepath.Join(c.StateDir, "worktrees")
	}
	if c.LogFormat == "" {
		c.LogFormat = "text"
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if c.AgentUID == 0 || c.AgentGID == 0 {
		uid, gid := defaultAgentIDs()
		if c.AgentUID == 0 {
			c.AgentUID = uid
		}
		if c.AgentGID == 0 {
			c.AgentGID = gid
		}
	}
	if c.Helper == "" {
		if exe, err := os.Executable(); err == nil {
			c.Helper = filepath.Join(filepath.Dir(exe), "ohctl")
		}
	}
	return nil
}

// Validate reports the first invalid field, saying what to do.
func (c *Config) Validate() error {
	for name, p := range map[string]string{"--state-dir": c.StateDir, "--runtime-dir": c.RuntimeDir, "--control-socket": c.ControlSocket, "--worktree-root": c.WorktreeRoot} {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("%s %q: must be an absolute path", name, p)
		}
	}
	switch c.Runtime {
	case "auto", "docker", "local":
	case "kubernetes":
		if c.Kube.Namespace == "" {
			return fmt.Errorf("--runtime kubernetes: --kube-namespace is empty")
		}
	default:
		return fmt.Errorf("--runtime %q: use docker, kubernetes, local or auto", c.Runtime)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return fmt.Errorf("--log-format %q: use text or json", c.LogFormat)
	}
	if c.Listen != "off" {
		host, _, err := net.SplitHostPort(c.Listen)
		if err != nil {
			return fmt.Errorf("--listen %q: want host:port, e.g. 127.0.0.1:8000 (or off): %v", c.Listen, err)
		}
		if !isLoopback(host) && len(c.SessionAPIKeys) == 0 && c.SessionAPIKeyFile == "" && c.Getenv("CREDENTIALS_DIRECTORY") == "" {
			return fmt.Errorf("--listen %q is not a loopback address: refusing to expose the conversation API without configured keys; pass --session-api-key-file (or --session-api-key) or listen on 127.0.0.1", c.Listen)
		}
	}
	if c.MetricsListen != "" {
		host, _, err := net.SplitHostPort(c.MetricsListen)
		if err != nil || !isLoopback(host) {
			return fmt.Errorf("--metrics-listen %q: must be a loopback host:port", c.MetricsListen)
		}
	}
	for _, kv := range c.InnerEnv {
		if err := openhands.CheckExtraEnv(kv); err != nil {
			return fmt.Errorf("--inner-env: %w", err)
		}
	}
	switch c.Egress {
	case "auto", "broker", "open":
	default:
		return fmt.Errorf("--egress %q: use broker (no network but the broker's granted destinations), open (the engine's network) or auto", c.Egress)
	}
	for _, a := range c.EgressAllow {
		if _, err := egress.ParseDest(a); err != nil {
			return fmt.Errorf("--egress-allow: %w", err)
		}
	}
	if c.Upstream != "" {
		if _, err := ParseUpstream(c.Upstream, c.UpstreamAllowRemote); err != nil {
			return err
		}
	}
	for _, o := range c.CORSOrigins {
		if _, err := proxy.ParseCORSOrigin(o); err != nil {
			return err
		}
	}
	for _, r := range c.WorkspaceRoots {
		if !filepath.IsAbs(r) || filepath.Clean(r) == "/" {
			return fmt.Errorf("--workspace-root %q: give the absolute path of a directory other than /", r)
		}
		if st, err := os.Stat(r); err != nil || !st.IsDir() {
			return fmt.Errorf("--workspace-root %q: not an existing directory: create it first", r)
		}
	}
	if len(c.ControlSocket) > 100 {
		return fmt.Errorf("--control-socket %q: path is too long for a Unix socket (max ~100 bytes): choose a shorter --runtime-dir", c.ControlSocket)
	}
	return nil
}

// ParseUpstream checks an --upstream URL: http or https, a host, no
// credentials, query or fragment, and a loopback host unless
// allowRemote.
func ParseUpstream(s string, allowRemote bool) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--upstream %q: want the agent server's base URL, e.g. http://127.0.0.1:18000", s)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("--upstream %q: no credentials, query or fragment in the URL (clients' keys are passed through)", u.Redacted())
	}
	if !allowRemote && !isLoopback(u.Hostname()) {
		return nil, fmt.Errorf("--upstream %q is not on loopback: the upstream receives the clients' session keys; run it on 127.0.0.1, or pass --upstream-allow-remote", u.Redacted())
	}
	return u, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
