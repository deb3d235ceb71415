package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/packcheck"
	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/runtime/kubernetes"
	"github.com/ohd-dev/ohd/pkg/store"
	"github.com/ohd-dev/ohd/pkg/version"
	"github.com/ohd-dev/ohd/pkg/worktree"
)

// ExitUsage is ohd's exit code for bad usage and invalid configuration
// (including a master key that is not the state's): running it again will
// not help, so the systemd unit does not restart on it
// (RestartPreventExitStatus=).
const ExitUsage = 2

// usageError marks an error in what ohd was asked to do (flags, arguments,
// settings), as opposed to one it met while doing it.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// onUsageError marks the command line's parse errors.
func onUsageError(_ context.Context, _ *cli.Command, err error, _ bool) error {
	return usageError{fmt.Errorf("%w (see ohd --help)", err)}
}

// Main runs the ohd command line (args[0] is the program name) and returns
// the exit code: 0 after a clean shutdown, 1 on error, ExitUsage on bad
// usage or an invalid setting.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	app := &cli.Command{
		Name:            "ohd",
		Usage:           "per-conversation containers, git worktrees and credential brokers for AI agents",
		Version:         version.Version,
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		ExitErrHandler:  func(context.Context, *cli.Command, error) {},
		OnUsageError:    onUsageError,
		Commands: []*cli.Command{serveCmd(stderr), {
			Name:  "version",
			Usage: "print the version",
			Action: func(context.Context, *cli.Command) error {
				fmt.Fprintf(stdout, "ohd %s\n", version.Version)
				return nil
			},
		}},
	}
	if err := app.Run(ctx, args); err != nil {
		fmt.Fprintf(stderr, "ohd: %v\n", err)
		if errors.As(err, new(usageError)) || errors.Is(err, store.ErrWrongKey) {
			return ExitUsage
		}
		return 1
	}
	return 0
}

func env(name string) cli.ValueSourceChain {
	return cli.EnvVars("OHD_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")))
}

