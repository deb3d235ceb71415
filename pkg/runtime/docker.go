package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/ohd-dev/ohd/pkg/openhands"
)

// engine is the part of the Docker Engine API the runtime uses
// (*client.Client implements it).
type engine interface {
	DaemonHost() string
	ClientVersion() string
	Ping(ctx context.Context, opts client.PingOptions) (client.PingResult, error)
	Info(ctx context.Context, opts client.InfoOptions) (client.SystemInfoResult, error)
	ImageInspect(ctx context.Context, ref string, opts ...client.ImageInspectOption) (client.ImageInspectResult, error)
	ImagePull(ctx context.Context, ref string, opts client.ImagePullOptions) (client.ImagePullResponse, error)
	ContainerCreate(ctx context.Context, opts client.ContainerCreateOptions) (client.ContainerCreateResult, error)
	ContainerStart(ctx context.Context, id string, opts client.ContainerStartOptions) (client.ContainerStartResult, error)
	ContainerStop(ctx context.Context, id string, opts client.ContainerStopOptions) (client.ContainerStopResult, error)
	ContainerRemove(ctx context.Context, id string, opts client.ContainerRemoveOptions) (client.ContainerRemoveResult, error)
	ContainerPause(ctx context.Context, id string, opts client.ContainerPauseOptions) (client.ContainerPauseResult, error)
	ContainerUnpause(ctx context.Context, id string, opts client.ContainerUnpauseOptions) (client.ContainerUnpauseResult, error)
	ContainerInspect(ctx context.Context, id string, opts client.ContainerInspectOptions) (client.ContainerInspectResult, error)
	CopyFromContainer(ctx context.Context, id string, opts client.CopyFromContainerOptions) (client.CopyFromContainerResult, error)
	ContainerList(ctx context.Context, opts client.ContainerListOptions) (client.ContainerListResult, error)
	ContainerLogs(ctx context.Context, id string, opts client.ContainerLogsOptions) (client.ContainerLogsResult, error)
	ContainerWait(ctx context.Context, id string, opts client.ContainerWaitOptions) client.ContainerWaitResult
	ExecCreate(ctx context.Context, id string, opts client.ExecCreateOptions) (client.ExecCreateResult, error)
	ExecAttach(ctx context.Context, execID string, opts client.ExecAttachOptions) (client.ExecAttachResult, error)
	ExecInspect(ctx context.Context, execID string, opts client.ExecInspectOptions) (client.ExecInspectResult, error)
	ExecResize(ctx context.Context, execID string, opts client.ExecResizeOptions) (client.ExecResizeResult, error)
	Events(ctx context.Context, opts client.EventsListOptions) client.EventsResult
	NetworkInspect(ctx context.Context, id string, opts client.NetworkInspectOptions) (client.NetworkInspectResult, error)
	NetworkCreate(ctx context.Context, name string, opts client.NetworkCreateOptions) (client.NetworkCreateResult, error)
	Close() error
}

var _ engine = (*client.Client)(nil)

// DockerOptions configure NewDocker. The zero value talks to the engine
// DOCKER_HOST names (or the default socket) and logs nothing.
type DockerOptions struct {
	// Host is the engine's address ("unix:///var/run/docker.sock",
	// "tcp://host:2376", "ssh://..."). "" honours DOCKER_HOST,
	// DOCKER_TLS_VERIFY, DOCKER_CERT_PATH and DOCKER_API_VERSION, else the
	// default socket.
	Host string
	// Logger receives warnings: engine warnings on create, event stream
	// reconnects, cleanup failures. nil discards them. Nothing logged
	// carries an environment value.
	Logger *slog.Logger
	// ExtraHosts are added to every container's /etc/hosts ("name:ip";
	// "name:host-gateway" is the host). Default none.
	ExtraHosts []string
	// Network is the network every container joins; "" is the engine's
	// default bridge. NewDocker checks it exists, and creates
	// IsolatedNetwork if that is the one named and it is missing.
	Network string
	// LogMaxSize caps each container's log file when the engine's log
	// driver is json-file or local (3 files are kept): "" means "10m",
	// "-" leaves the engine's own setting. Other drivers are left alone.
	LogMaxSize string
	// PingTimeout bounds NewDocker's first contact with the engine; 0
	// means 10s.
	PingTimeout time.Duration
	// EngineTimeout bounds every later call to the engine that answers
	// once (inspect, create, start, remove, pause, exec create and
	// start, ...; a stop gets its grace period on top), and the start of
	// an exec (Exec's watchdog: a command the engine has not started by
	// then is given up). 0 means DefaultEngineTimeout (1m). A call that
	// outlives it fails with ErrEngineTimeout and is listed by Stalls.
	EngineTimeout time.Duration
	// OnStep, if set, is called as Start passes each step: "created"
	// (the engine created the container) and "started" (it runs, before
	// readiness); and as Exec does: "exec-created" (the engine made the
	// exec, not yet started) and "exec-started" (its command is being
	// started or runs). Crash tests stop the daemon there.
	OnStep func(step string)
}

