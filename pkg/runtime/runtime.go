package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"
)

// Labels ohd puts on every container it creates. The "dev.ohd." prefix is
// reserved: Spec.Labels may not use it.
const (
	// LabelServer names the ohd server (its state directory's identity) that
	// owns the container; List and Events select on it.
	LabelServer = "dev.ohd.server"
	// LabelConversation is the conversation's UUID.
	LabelConversation = "dev.ohd.conversation"
	// LabelInnerPort records the container port the inner agent server
	// listens on, so Inspect and List can find its published host port.
	LabelInnerPort = "dev.ohd.inner-port"
	// LabelNetwork is "none" on a container made with Spec.NoNetwork.
	LabelNetwork = "dev.ohd.network"

	reservedLabelPrefix = "dev.ohd."
)

// Defaults applied to a zero field of Spec or Resources.
const (
	DefaultMemoryBytes  = 4 << 30       // 4 GiB
	DefaultNanoCPUs     = 2_000_000_000 // 2 CPUs (capped at the engine's CPU count)
	DefaultPidsLimit    = 512
	DefaultInnerPort    = 8000
	DefaultHealthPath   = "/health"
	DefaultReadyTimeout = 60 * time.Second
	DefaultTmpSize      = 1 << 30 // 1 GiB, counted against the memory limit
)

// Errors callers test with errors.Is. Every error the Docker runtime returns
// for an engine that does not answer wraps ErrEngineUnavailable.
var (
	// ErrNotFound: the container or image does not exist. For an image
	// (missing, and its pull failed) the message says how to provide it.
	ErrNotFound = errors.New("not found")
	// ErrEngineUnavailable: the engine (the Docker engine, the Kubernetes
	// API server) does not answer.
	ErrEngineUnavailable = errors.New("engine unavailable")
	// ErrNotReady: the inner server did not answer its health check with
	// 200 within Spec.ReadyTimeout.
	ErrNotReady = errors.New("container not ready in time")
	// ErrExited: the container exited before it was ready.
	ErrExited = errors.New("container exited")
	// ErrConflict: a container with the conversation's name already exists
	// (a leftover the caller should reconcile: Inspect it, Remove it, retry).
	ErrConflict = errors.New("container name already in use")
	// ErrInvalidSpec: the Spec is incomplete or inconsistent.
	ErrInvalidSpec = errors.New("invalid container spec")
	// ErrNoContainer: the local runtime has no container to run a command
	// in or read logs from.
	ErrNoContainer = errors.New("the local runtime has no container")
	// ErrNotRunning: the container exists but does not run (Pause).
	ErrNotRunning = errors.New("container not running")
	// ErrStoppedNotPaused: Pause of a runtime that cannot freeze a
	// container (Kubernetes has no such call) stopped it instead: nothing
	// of it runs (the error wraps ErrNotRunning too), and Unpause does not
	// bring it back; the caller starts it again if it must run on.
	ErrStoppedNotPaused = errors.New("stopped, not paused (the runtime cannot freeze a container)")
	// ErrEngineTimeout: the engine did not answer a call within its
	// deadline (DockerOptions.EngineTimeout; on Kubernetes an exec the pod
	// did not start, a pod the kubelet did not stop): it may be wedged on
	// that container. The call was given up and recorded (StallReporter).
	ErrEngineTimeout = errors.New("engine call timed out")
)

// Mount is a bind mount of a host path into the container.
type Mount struct {
	// Source is the absolute host path; it must exist.
	Source string
	// Target is the absolute path inside the container. For the worktree
	// and the git dirs it equals Source (the same path in both namespaces).
	Target string
	// ReadOnly mounts it read-only.
	ReadOnly bool
}

// Resources are the container's cgroup limits. A zero field takes its
// default: 4 GiB memory (no extra swap), 2 CPUs, 512 processes.
type Resources struct {
	MemoryBytes int64
	NanoCPUs    int64
	PidsLimit   int64
}