func serveCmd(stderr io.Writer) *cli.Command {
	str := func(name, usage string) *cli.StringFlag {
		return &cli.StringFlag{Name: name, Usage: usage, Sources: env(name)}
	}
	return &cli.Command{
		Name:         "serve",
		Usage:        "run the daemon (every flag is also OHD_<FLAG_NAME> in the environment)",
		OnUsageError: onUsageError,
		Flags: []cli.Flag{
			str("state-dir", "state directory (default /var/lib/ohd as root, else $XDG_STATE_HOME/ohd)"),
			str("runtime-dir", "runtime directory for sockets (default /run/ohd as root, else $XDG_RUNTIME_DIR/ohd)"),
			str("control-socket", "ohctl's socket (default <runtime-dir>/ohd.sock)"),
			str("listen", "conversation API address (default 127.0.0.1:8000; off disables it)"),
			str("runtime", "docker, kubernetes, local, or auto: docker when the engine answers (default auto); kubernetes: a pod per conversation on this node"),
			str("kubeconfig", "kubeconfig file of the kubernetes runtime (default: the in-cluster ServiceAccount)"),
			str("kube-namespace", "namespace of the kubernetes runtime's pods and network policies (default ohd)"),
			str("kube-node", "this node's name, where the kubernetes runtime pins its pods (default $NODE_NAME, from the downward API)"),
			&cli.BoolFlag{Name: "kube-pull-images", Usage: "let the kubelet pull an image the node lacks (default: only the node's images run)", Sources: env("kube-pull-images")},
			str("kube-cri-socket", "the node's container runtime's CRI socket, where the kubernetes runtime reads an image's entrypoint (default "+kubernetes.DefaultCRISocket+", containerd's)"),
			&cli.BoolFlag{Name: "kube-policy-enforced", Usage: "the cluster's network plugin enforces NetworkPolicy (ohd tells only for Calico and Cilium)", Sources: env("kube-policy-enforced")},
			str("image", "conversation container image (default "+openhands.DefaultImage+"; pin a version)"),
			str("worktree-root", "where worktrees are created (default <state-dir>/worktrees)"),
			str("log-format", "text or json (default text)"),
			str("log-level", "debug, info, warn or error (default info)"),
			&cli.StringSliceFlag{Name: "session-api-key", Usage: "accepted conversation API key (repeatable; default: generated into <state-dir>/session-api-key)", Sources: cli.EnvVars("OHD_SESSION_API_KEYS")},
			str("session-api-key-file", "file of accepted conversation API keys, one per line (preferred over --session-api-key: keeps keys out of argv and the environment)"),
			str("ohctl-binary", "static ohctl mounted into containers (default: the ohctl next to ohd)"),
			str("network", "Docker network of the containers (default ohd: created by ohd, containers cannot reach each other; bridge: the engine's default)"),
			&cli.DurationFlag{Name: "idle-timeout", Usage: "stop containers idle this long (0: never)", Sources: env("idle-timeout")},
			&cli.StringSliceFlag{Name: "forward-env", Usage: "host environment variable to pass to containers (repeatable; never secrets)", Sources: env("forward-env")},
			&cli.StringSliceFlag{Name: "inner-env", Usage: "NAME=VALUE for the inner agent servers (repeatable; no secrets: names that look like one are refused)", Sources: env("inner-env")},
			&cli.BoolFlag{Name: "read-only-rootfs", Usage: "run containers with a read-only root and a tmpfs /tmp", Sources: env("read-only-rootfs")},
			// The defaults are the runtime's own, so the help cannot drift
			// from what a zero Spec gets; --cpus above the engine's CPU
			// count is capped to it by the runtime.
			&cli.StringFlag{Name: "memory", Value: FormatSize(runtime.DefaultMemoryBytes), Usage: "container memory limit: bytes, or with a unit (512m, 4g)", Sources: env("memory")},
			&cli.Float64Flag{Name: "cpus", Value: float64(runtime.DefaultNanoCPUs) / 1e9, Usage: "container CPU limit (at most the engine's CPU count: a higher one is capped, with a log line)", Sources: env("cpus")},
			&cli.Int64Flag{Name: "pids", Value: runtime.DefaultPidsLimit, Usage: "container process limit", Sources: env("pids")},
			&cli.StringFlag{Name: "import-max-pack", Value: FormatSize(packcheck.DefaultMaxPackBytes), Usage: "largest pack one import from a conversation's git view may be (bytes, or with a unit)", Sources: env("import-max-pack")},
			&cli.Int64Flag{Name: "import-max-objects", Value: packcheck.DefaultMaxObjects, Usage: "most objects one import from a conversation's git view may hold", Sources: env("import-max-objects")},
			&cli.StringFlag{Name: "import-max-object", Value: FormatSize(packcheck.DefaultMaxObjectBytes), Usage: "largest object (or delta result) an import may declare; bounds the importing git's memory", Sources: env("import-max-object")},
			&cli.StringFlag{Name: "import-max-expanded", Value: FormatSize(packcheck.DefaultMaxExpandedBytes), Usage: "most bytes one import's objects may expand to in all", Sources: env("import-max-expanded")},
			&cli.IntFlag{Name: "import-max-tree-depth", Value: worktree.DefaultMaxTreeDepth, Usage: "deepest directory nesting an imported commit may have", Sources: env("import-max-tree-depth")},
			&cli.IntFlag{Name: "agent-uid", Usage: "uid conversation containers run as: one of its own, never root nor a repository's owner (default: the system user ohd-agent, else 10001)", Sources: env("agent-uid")},
			&cli.IntFlag{Name: "agent-gid", Usage: "gid conversation containers run as (default: the group ohd-agent, else 10001)", Sources: env("agent-gid")},
			&cli.DurationFlag{Name: "ready-timeout", Value: 60 * time.Second, Usage: "wait this long for a container's health check", Sources: env("ready-timeout")},
			str("health-path", "inner server health path (default /health)"),
			&cli.DurationFlag{Name: "engine-timeout", Value: time.Minute, Usage: "give up on a Docker engine call (and an exec the engine has not started) after this long; on Kubernetes, on an exec silent that long in a pod that runs no command, and on a pod the kubelet has not stopped that long after its grace period; it is logged and shown by ohctl show and ohctl doctor", Sources: env("engine-timeout")},
			str("metrics-listen", "also serve metrics on this loopback address"),
			&cli.IntFlag{Name: "broker-git-in-flight", Value: 8, Usage: "git credential requests one conversation may have in progress (-1: no limit)", Sources: env("broker-git-in-flight")},
			&cli.IntFlag{Name: "broker-secret-in-flight", Value: 8, Usage: "secret requests one conversation may have in progress (-1: no limit)", Sources: env("broker-secret-in-flight")},
			&cli.IntFlag{Name: "broker-llm-in-flight", Value: 32, Usage: "LLM requests and streams one conversation may have in progress (-1: no limit)", Sources: env("broker-llm-in-flight")},
			&cli.IntFlag{Name: "broker-oauth-in-flight", Value: 8, Usage: "OAuth token requests one conversation may have in progress (-1: no limit)", Sources: env("broker-oauth-in-flight")},
			&cli.IntFlag{Name: "broker-mcp-in-flight", Value: 16, Usage: "MCP requests and streams one conversation may have in progress through its broker (-1: no limit)", Sources: env("broker-mcp-in-flight")},
			&cli.IntFlag{Name: "broker-connections", Value: broker.DefaultMaxConns, Usage: "connections one conversation may hold open to its broker socket, idle keep-alive ones included; keep it above the sum of the in-flight budgets (default: their sum, 80, plus 48) (-1: no limit)", Sources: env("broker-connections")},
			str("egress", "how containers reach the network: broker (no network but loopback; out only through the broker to granted destinations), open (the engine's network), or auto (default: broker where ohd can enter containers' network namespaces, else open with a warning)"),
			&cli.StringSliceFlag{Name: "egress-allow", Usage: "egress destination HOST[:PORT] (port 443 when absent; *.example.com for a domain's hosts; IP:PORT) granted to every conversation (repeatable)", Sources: env("egress-allow")},
			&cli.IntFlag{Name: "egress-connections", Value: broker.DefaultEgressConns, Usage: "egress connections one conversation may hold open through its broker (-1: no limit)", Sources: env("egress-connections")},
			&cli.Float64Flag{Name: "egress-rate", Value: broker.DefaultEgressRate, Usage: "new egress connections per second one conversation may open, after a burst of --egress-burst (-1: no limit)", Sources: env("egress-rate")},
			&cli.IntFlag{Name: "egress-burst", Value: broker.DefaultEgressBurst, Usage: "egress connections one conversation may open at once before --egress-rate applies", Sources: env("egress-burst")},
			str("upstream", "the operator's own agent server (local mode, on loopback), e.g. http://127.0.0.1:18000: routes that are not a conversation's pass to it"),
			str("upstream-secret-key-file", "file holding the upstream's OH_SECRET_KEY, to open the encrypted settings Agent Canvas copies into a create (default: the systemd credential ohd-upstream-secret-key)"),
			&cli.BoolFlag{Name: "upstream-allow-remote", Usage: "allow an --upstream that is not on loopback (it receives the clients' session keys)", Sources: env("upstream-allow-remote")},
			&cli.StringSliceFlag{Name: "cors-origin", Usage: "browser origin (scheme://host[:port]) allowed to call the conversation API besides pages on localhost, 127.0.0.1 and [::1] (repeatable)", Sources: env("cors-origin")},
			&cli.StringSliceFlag{Name: "workspace-root", Usage: "directory under which a create's missing working_dir is made, besides the upstream's home (repeatable)", Sources: env("workspace-root")},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() > 0 {
				return usageError{fmt.Errorf("serve takes no arguments, got %q", cmd.Args().Slice())}
			}
			if os.Getenv("GOGC") == "" {
				// ohd's live heap is a few MiB, so at the default 100 the
				// collector runs every few hundred proxied requests (15% of
				// the conversation API's CPU in make bench). 400 trades
				// tens of MiB at most for a quarter of that; GOGC overrides.
				debug.SetGCPercent(400)
			}
			memory, err := ParseSize(cmd.String("memory"))
			if err != nil {
				return usageError{fmt.Errorf("--memory: %w", err)}
			}
			var imp packcheck.Limits
			for _, f := range []struct {
				name string
				to   *int64
			}{{"import-max-pack", &imp.MaxPackBytes}, {"import-max-object", &imp.MaxObjectBytes}, {"import-max-expanded", &imp.MaxExpandedBytes}} {
				n, err := ParseSize(cmd.String(f.name))
				if err != nil || n <= 0 {
					return usageError{fmt.Errorf("--%s %q: want a positive size (bytes, or with a unit: 512m, 4g)", f.name, cmd.String(f.name))}
				}
				*f.to = n
			}
			if imp.MaxObjects = cmd.Int64("import-max-objects"); imp.MaxObjects <= 0 {
				return usageError{fmt.Errorf("--import-max-objects %d: want a positive number", imp.MaxObjects)}
			}
			treeDepth := int(cmd.Int("import-max-tree-depth"))
			if treeDepth <= 0 {
				return usageError{fmt.Errorf("--import-max-tree-depth %d: want a positive number", treeDepth)}
			}
			cfg := Config{
				StateDir: cmd.String("state-dir"), RuntimeDir: cmd.String("runtime-dir"), ControlSocket: cmd.String("control-socket"),
				Listen: cmd.String("listen"), Runtime: cmd.String("runtime"), Image: cmd.String("image"),
				WorktreeRoot: cmd.String("worktree-root"), LogFormat: cmd.String("log-format"), LogLevel: cmd.String("log-level"),
				SessionAPIKeys: cmd.StringSlice("session-api-key"), SessionAPIKeyFile: cmd.String("session-api-key-file"),
				Helper: cmd.String("ohctl-binary"), Network: cmd.String("network"),
				Kube: KubeConfig{Kubeconfig: cmd.String("kubeconfig"), Namespace: cmd.String("kube-namespace"), Node: cmd.String("kube-node"),
					PullImages: cmd.Bool("kube-pull-images"), PolicyEnforced: cmd.Bool("kube-policy-enforced"),
					CRISocket: cmd.String("kube-cri-socket")},
				IdleTimeout: cmd.Duration("idle-timeout"), ForwardEnv: cmd.StringSlice("forward-env"),
				InnerEnv:       cmd.StringSlice("inner-env"),
				ReadOnlyRootfs: cmd.Bool("read-only-rootfs"), MemoryBytes: memory,
				NanoCPUs: int64(cmd.Float64("cpus") * 1e9), PidsLimit: cmd.Int64("pids"),
				ReadyTimeout: cmd.Duration("ready-timeout"), HealthPath: cmd.String("health-path"),
				EngineTimeout: cmd.Duration("engine-timeout"),
				MetricsListen: cmd.String("metrics-listen"), Getenv: os.Getenv,
				BrokerLimits: broker.Limits{
					GitInFlight: int(cmd.Int("broker-git-in-flight")), SecretInFlight: int(cmd.Int("broker-secret-in-flight")),
					LLMInFlight: int(cmd.Int("broker-llm-in-flight")), OAuthInFlight: int(cmd.Int("broker-oauth-in-flight")),
					MCPInFlight: int(cmd.Int("broker-mcp-in-flight")),
					MaxConns:    int(cmd.Int("broker-connections")),
					EgressConns: int(cmd.Int("egress-connections")), EgressRate: cmd.Float64("egress-rate"),
					EgressBurst: int(cmd.Int("egress-burst")),
				},
				Egress: cmd.String("egress"), EgressAllow: cmd.StringSlice("egress-allow"),
				Upstream: cmd.String("upstream"), UpstreamSecretKeyFile: cmd.String("upstream-secret-key-file"),
				UpstreamAllowRemote: cmd.Bool("upstream-allow-remote"),
				CORSOrigins:         cmd.StringSlice("cors-origin"), WorkspaceRoots: cmd.StringSlice("workspace-root"),
				ImportLimits: imp, MaxTreeDepth: treeDepth,
				AgentUID: int(cmd.Int("agent-uid")), AgentGID: int(cmd.Int("agent-gid")),
			}
			for _, name := range []string{"agent-uid", "agent-gid"} {
				if n := cmd.Int(name); cmd.IsSet(name) && n <= 0 {
					return usageError{fmt.Errorf("--%s %d: the agent needs an unprivileged id of its own, never root's (0): omit the flag for the system user ohd-agent (else 10001)", name, n)}
				}
			}
			for _, name := range []string{"broker-git-in-flight", "broker-secret-in-flight", "broker-llm-in-flight", "broker-oauth-in-flight", "broker-mcp-in-flight", "broker-connections", "egress-connections"} {
				if n := cmd.Int(name); n == 0 || n < -1 {
					return usageError{fmt.Errorf("--%s %d: want a positive number, or -1 for no limit", name, n)}
				}
			}
			if r := cmd.Float64("egress-rate"); r == 0 || r < 0 && r != -1 {
				return usageError{fmt.Errorf("--egress-rate %v: want a positive number, or -1 for no limit", r)}
			}
			if n := cmd.Int("egress-burst"); n <= 0 {
				return usageError{fmt.Errorf("--egress-burst %d: want a positive number", n)}
			}
			// (Start checks the settings too; the logger needs the defaults.)
			if err := cfg.Defaults(); err != nil {
				return usageError{err}
			}
			log := NewLogger(stderr, cfg.LogFormat, cfg.LogLevel)
			return Run(ctx, cfg, log, nil)
		},
	}
}