// Docker is the Runtime on the Docker Engine API. It is safe for
// concurrent use.
type Docker struct {
	onStep     func(string)
	api        engine
	host       string
	log        *slog.Logger
	extraHosts []string
	network    string
	logConfig  container.LogConfig
	ncpu       int
	engineOS   string // the engine's OperatingSystem ("Docker Desktop", ...)
	// cpuCapLogged: prepare logged that it capped the CPU limit (once).
	cpuCapLogged atomic.Bool
	cgroup       string // "1" or "2"
	httpc        *http.Client
	pulls        pulls
	// engineTimeout is DockerOptions.EngineTimeout with its default;
	// stalls are the calls given up on.
	engineTimeout time.Duration
	stalls        StallLog
}

var _ Runtime = (*Docker)(nil)

// NewDocker connects to the engine and checks it answers. An engine that
// does not answer gives an error wrapping ErrEngineUnavailable that names
// the address and the ways out.
func NewDocker(ctx context.Context, opts DockerOptions) (*Docker, error) {
	copts := []client.Opt{client.FromEnv}
	if opts.Host != "" {
		copts = append(copts, client.WithHost(opts.Host))
	}
	c, err := client.New(copts...)
	if err != nil {
		return nil, fmt.Errorf("docker runtime: %w: %w", ErrEngineUnavailable, err)
	}
	d, err := newDocker(ctx, c, opts)
	if err != nil {
		c.Close()
		return nil, err
	}
	return d, nil
}