// Spec describes one conversation's container.
type Spec struct {
	// ConversationID is the conversation's UUID (required). The container
	// is named ContainerName(ConversationID) and labelled with it.
	ConversationID string
	// ServerID identifies the ohd server that owns the container (required).
	ServerID string
	// Image is an image ID (as recorded by ResolveImage) or a reference.
	Image string
	// UID and GID are the numeric user the container runs as ("uid:gid").
	UID, GID int
	// Mounts are bind mounts, applied exactly as given.
	Mounts []Mount
	// Env is KEY=VALUE, passed exactly as given. It must hold no secret
	// value: docker inspect shows it to anyone who may use the engine. The
	// runtime adds nothing.
	Env []string
	// WorkingDir is the process's working directory; "" keeps the image's.
	WorkingDir string
	// Entrypoint, if set, replaces the image's entrypoint (ohd wraps the
	// image's own entrypoint and command with its key-handing helper).
	Entrypoint []string
	// Cmd, if set, replaces the image's command.
	Cmd []string
	// InnerPort is the port the inner server listens on; 0 means 8000. It
	// is published on 127.0.0.1 with a port the engine picks (unless
	// NoNetwork).
	InnerPort int
	// NoNetwork runs the container with network mode none: loopback
	// only, no port published, no way out but the broker socket. ohd
	// reaches the inner server inside the container's network namespace
	// (NetnsOpener), so the runtime must be able to enter it; the
	// Instance's HostPort is then the inner port on the namespace's
	// loopback, not a port of the host.
	NoNetwork bool
	// Resources are the limits; zero fields take the defaults.
	Resources Resources
	// ReadOnlyRootfs makes the root filesystem read-only and mounts a
	// tmpfs at /tmp (mode 1777, TmpSize bytes).
	ReadOnlyRootfs bool
	// TmpSize is the size of the /tmp tmpfs when ReadOnlyRootfs is set;
	// 0 means 1 GiB. Its pages count against the memory limit.
	TmpSize int64
	// HealthPath is the path polled for readiness; "" means "/health".
	HealthPath string
	// ReadyTimeout bounds the wait for readiness; 0 means 60s.
	ReadyTimeout time.Duration
	// Labels are extra labels; keys under "dev.ohd." are reserved.
	Labels map[string]string
}

// Timings is how long each step of a Start took.
type Timings struct {
	// Create is the engine's container create call.
	Create time.Duration
	// Start is the engine's start call plus reading the port back.
	Start time.Duration
	// Ready is the wait for the health check to answer 200.
	Ready time.Duration
}

// Total is the sum of the steps.
func (t Timings) Total() time.Duration { return t.Create + t.Start + t.Ready }

// Instance is a started, ready container.
type Instance struct {
	ContainerID string
	Name        string
	// HostPort is the port on 127.0.0.1 that reaches the inner server;
	// for a NoNetwork container, the inner port on the loopback of the
	// container's own network namespace.
	HostPort int
	// Addr is "127.0.0.1:<HostPort>".
	Addr string
	// NoNetwork says the container has no network (Spec.NoNetwork): Addr
	// is reached only inside its namespace.
	NoNetwork bool
	// Timings is the breakdown of this start (Restart leaves Create zero).
	Timings Timings
}