func newDocker(ctx context.Context, api engine, opts DockerOptions) (*Docker, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	timeout := opts.PingTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	d := &Docker{
		onStep:     opts.OnStep,
		host:       api.DaemonHost(),
		log:        log,
		extraHosts: slices.Clone(opts.ExtraHosts),
		network:    opts.Network,
		ncpu:       0,
		httpc: &http.Client{
			// Health checks go straight to 127.0.0.1: no proxy from the
			// environment, no pooled connections, no redirects followed.
			Transport: &http.Transport{
				Proxy:             nil,
				DisableKeepAlives: true,
				DialContext:       (&net.Dialer{Timeout: time.Second}).DialContext,
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
	d.engineTimeout = opts.EngineTimeout
	if d.engineTimeout <= 0 {
		d.engineTimeout = DefaultEngineTimeout
	}
	d.api = &bounded{engine: api, timeout: d.engineTimeout, stalls: &d.stalls, log: log}
	api = d.api
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := api.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		return nil, fmt.Errorf("docker runtime: %w: no Docker engine answers at %s (%v); "+
			"start Docker (or point DOCKER_HOST at a running engine), or run ohd with --runtime local (no containers)",
			ErrEngineUnavailable, d.host, err)
	}
	if d.network != "" {
		if err := d.ensureNetwork(pctx, d.network); err != nil {
			return nil, err
		}
	}
	info, err := api.Info(pctx, client.InfoOptions{})
	if err != nil {
		// Info only tunes defaults; a failure here is not fatal.
		log.Warn("docker runtime: engine info unavailable; using conservative defaults", "host", d.host, "err", err)
	} else {
		d.ncpu = info.Info.NCPU
		d.engineOS = info.Info.OperatingSystem
		d.cgroup = info.Info.CgroupVersion
		d.logConfig = logConfigFor(info.Info.LoggingDriver, opts.LogMaxSize)
		if d.logConfig.Config == nil && opts.LogMaxSize != "-" {
			log.Warn("docker runtime: the engine's log driver has no size cap ohd can set; container logs are not capped by ohd",
				"driver", info.Info.LoggingDriver)
		}
		log.Debug("docker runtime: connected", "host", d.host, "api", api.ClientVersion(),
			"server", info.Info.ServerVersion, "cgroup", info.Info.CgroupVersion,
			"storage", info.Info.Driver, "log_driver", info.Info.LoggingDriver)
	}
	return d, nil
}

// logConfigFor caps the log files of the drivers that support it.
func logConfigFor(driver, maxSize string) container.LogConfig {
	if maxSize == "-" {
		return container.LogConfig{}
	}
	if maxSize == "" {
		maxSize = "10m"
	}
	switch driver {
	case "json-file", "local":
		return container.LogConfig{Type: driver, Config: map[string]string{"max-size": maxSize, "max-file": "3"}}
	}
	return container.LogConfig{}
}

// Kind returns "docker".
func (d *Docker) Kind() string { return "docker" }

// Host returns the engine's address.
func (d *Docker) Host() string { return d.host }

// Close releases the engine connection.
func (d *Docker) Close() error {
	d.httpc.CloseIdleConnections()
	return d.api.Close()
}

// Ping checks the engine answers.
func (d *Docker) Ping(ctx context.Context) error {
	if _, err := d.api.Ping(ctx, client.PingOptions{}); err != nil {
		return d.wrap("ping engine", d.host, err)
	}
	return nil
}

// wrap turns an engine error into "op obj: cause", wrapping the runtime's
// sentinels where one applies.
func (d *Docker) wrap(op, obj string, err error) error {
	if client.IsErrConnectionFailed(err) {
		// The engine went away after start-up: say so in ohd's words, not
		// the client library's.
		return fmt.Errorf("%s %s: %w: the Docker engine at %s does not answer; live conversations keep running, new ones wait for it: start Docker (or fix DOCKER_HOST)", op, obj, ErrEngineUnavailable, d.host)
	}
	return fmt.Errorf("%s %s: %w", op, obj, classify(err))
}

// classify wraps the runtime's sentinel that applies to an engine error.
func classify(err error) error {
	switch {
	case client.IsErrConnectionFailed(err):
		return fmt.Errorf("%w: %w", ErrEngineUnavailable, err)
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

func (d *Docker) step(name string) {
	if d.onStep != nil {
		d.onStep(name)
	}
}

// containerConfig builds the engine's create request for s (defaults
// applied). Every setting here is visible in docker inspect.
func (d *Docker) containerConfig(s Spec) (*container.Config, *container.HostConfig) {
	port := innerPort(s.InnerPort)
	labels := make(map[string]string, len(s.Labels)+3)
	for k, v := range s.Labels {
		labels[k] = v
	}
	labels[LabelServer] = s.ServerID
	labels[LabelConversation] = s.ConversationID
	labels[LabelInnerPort] = strconv.Itoa(s.InnerPort)
	if s.NoNetwork {
		labels[LabelNetwork] = "none"
	}

	cfg := &container.Config{
		Image:        s.Image,
		Hostname:     HostnameOf(s.ConversationID),
		User:         fmt.Sprintf("%d:%d", s.UID, s.GID),
		Env:          slices.Clone(s.Env),
		Entrypoint:   slices.Clone(s.Entrypoint),
		Cmd:          slices.Clone(s.Cmd),
		WorkingDir:   s.WorkingDir,
		Labels:       labels,
		ExposedPorts: network.PortSet{port: {}},
	}

	mounts := make([]mount.Mount, 0, len(s.Mounts))
	for _, m := range s.Mounts {
		mounts = append(mounts, mount.Mount{
			Type:     mount.TypeBind,
			Source:   m.Source,
			Target:   m.Target,
			ReadOnly: m.ReadOnly,
			BindOptions: &mount.BindOptions{
				// rprivate: nothing mounted later on either side
				// propagates to the other. NonRecursive: host mounts below
				// Source stay invisible, so ReadOnly holds for everything
				// the container sees there (engines before 25 do not make
				// submounts read-only).
				Propagation:  mount.PropagationRPrivate,
				NonRecursive: true,
			},
		})
	}

	pids := s.Resources.PidsLimit
	hc := &container.HostConfig{
		Mounts:       mounts,
		PortBindings: network.PortMap{port: {{HostIP: netip.AddrFrom4([4]byte{127, 0, 0, 1}), HostPort: ""}}},
		NetworkMode:  container.NetworkMode(d.network),
		// ohd owns the lifecycle: an engine restart policy would bring a
		// container back behind ohd's back (after a crash loop, after ohd
		// stopped an idle conversation, or at engine start before ohd has
		// reconciled) and could race with Remove.
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		// ohd reads the logs of a failed start before removing it.
		AutoRemove:     false,
		LogConfig:      d.logConfig,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		Privileged:     false,
		IpcMode:        container.IPCModePrivate,
		ReadonlyRootfs: s.ReadOnlyRootfs,
		ExtraHosts:     slices.Clone(d.extraHosts),
		Init:           new(true),
		Resources: container.Resources{
			Memory: s.Resources.MemoryBytes,
			// Memory+swap equal to memory: no swap beyond the limit.
			MemorySwap: s.Resources.MemoryBytes,
			NanoCPUs:   s.Resources.NanoCPUs,
			PidsLimit:  &pids,
		},
	}
	if s.NoNetwork {
		// Loopback only: the broker socket is the way out, and ohd
		// reaches the inner server inside the namespace.
		cfg.ExposedPorts, hc.PortBindings, hc.ExtraHosts = nil, nil, nil
		hc.NetworkMode = container.NetworkMode("none")
	}
	if s.ReadOnlyRootfs {
		// exec: agents build and run programs under /tmp (go test does).
		hc.Tmpfs = map[string]string{"/tmp": fmt.Sprintf("rw,exec,nosuid,nodev,size=%d,mode=1777", s.TmpSize)}
	}
	return cfg, hc
}

func innerPort(p int) network.Port {
	port, _ := network.PortFrom(uint16(p), network.TCP)
	return port
}

// prepare applies the defaults to s and checks it.
func (d *Docker) prepare(s Spec) (Spec, error) {
	s = s.withDefaults()
	// The engine refuses more CPUs than the host has, so a limit above
	// them (the default 2 on a 1-CPU host, or a configured one) becomes
	// the host's count rather than a failed create.
	if host := int64(d.ncpu) * 1_000_000_000; d.ncpu > 0 && s.Resources.NanoCPUs > host {
		if d.log != nil && !d.cpuCapLogged.Swap(true) {
			d.log.Info("docker runtime: the container CPU limit is above the engine's CPU count; using the engine's count",
				"cpus", float64(s.Resources.NanoCPUs)/1e9, "engine_cpus", d.ncpu)
		}
		s.Resources.NanoCPUs = host
	}
	return s, s.validate()
}

// Start creates the container for s, starts it and waits until its health
// check answers 200. On any failure it removes the container (with a
// context the caller's cancellation does not reach) and returns a
// *StartError with the tail of the container's output.
func (d *Docker) Start(ctx context.Context, s Spec) (Instance, error) {
	s, err := d.prepare(s)
	name := ContainerName(s.ConversationID)
	if err != nil {
		return Instance{}, fmt.Errorf("start container %s: %w", name, err)
	}
	cfg, hc := d.containerConfig(s)

	var inst Instance
	inst.Name = name
	t0 := time.Now()
	res, err := d.api.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Config: cfg, HostConfig: hc})
	inst.Timings.Create = time.Since(t0)
	if err != nil {
		if ctx.Err() != nil {
			// The engine may have created it after we stopped waiting.
			d.removeLeftover(ctx, name, s)
		}
		return Instance{}, &StartError{Step: StepCreate, Name: name, Err: d.createError(s.Image, err)}
	}
	inst.ContainerID = res.ID
	d.step("created")
	for _, w := range res.Warnings {
		d.log.Warn("docker runtime: engine warning on create", "container", name, "warning", w)
	}

	t1 := time.Now()
	port, _, err := d.startAndPort(ctx, res.ID, s.InnerPort)
	inst.Timings.Start = time.Since(t1)
	if err != nil {
		return Instance{}, d.failStart(ctx, startStep(err), name, res.ID, err, true)
	}
	inst.HostPort, inst.NoNetwork = port, s.NoNetwork
	inst.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	d.step("started")

	t2 := time.Now()
	err = d.waitReady(ctx, res.ID, inst.Addr, s, s.NoNetwork)
	inst.Timings.Ready = time.Since(t2)
	if err != nil {
		return Instance{}, d.failStart(ctx, StepReady, name, res.ID, err, true)
	}
	d.log.Debug("docker runtime: container ready", "container", name, "id", shortID(res.ID), "port", port,
		"create", inst.Timings.Create, "start", inst.Timings.Start, "ready", inst.Timings.Ready)
	return inst, nil
}

// Restart starts the existing container id again (an idle conversation
// coming back), reads its port back (it may differ from before the stop)
// and waits until it is ready. Of s only the readiness fields matter:
// HealthPath and ReadyTimeout (defaults as for Start), and InnerPort (0
// means the port recorded in the container's dev.ohd.inner-port label);
// the container keeps the settings it was created with. On failure the
// container is stopped, not removed: the caller decides whether to
// re-create it.
func (d *Docker) Restart(ctx context.Context, id string, s Spec) (Instance, error) {
	inner := s.InnerPort
	s = s.withDefaults()
	name := shortID(id)
	if err := s.validateReadiness(); err != nil {
		return Instance{}, fmt.Errorf("restart container %s: %w", name, err)
	}
	inst := Instance{ContainerID: id, Name: name}
	t1 := time.Now()
	port, ins, err := d.startAndPort(ctx, id, inner)
	inst.Timings.Start = time.Since(t1)
	inst.NoNetwork = ins.NoNetwork
	if ins.Name != "" {
		inst.Name = ins.Name
	}
	if ins.ID != "" {
		id, inst.ContainerID = ins.ID, ins.ID
	}
	if err != nil {
		return Instance{}, d.failStart(ctx, startStep(err), inst.Name, id, err, false)
	}
	inst.HostPort = port
	inst.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	t2 := time.Now()
	err = d.waitReady(ctx, id, inst.Addr, s, inst.NoNetwork)
	inst.Timings.Ready = time.Since(t2)
	if err != nil {
		return Instance{}, d.failStart(ctx, StepReady, inst.Name, id, err, false)
	}
	return inst, nil
}

// startAndPort starts the container (a running one is left as is) and
// reads back the host port the engine published innerPort on (0: the
// port of the container's dev.ohd.inner-port label, else 8000). It also
// returns the container's ID and name once known.
func (d *Docker) startAndPort(ctx context.Context, id string, innerPort int) (int, Container, error) {
	if _, err := d.api.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		return 0, Container{}, classify(err)
	}
	res, err := d.api.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return 0, Container{}, d.wrap("inspect", shortID(id), err)
	}
	ci := res.Container
	c := Container{ID: ci.ID, Name: strings.TrimPrefix(ci.Name, "/")}
	if ci.Config != nil {
		c.NoNetwork = ci.Config.Labels[LabelNetwork] == "none"
		c.WorkingDir = ci.Config.WorkingDir
	}
	if innerPort == 0 && ci.Config != nil {
		innerPort, _ = strconv.Atoi(ci.Config.Labels[LabelInnerPort])
	}
	if innerPort <= 0 || innerPort > 65535 {
		innerPort = DefaultInnerPort
	}
	if st := ci.State; st != nil && !st.Running {
		return 0, c, fmt.Errorf("%w with code %d right after start", ErrExited, st.ExitCode)
	}
	if c.NoNetwork {
		return innerPort, c, nil
	}
	port := publishedPort(ci.NetworkSettings, innerPort)
	if port == 0 {
		return 0, c, fmt.Errorf("inspect %s: the engine published no host port for %d/tcp", shortID(id), innerPort)
	}
	return port, c, nil
}

// startStep names the step a startAndPort error belongs to: a container
// the engine started but whose program exited at once failed to become
// ready, like one that exits later.
func startStep(err error) string {
	if errors.Is(err, ErrExited) {
		return StepReady
	}
	return StepStart
}

// publishedPort is the host port bound on 127.0.0.1 for innerPort/tcp, or
// 0.
func publishedPort(ns *container.NetworkSettings, inner int) int {
	if ns == nil {
		return 0
	}
	for _, b := range ns.Ports[innerPort(inner)] {
		if b.HostIP.IsValid() && !b.HostIP.IsLoopback() {
			continue
		}
		if p, err := strconv.Atoi(b.HostPort); err == nil && p > 0 {
			return p
		}
	}
	return 0
}

// createError explains a failed create: a missing image (the container
// create does not pull: ResolveImage did, or the image went away since),
// a name already taken, or the engine's own message.
func (d *Docker) createError(image string, err error) error {
	switch {
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("%w: %s", ErrNotFound, imageHint(image))
	case cerrdefs.IsConflict(err):
		return fmt.Errorf("%w: %w", ErrConflict, err)
	}
	return classify(err)
}

// imageHint says how to get a missing image. The build command is the
// agent server's own (openhands.BuildCommand: its Dockerfile in a
// checkout of OpenHands/software-agent-sdk), since that is the image ohd
// runs; "docker build -t REF ." named a Dockerfile that was not there.
func imageHint(ref string) string {
	return fmt.Sprintf("image %q is not in the Docker engine: load it (where a registry answers: "+
		"docker pull %s && docker save %s > image.tar; here: docker load -i image.tar), build it (in a checkout of "+
		"github.com/OpenHands/software-agent-sdk at the release's tag: %s), "+
		"or pass --image with an image the engine has, then retry", ref, ref, ref, openhands.BuildCommand(ref))
}