// Container is what the engine knows about one of ohd's containers.
type Container struct {
	ID             string
	Name           string
	ConversationID string
	ServerID       string
	// Role is "" for a conversation's inner server, RoleSandbox for a
	// sandbox (see StartSandbox).
	Role    string
	Running bool
	// State is the engine's state: created, running, paused, restarting,
	// removing, exited or dead.
	State string
	// HostPort is the published port of the inner server (the inner
	// port in its namespace when NoNetwork); 0 when the container is not
	// running.
	HostPort int
	// NoNetwork says the container runs with network mode none.
	NoNetwork bool
	ImageID   string
	// ExitCode is the last exit code (meaningful when not running).
	ExitCode int
	// OOMKilled says the kernel killed it for exceeding its memory limit.
	OOMKilled bool
	// PID is the host pid of its first process while it runs (0 when it
	// does not, or the runtime cannot tell: its processes are on another
	// machine); set by Inspect only.
	PID int
	// WorkingDir is the container's working directory (its image's
	// WORKDIR unless its create set one; "" is /); set by Inspect only.
	WorkingDir string
	// Mounts are the bind mounts it was created with, in the engine's
	// order; set by Inspect only (nil when the runtime cannot tell). A
	// container whose mounts are not its conversation's current ones is
	// made anew rather than restarted.
	Mounts []Mount
}

// Archiver reads a container's files as a tar archive (Docker.Archive).
type Archiver interface {
	Archive(ctx context.Context, containerID, path string) (io.ReadCloser, error)
}

// Event is a container event the engine reported for one of ohd's
// containers.
type Event struct {
	ContainerID    string
	ConversationID string
	// Action is the engine's action: "create", "start", "restart", "stop",
	// "kill", "die", "oom", "pause", "unpause", "destroy"; or ActionResync.
	Action string
	// ExitCode is set for "die".
	ExitCode int
	// Time is when the engine recorded it.
	Time time.Time
}

// ActionResync is the Action of a synthetic Event (no container) delivered
// after the event stream was re-established: events may have been lost
// while it was down (an engine restart forgets them), so the receiver
// should reconcile with List.
const ActionResync = "resync"

// Image is a resolved image reference.
type Image struct {
	// Ref is the reference as given.
	Ref string
	// ID is the engine's image ID ("sha256:...").
	ID string
	// Floating says Ref can move: a "latest" tag or no tag and no digest.
	Floating bool
	// Entrypoint and Cmd are the image's own, as its configuration says.
	Entrypoint, Cmd []string
}

// ExecOptions say how Exec runs a command.
type ExecOptions struct {
	// User is "uid[:gid]"; "" runs as the container's user.
	User string
	// WorkingDir; "" keeps the container's.
	WorkingDir string
	// Env is added to the container's environment (KEY=VALUE).
	Env []string
	// Stdin, if set, is copied to the command's standard input until EOF.
	// Exec returns when the command has exited, without waiting for a
	// Read that blocks: pass a reader that ends (or nil).
	Stdin io.Reader
	// Stdout and Stderr receive the command's output; nil discards it.
	// With TTY, all output arrives on Stdout, as the terminal wrote it.
	Stdout, Stderr io.Writer
	// TTY runs the command on a pseudo-terminal the engine allocates
	// (docker exec -t): the command sees a terminal on its standard
	// streams, with Size as its window size.
	TTY bool
	// Size is the terminal's initial size, with TTY; zero leaves the
	// engine's default. An engine older than API 1.42 gets it just after
	// the command starts, before any of Stdin reaches the command.
	Size TermSize
	// Resize, with TTY, carries new window sizes of the terminal while
	// the command runs (a SIGWINCH of the caller's terminal). Exec stops
	// reading it when it returns; it never closes it.
	Resize <-chan TermSize
}

// TermSize is a terminal's window size in character cells.
type TermSize struct {
	Rows, Cols uint16
}

// ImageInspector is a Runtime that can resolve an image reference without
// pulling it: InspectImage answers as ResolveImage does for an image the
// engine has, and ErrNotFound for one it lacks (nothing is pulled). A
// create asks it while it checks the request, and calls ResolveImage (which
// may pull) only once the request is known good and the image was not
// there. Docker implements it.
type ImageInspector interface {
	InspectImage(ctx context.Context, ref string) (Image, error)
}

// Runtime runs conversation containers. Implementations: Docker (the
// Docker Engine API) and Local (no containers).
type Runtime interface {
	// Kind is "docker" or "local".
	Kind() string
	// ResolveImage finds ref in the engine, pulling a missing reference
	// (never an ID). A missing image whose pull fails gives ErrNotFound
	// with a hint to pull, load or build it.
	ResolveImage(ctx context.Context, ref string) (Image, error)
	// Pulls lists the image pulls in progress, oldest first (Local: none).
	Pulls() []Pull
	// Start creates, starts and waits for the container to be ready. On any
	// failure the container is removed and the error (a *StartError) says
	// which step failed and carries the tail of its logs.
	Start(ctx context.Context, s Spec) (Instance, error)
	// Restart starts an existing (stopped) container again, waits for it to
	// be ready and reads its port back (it may have changed). Only the
	// readiness fields of s are used (InnerPort 0: the container's own).
	// On failure the container is stopped, not removed.
	Restart(ctx context.Context, containerID string, s Spec) (Instance, error)
	// Stop stops the container, killing it after timeout. Stopping a
	// stopped container is no error; a missing one is ErrNotFound.
	Stop(ctx context.Context, containerID string, timeout time.Duration) error
	// Remove force-removes the container; a missing container is no error.
	Remove(ctx context.Context, containerID string) error
	// Pause freezes every process of the running container (the engine's
	// cgroup freezer: nothing in it runs, its state stays); Unpause thaws
	// it. Pausing a paused container, or unpausing one that is not, is no
	// error; a container that does not run gives ErrNotRunning, a missing
	// one ErrNotFound. A runtime that cannot freeze stops the container
	// and says so with ErrStoppedNotPaused.
	Pause(ctx context.Context, containerID string) error
	Unpause(ctx context.Context, containerID string) error
	// Inspect describes the container; ErrNotFound if it does not exist.
	Inspect(ctx context.Context, containerID string) (Container, error)
	// List returns all containers (running or not) labelled with serverID.
	List(ctx context.Context, serverID string) ([]Container, error)
	// Events calls fn for each event of a container labelled with serverID
	// until ctx ends, then returns nil. fn runs on Events' goroutine, one
	// call at a time.
	Events(ctx context.Context, serverID string, fn func(Event)) error
	// Logs copies the container's output (all of it, then new output while
	// follow is set and the container runs).
	Logs(ctx context.Context, containerID string, follow bool, stdout, stderr io.Writer) error
	// StartSandbox starts a container that reaches nothing (no network),
	// to run commands in with Exec; see Docker.StartSandbox.
	StartSandbox(ctx context.Context, s Spec) (containerID string, err error)
	// Exec runs cmd in the running container and returns its exit code.
	Exec(ctx context.Context, containerID string, cmd []string, opts ExecOptions) (exitCode int, err error)
	// Hardening lists how a container departs from ohd's hardening (for
	// ohctl doctor); an empty list means none.
	Hardening(ctx context.Context, containerID string, uid, gid int) ([]string, error)
	// Ping checks the engine answers.
	Ping(ctx context.Context) error
	// Close releases the engine connection.
	Close() error
}

// ContainerName is the name of conversationID's container:
// "ohd-" followed by the first 12 letters and digits of the id, lower
// cased (for a UUID, the first 12 hex digits: 48 bits, unique enough on one
// host; a clash is reported as ErrConflict, never resolved silently).
func ContainerName(conversationID string) string {
	var b strings.Builder
	b.WriteString("ohd-")
	n := 0
	for _, r := range strings.ToLower(conversationID) {
		if n == 12 {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			n++
		}
	}
	return b.String()
}