// failStart collects the log tail of the failed container, then removes
// (Start) or stops (Restart) it, using a context the caller's cancellation
// does not reach.
func (d *Docker) failStart(ctx context.Context, step, name, id string, cause error, remove bool) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	e := &StartError{Step: step, Name: name, ContainerID: id, Err: cause}
	if ins, err := d.api.ContainerInspect(cctx, id, client.ContainerInspectOptions{}); err == nil && ins.Container.State != nil {
		st := ins.Container.State
		if !st.Running && st.Status != container.StateCreated {
			e.Exited, e.ExitCode, e.OOMKilled = true, st.ExitCode, st.OOMKilled
		}
	}
	e.LogTail = d.logTail(cctx, id, 20)
	if remove {
		if err := d.Remove(cctx, id); err != nil {
			d.log.Warn("docker runtime: removing a failed container", "container", name, "err", err)
		} else {
			e.Removed = true
		}
	} else if err := d.Stop(cctx, id, 5*time.Second); err != nil && !errors.Is(err, ErrNotFound) {
		d.log.Warn("docker runtime: stopping a failed container", "container", name, "err", err)
	}
	return e
}

// removeLeftover removes the container named name if it is this
// conversation's (its labels say so): a create the caller gave up on.
func (d *Docker) removeLeftover(ctx context.Context, name string, s Spec) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	ins, err := d.api.ContainerInspect(cctx, name, client.ContainerInspectOptions{})
	if err != nil || ins.Container.Config == nil {
		return
	}
	l := ins.Container.Config.Labels
	if l[LabelServer] == s.ServerID && l[LabelConversation] == s.ConversationID {
		if err := d.Remove(cctx, ins.Container.ID); err != nil {
			d.log.Warn("docker runtime: removing an abandoned container", "container", name, "err", err)
		}
	}
}

// logTail returns the last n lines of the container's output (stdout
// and stderr interleaved), at most 8 KiB; "" if there is none.
func (d *Docker) logTail(ctx context.Context, id string, n int) string {
	rc, err := d.api.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: strconv.Itoa(n)})
	if err != nil {
		return ""
	}
	defer rc.Close()
	var w tailWriter
	_ = demux(&w, &w, rc)
	return w.String()
}

// tailWriter keeps the last 8 KiB written to it.
type tailWriter struct{ b []byte }

const tailMax = 8 << 10

func (w *tailWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	if len(w.b) > tailMax {
		w.b = w.b[len(w.b)-tailMax:]
	}
	return len(p), nil
}

func (w *tailWriter) String() string { return strings.ToValidUTF8(string(w.b), "\uFFFD") }

// Stop stops the container: SIGTERM (or the image's stop signal), then
// SIGKILL after timeout (rounded up to whole seconds).
func (d *Docker) Stop(ctx context.Context, id string, timeout time.Duration) error {
	secs := int((timeout + time.Second - 1) / time.Second)
	if _, err := d.api.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &secs}); err != nil {
		return d.wrap("stop container", shortID(id), err)
	}
	return nil
}

// Remove force-removes the container (killing it if it runs) with its
// anonymous volumes. A container that is already gone, or whose removal is
// already under way, is no error.
func (d *Docker) Remove(ctx context.Context, id string) error {
	_, err := d.api.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	switch {
	case err == nil, cerrdefs.IsNotFound(err):
		return nil
	case cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "already in progress"):
		return nil
	}
	return d.wrap("remove container", shortID(id), err)
}