// HostnameOf is the hostname of conversationID's container: "ohd-"
// followed by all the id's letters and digits, lower cased (for a UUID,
// its 32 hex digits; at most 63 characters, a DNS label). It is the same
// for every container the conversation ever gets, because the agent
// server's conversation lease names the host that holds it
// (conversation_lease.py L40-44, L166-185 @v1.43.1: a lease is taken over
// early only from a dead owner on the same hostname; any other owner keeps
// it for its 45 s TTL, and the conversation answers 404 and closes its
// sockets 4004 until then). The engine's default, the container id, would
// change with every container ohd creates after a loss.
func HostnameOf(conversationID string) string {
	var b strings.Builder
	b.WriteString("ohd-")
	for _, r := range strings.ToLower(conversationID) {
		if b.Len() == 63 {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// withDefaults returns s with every zero field set to its default.
func (s Spec) withDefaults() Spec {
	if s.InnerPort == 0 {
		s.InnerPort = DefaultInnerPort
	}
	if s.HealthPath == "" {
		s.HealthPath = DefaultHealthPath
	}
	if s.ReadyTimeout == 0 {
		s.ReadyTimeout = DefaultReadyTimeout
	}
	if s.Resources.MemoryBytes == 0 {
		s.Resources.MemoryBytes = DefaultMemoryBytes
	}
	if s.Resources.NanoCPUs == 0 {
		s.Resources.NanoCPUs = DefaultNanoCPUs
	}
	if s.Resources.PidsLimit == 0 {
		s.Resources.PidsLimit = DefaultPidsLimit
	}
	if s.ReadOnlyRootfs && s.TmpSize == 0 {
		s.TmpSize = DefaultTmpSize
	}
	return s
}

// validateReadiness checks the fields readiness uses (defaults applied).
func (s Spec) validateReadiness() error {
	switch {
	case s.InnerPort < 1 || s.InnerPort > 65535:
		return fmt.Errorf("%w: inner port %d out of range", ErrInvalidSpec, s.InnerPort)
	case !strings.HasPrefix(s.HealthPath, "/"):
		return fmt.Errorf("%w: health path %q does not start with /", ErrInvalidSpec, s.HealthPath)
	case s.ReadyTimeout < 0:
		return fmt.Errorf("%w: ready timeout %v is negative", ErrInvalidSpec, s.ReadyTimeout)
	}
	return nil
}

// validate reports the first problem of a Spec whose defaults are applied.
func (s Spec) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidSpec}, args...)...)
	}
	if err := s.validateReadiness(); err != nil {
		return err
	}
	switch {
	case ContainerName(s.ConversationID) == "ohd-":
		return bad("conversation id %q has no letters or digits", s.ConversationID)
	case s.ServerID == "":
		return bad("server id is empty")
	case s.Image == "":
		return bad("image is empty")
	case s.UID < 0 || s.GID < 0:
		return bad("uid:gid %d:%d is negative", s.UID, s.GID)
	case s.Resources.MemoryBytes < 6<<20:
		return bad("memory limit %d bytes is below the engine's 6 MiB minimum", s.Resources.MemoryBytes)
	case s.Resources.NanoCPUs < 0 || s.Resources.PidsLimit < 0 || s.TmpSize < 0:
		return bad("negative resource limit")
	}
	for _, m := range s.Mounts {
		if !filepath.IsAbs(m.Source) || !filepath.IsAbs(m.Target) {
			return bad("mount %s:%s: both paths must be absolute", m.Source, m.Target)
		}
		if filepath.Clean(m.Target) == "/" {
			return bad("mount %s:%s: cannot mount over /", m.Source, m.Target)
		}
		if s.ReadOnlyRootfs && filepath.Clean(m.Target) == "/tmp" {
			return bad("mount %s:%s: /tmp is the tmpfs of the read-only root", m.Source, m.Target)
		}
	}
	for i, e := range s.Env {
		// The entry is not quoted in the message: it might be a value.
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return bad("environment entry %d is not KEY=VALUE", i)
		}
	}
	for k := range s.Labels {
		if strings.HasPrefix(k, reservedLabelPrefix) {
			return bad("label %q uses the reserved prefix %q", k, reservedLabelPrefix)
		}
	}
	return nil
}