// Inspect describes the container id (an ID or a name).
func (d *Docker) Inspect(ctx context.Context, id string) (Container, error) {
	res, err := d.api.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return Container{}, d.wrap("inspect container", shortID(id), err)
	}
	ci := res.Container
	c := Container{ID: ci.ID, Name: strings.TrimPrefix(ci.Name, "/"), ImageID: ci.Image}
	if ci.Config != nil {
		c.ServerID = ci.Config.Labels[LabelServer]
		c.ConversationID = ci.Config.Labels[LabelConversation]
		c.Role = ci.Config.Labels[LabelRole]
		c.NoNetwork = ci.Config.Labels[LabelNetwork] == "none"
		if p, err := strconv.Atoi(ci.Config.Labels[LabelInnerPort]); err == nil {
			c.HostPort = publishedPort(ci.NetworkSettings, p)
			if c.NoNetwork {
				c.HostPort = p
			}
		}
	}
	if st := ci.State; st != nil {
		c.Running, c.State = st.Running, string(st.Status)
		c.ExitCode, c.OOMKilled = st.ExitCode, st.OOMKilled
		c.PID = st.Pid
	}
	if !c.Running {
		c.HostPort, c.PID = 0, 0
	}
	if ci.HostConfig != nil {
		c.Mounts = []Mount{}
		for _, m := range ci.HostConfig.Mounts {
			if m.Type == mount.TypeBind {
				c.Mounts = append(c.Mounts, Mount{Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
			}
		}
	}
	return c, nil
}

// Archive reads the file or directory at path in container id (running
// or not) as a tar archive, through the Engine API's archive endpoint (GET
// /containers/{id}/archive): its entries are named after path's base
// name. A missing path or container is ErrNotFound. The archive holds
// what the container's processes wrote: read it as hostile (package
// safetar).
func (d *Docker) Archive(ctx context.Context, id, path string) (io.ReadCloser, error) {
	res, err := d.api.CopyFromContainer(ctx, id, client.CopyFromContainerOptions{SourcePath: path})
	if err != nil {
		return nil, d.wrap("read "+path+" of container", shortID(id), err)
	}
	return res.Content, nil
}

// List returns every container (running or not) labelled with serverID.
func (d *Docker) List(ctx context.Context, serverID string) ([]Container, error) {
	if serverID == "" {
		return nil, fmt.Errorf("list containers: %w: server id is empty", ErrInvalidSpec)
	}
	res, err := d.api.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", LabelServer+"="+serverID),
	})
	if err != nil {
		return nil, d.wrap("list containers of server", serverID, err)
	}
	out := make([]Container, 0, len(res.Items))
	for _, s := range res.Items {
		c := Container{
			ID:             s.ID,
			ServerID:       s.Labels[LabelServer],
			ConversationID: s.Labels[LabelConversation],
			Role:           s.Labels[LabelRole],
			State:          string(s.State),
			Running:        s.State == container.StateRunning,
			ImageID:        s.ImageID,
		}
		if len(s.Names) > 0 {
			c.Name = strings.TrimPrefix(s.Names[0], "/")
		}
		c.NoNetwork = s.Labels[LabelNetwork] == "none"
		if p, err := strconv.Atoi(s.Labels[LabelInnerPort]); err == nil && c.Running && c.NoNetwork {
			c.HostPort = p
		} else if err == nil && c.Running {
			for _, ps := range s.Ports {
				if int(ps.PrivatePort) == p && ps.Type == "tcp" && ps.PublicPort != 0 && (!ps.IP.IsValid() || ps.IP.IsLoopback()) {
					c.HostPort = int(ps.PublicPort)
					break
				}
			}
		}
		if c.ServerID != serverID {
			continue // the engine filtered; this guards a filter it ignored
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Container) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Logs copies the container's output to stdout and stderr (nil discards
// one). With follow it keeps copying until the container stops or ctx
// ends (which is no error).
func (d *Docker) Logs(ctx context.Context, id string, follow bool, stdout, stderr io.Writer) error {
	rc, err := d.api.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Follow: follow})
	if err != nil {
		return d.wrap("logs of container", shortID(id), err)
	}
	defer rc.Close()
	if err := demux(stdout, stderr, rc); err != nil {
		if follow && ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("logs of container %s: %w", shortID(id), err)
	}
	return nil
}

func shortID(id string) string {
	if len(id) > 12 && !strings.HasPrefix(id, "ohd-") {
		return id[:12]
	}
	return id
}
