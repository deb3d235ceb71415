package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/conversation"
	"github.com/ohd-dev/ohd/pkg/egress"
	"github.com/ohd-dev/ohd/pkg/failpoint"
	"github.com/ohd-dev/ohd/pkg/masterkey"
	"github.com/ohd-dev/ohd/pkg/metrics"
	"github.com/ohd-dev/ohd/pkg/peercred"
	"github.com/ohd-dev/ohd/pkg/proxy"
	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/sdnotify"
	"github.com/ohd-dev/ohd/pkg/store"
	"github.com/ohd-dev/ohd/pkg/version"
	"github.com/ohd-dev/ohd/pkg/worktree"
)

// Daemon is a running ohd. Build it with Start; stop it by cancelling the
// context given to Start and calling Wait.
type Daemon struct {
	cfg    Config
	log    *slog.Logger
	key    *masterkey.Key
	store  *store.Store
	mgr    *conversation.Manager
	wt     *worktree.Manager
	br     *broker.Broker
	rt     runtime.Runtime
	egress string // store.EgressBroker or store.EgressOpen for new containers; "" for the local runtime
	lock   *os.File

	metrics        *metrics.Metrics
	keysConfigured bool // the API keys were given, not generated

	control   net.Listener
	api       net.Listener
	activated map[string][]net.Listener
	proxy     *proxy.Server
	cancel    context.CancelFunc // ends every goroutine Start began
	wg        sync.WaitGroup
	errc      chan error
}

// NewLogger returns the daemon's logger for format ("text" or "json") and
// level, writing to w.
func NewLogger(w io.Writer, format, level string) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// Run starts the daemon, serves until ctx ends, and shuts down cleanly.
// ready, if non-nil, is called once everything serves.
func Run(ctx context.Context, cfg Config, log *slog.Logger, ready func(*Daemon)) error {
	d, err := Start(ctx, cfg, log)
	if err != nil {
		return err
	}
	if _, err := sdnotify.Ready(); err != nil {
		log.Warn("could not tell systemd the daemon is ready", "err", err)
	}
	_, _ = sdnotify.Status(fmt.Sprintf("serving: runtime %s, %d conversations", d.rt.Kind(), len(d.store.Conversations())))
	if ready != nil {
		ready(d)
	}
	return d.Wait(ctx)
}

// Start prepares the directories, takes the state lock, opens the store,
// reconciles and starts serving. Its error says what to do.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (_ *Daemon, err error) {
	if err := cfg.Defaults(); err != nil {
		return nil, usageError{err}
	}
	if err := cfg.Validate(); err != nil {
		return nil, usageError{err}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Secrets live in this process's memory: no core dumps, no ptrace by
	// other processes of the same uid.
	notDumpable()

	ctx, cancel := context.WithCancel(ctx)
	d := &Daemon{cfg: cfg, log: log, errc: make(chan error, 4), cancel: cancel}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	// The lock comes before any other side effect: a second daemon on
	// this state must change nothing.
	if err := os.MkdirAll(cfg.StateDir, 0o711); err != nil {
		return nil, fmt.Errorf("create %s: %w", cfg.StateDir, err)
	}
	if err := d.takeLock(); err != nil {
		return nil, err
	}
	// Sockets passed by systemd socket activation, by name; checked before
	// the directories are prepared. (close closes them on an error.)
	if d.activated, err = sdnotify.Listeners(); err != nil {
		return nil, err
	}
	if err := checkActivated(d.activated, cfg.Listen); err != nil {
		return nil, usageError{err}
	}
	if err := d.prepareDirs(); err != nil {
		return nil, err
	}
	// The engine is checked before the key or store is touched: a daemon
	// that cannot start changes nothing.
	if d.rt, err = d.selectRuntime(ctx); err != nil {
		return nil, err
	}
	if d.egress, err = d.selectEgress(); err != nil {
		return nil, err
	}
	if d.key, err = masterkey.Load(cfg.StateDir, cfg.Getenv); err != nil {
		return nil, err
	}
	if d.key.Created {
		log.Info("created a new master key; back it up with the state directory", "path", d.key.Source)
	}
	if d.store, err = store.Open(filepath.Join(cfg.StateDir, store.FileName), d.key, store.Options{Logger: log}); err != nil {
		return nil, err
	}
	if err := d.checkRuntimeFits(); err != nil {
		return nil, err
	}
	wt, err := worktree.New(worktree.Options{
		Root: cfg.WorktreeRoot, LockDir: filepath.Join(cfg.StateDir, "locks"), Logger: log,
		// A removed worktree's files are deleted in the background from
		// here (on the worktree root's filesystem by default).
		TrashDir: filepath.Join(cfg.StateDir, "trash"),
		Import:   cfg.ImportLimits, MaxTreeDepth: cfg.MaxTreeDepth,
		OnStep: func(step string) { failpoint.Hit(worktreeFailpoints[step]) },
	})
	if err != nil {
		return nil, err
	}
	d.wt = wt
	for _, a := range cfg.EgressAllow {
		if dest, err := egress.ParseDest(a); err == nil {
			if h := egress.LoopbackHint(dest); h != "" {
				log.Warn("--egress-allow: " + h)
			}
		}
	}
	d.metrics = metrics.New(metrics.Options{Version: version.Version, Logger: log, Conversations: d.countByState})
	d.br, err = broker.New(broker.Options{
		RuntimeDir: cfg.RuntimeDir, Key: d.key.Derive("ohd-broker-key-v1"),
		Backend: conversation.Backend{Store: d.store, Metrics: d.metrics}, Logger: log,
		Limits: cfg.BrokerLimits, EgressAllow: cfg.EgressAllow,
	})
	if err != nil {
		return nil, err
	}
	d.mgr, err = conversation.New(conversation.Config{
		Store: d.store, Worktrees: wt, Broker: d.br, Runtime: d.rt, RuntimeDir: cfg.RuntimeDir,
		Image: cfg.Image, HealthPath: cfg.HealthPath, ReadyTimeout: cfg.ReadyTimeout,
		Resources:      runtime.Resources{MemoryBytes: cfg.MemoryBytes, NanoCPUs: cfg.NanoCPUs, PidsLimit: cfg.PidsLimit},
		ReadOnlyRootfs: cfg.ReadOnlyRootfs, ForwardEnv: cfg.ForwardEnv, Getenv: cfg.Getenv,
		InnerRoot: filepath.Join(cfg.StateDir, "inner"), InnerEnv: cfg.InnerEnv, Egress: d.egress,
		Helper: cfg.Helper, HelperDir: filepath.Join(cfg.StateDir, "bin"), IdleTimeout: cfg.IdleTimeout, Logger: log,
		Metrics: d.metrics, OnStep: d.observeStep, Protected: d.protectedPaths(),
		AgentUID: cfg.AgentUID, AgentGID: cfg.AgentGID, KeptRoot: filepath.Join(cfg.StateDir, "kept"),
	})
	if err != nil {
		return nil, err
	}
	d.checkImage(ctx)
	if err := d.mgr.Reconcile(ctx); err != nil {
		// Keep serving: one broken conversation must not take every other
		// one down. The log and `ohctl doctor` say what is wrong.
		log.Error("reconcile incomplete", "err", err)
	}
	if err := d.listenControl(); err != nil {
		return nil, err
	}
	if err := d.listenAPI(); err != nil {
		return nil, err
	}
	if err := d.listenMetrics(ctx); err != nil {
		return nil, err
	}
	d.serve(ctx)
	listen := "off"
	if d.api != nil {
		listen = d.api.Addr().String()
	}
	log.Info("ohd serving", "version", version.Version, "state_dir", cfg.StateDir,
		"control_socket", d.control.Addr().String(), "listen", listen, "socket_activated", len(d.activated) > 0,
		"runtime", d.rt.Kind(), "egress", d.egress, "server_id", d.store.ServerID())
	return d, nil
}

// checkActivated refuses sockets systemd passed that ohd would not serve:
// systemd keeps such a socket open, so its clients would wait for ever
// instead of being refused.
func checkActivated(activated map[string][]net.Listener, listen string) error {
	names := slices.Sorted(maps.Keys(activated))
	for _, name := range names {
		l := activated[name]
		var addrs []string
		for _, ln := range l {
			addrs = append(addrs, ln.Addr().String())
		}
		switch {
		case name != sdnotify.NameControl && name != sdnotify.NameAPI:
			return fmt.Errorf("socket activation: systemd passed a socket named %q (%s), which ohd does not serve: set FileDescriptorName=%s or %s in its .socket unit, or take Service=ohd.service out of it",
				name, strings.Join(addrs, ", "), sdnotify.NameControl, sdnotify.NameAPI)
		case len(l) > 1:
			return fmt.Errorf("socket activation: systemd passed %d sockets named %q (%s); ohd serves one: keep a single ListenStream= in that .socket unit",
				len(l), name, strings.Join(addrs, ", "))
		case name == sdnotify.NameAPI && listen == "off":
			return fmt.Errorf("socket activation: systemd passed the conversation API socket (%s) but --listen is off: disable ohd-api.socket, or drop --listen off (OHD_LISTEN)", addrs[0])
		}
	}
	return nil
}

// prepareDirs creates the state and runtime directories. The state dir is
// 0711: the worktree root lives inside it by default, and the users whose
// worktrees it holds must be able to reach them; everything secret in it
// is 0600 or 0700 itself.
func (d *Daemon) prepareDirs() error {
	for _, dir := range []string{d.cfg.StateDir, d.cfg.RuntimeDir, filepath.Join(d.cfg.RuntimeDir, "conversations")} {
		if err := os.MkdirAll(dir, 0o711); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
		if err := os.Chmod(dir, 0o711); err != nil {
			return fmt.Errorf("chmod %s: %w", dir, err)
		}
	}
	return os.MkdirAll(filepath.Dir(d.cfg.ControlSocket), 0o711)
}

// takeLock holds <state-dir>/ohd.lock for the daemon's life, so a second
// daemon on the same state refuses to start instead of corrupting it.
func (d *Daemon) takeLock() error {
	path := filepath.Join(d.cfg.StateDir, "ohd.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b, _ := io.ReadAll(f)
		f.Close()
		holder := strings.TrimSpace(string(b))
		if holder == "" {
			holder = "unknown"
		}
		return fmt.Errorf("another ohd (pid %s) is already running on state directory %s: stop it first, or pass another --state-dir", holder, d.cfg.StateDir)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	d.lock = f
	return nil
}

func (d *Daemon) selectRuntime(ctx context.Context) (runtime.Runtime, error) {
	opts := runtime.DockerOptions{Logger: d.log, Network: d.cfg.Network, EngineTimeout: d.cfg.EngineTimeout, OnStep: func(step string) { failpoint.Hit(dockerFailpoints[step]) }}
	switch d.cfg.Runtime {
	case "local":
		return runtime.NewLocal(), nil
	case "docker":
		rt, err := runtime.NewDocker(ctx, opts)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return rt, nil
	case "kubernetes":
		return d.kubeRuntime(ctx)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rt, err := runtime.NewDocker(pctx, opts)
	if err != nil {
		d.log.Warn("Docker engine not reachable: using the local runtime (no containers); pass --runtime docker to require it", "err", err)
		return runtime.NewLocal(), nil
	}
	return rt, nil
}

// selectEgress decides the egress mode of new containers: broker needs a
// runtime whose containers' network namespaces ohd can enter (a container
// without network is reached only there); auto picks it where it can,
// else open with a warning.
func (d *Daemon) selectEgress() (string, error) {
	if d.rt.Kind() == "local" {
		return "", nil
	}
	if d.cfg.Egress == store.EgressOpen {
		return store.EgressOpen, nil
	}
	var err error
	if p, ok := d.rt.(interface{ ProbeNetns() error }); ok {
		err = p.ProbeNetns()
	} else {
		err = fmt.Errorf("%w: the %s runtime", runtime.ErrNetnsUnavailable, d.rt.Kind())
	}
	switch {
	case err == nil:
		return store.EgressBroker, nil
	case d.cfg.Egress == store.EgressBroker:
		return "", fmt.Errorf("--egress broker: %w; use --egress open (containers keep the engine's network)", err)
	}
	d.log.Warn("containers keep the engine's network (--egress open): ohd cannot enter their network namespaces, so the broker cannot be their only way out", "why", err)
	return store.EgressOpen, nil
}

// checkRuntimeFits refuses a local runtime (chosen by auto because the
// engine did not answer) when live conversations run in containers: their
// containers could not be stopped or removed, and reconcile could not see
// them.
func (d *Daemon) checkRuntimeFits() error {
	if d.rt.Kind() != "local" {
		return nil
	}
	for _, c := range d.store.Conversations() {
		if c.State.Live() && c.Runtime != "local" {
			return fmt.Errorf("the Docker engine does not answer, and conversation %s (and maybe others) runs in a container: start Docker, then ohd; or end those conversations first", c.ID)
		}
	}
	return nil
}

// listenControl opens the control socket, 0600. A stale socket file left
// by a crash is replaced; a live one (another daemon with another state
// dir) is an error.
func (d *Daemon) listenControl() error {
	if ln := d.takeActivated(sdnotify.NameControl); ln != nil {
		d.control = ln
		return nil
	}
	path := d.cfg.ControlSocket
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("control socket %s is in use by another process: stop it, or pass another --control-socket", path)
	}
	_ = os.Remove(path)
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return fmt.Errorf("listen on control socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return err
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	d.control = ln
	return nil
}

// protectedPaths are what no workspace may overlap: ohd's directories, the
// master key, the credentials directory, and the Docker engine's socket
// (a container with it is root on the host).
func (d *Daemon) protectedPaths() []string {
	p := []string{d.cfg.StateDir, d.cfg.RuntimeDir, d.cfg.WorktreeRoot, filepath.Dir(d.cfg.ControlSocket),
		d.key.Source, "/var/run/docker.sock", "/run/docker.sock"}
	if dir := d.cfg.Getenv("CREDENTIALS_DIRECTORY"); dir != "" {
		p = append(p, dir)
	}
	if h, ok := strings.CutPrefix(d.cfg.Getenv("DOCKER_HOST"), "unix://"); ok {
		p = append(p, h)
	}
	return p
}

// countByState counts conversations per state for the metrics gauge, at
// scrape time, so it can never drift from the records.
func (d *Daemon) countByState() map[string]int {
	n := map[string]int{}
	for _, c := range d.store.Conversations() {
		n[string(c.State)]++
	}
	return n
}

// observeStep turns the orchestrator's step timings into the create
// latency histogram (removal steps are not part of it).
func (d *Daemon) observeStep(_, step string, dur time.Duration) {
	switch {
	case step == "create_total":
		d.metrics.ObserveCreateStep("total", dur)
	case !strings.HasPrefix(step, "remove_"):
		d.metrics.ObserveCreateStep(step, dur)
	}
}

// listenMetrics serves the metrics without a key on a loopback address
// (--metrics-listen), for a Prometheus that cannot send the API key.
func (d *Daemon) listenMetrics(ctx context.Context) error {
	if d.cfg.MetricsListen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", d.cfg.MetricsListen)
	if err != nil {
		return fmt.Errorf("listen on %s for metrics: %w", d.cfg.MetricsListen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", d.metrics.Handler())
	d.goServe(ctx, "metrics", &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, ln)
	return nil
}

// listenAPI opens the conversation API listener with its keys: the
// configured ones, or the one generated into <state-dir>/session-api-key.
func (d *Daemon) listenAPI() error {
	if d.cfg.Listen == "off" {
		return nil // checkActivated refused a passed API socket
	}
	keys, err := d.sessionKeys()
	if err != nil {
		return err
	}
	opts := proxy.Options{
		Conversations: d.mgr, Keys: keys, AllowRemote: d.keysConfigured, Logger: d.log,
		Observer: d.metrics.ProxyObserver(), Metrics: d.metrics.Handler(), Secrets: d.store,
	}
	if err := d.upstreamOptions(&opts); err != nil {
		return err
	}
	p, err := proxy.New(opts)
	if err != nil {
		return err
	}
	ln := d.takeActivated(sdnotify.NameAPI)
	if ln == nil {
		if ln, err = net.Listen("tcp", d.cfg.Listen); err != nil {
			return fmt.Errorf("listen on %s for the conversation API: %w: pass another --listen, or --listen off", d.cfg.Listen, err)
		}
	}
	d.api, d.proxy = ln, p
	return nil
}

// sessionKeys returns the conversation API's accepted keys: those given
// (flags, a key file, or the systemd credential ohd-session-api-keys), or
// else the one generated at first start into <state-dir>/session-api-key.
func (d *Daemon) sessionKeys() ([][]byte, error) {
	var keys [][]byte
	for _, k := range d.cfg.SessionAPIKeys {
		keys = append(keys, []byte(k))
	}
	files := []string{}
	if d.cfg.SessionAPIKeyFile != "" {
		files = append(files, d.cfg.SessionAPIKeyFile)
	}
	if dir := d.cfg.Getenv("CREDENTIALS_DIRECTORY"); dir != "" {
		if p := filepath.Join(dir, "ohd-session-api-keys"); fileExists(p) {
			files = append(files, p)
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read session API keys: %w", err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if k := strings.TrimSpace(line); k != "" && !strings.HasPrefix(k, "#") {
				keys = append(keys, []byte(k))
			}
		}
	}
	d.keysConfigured = len(keys) > 0
	if len(keys) > 0 {
		return keys, nil
	}
	path := filepath.Join(d.cfg.StateDir, "session-api-key")
	key, created, err := proxy.LoadOrCreateKeyFile(path)
	if err != nil {
		return nil, err
	}
	if created {
		d.log.Info("generated the conversation API key; clients send it as X-Session-API-Key", "path", path)
	}
	return [][]byte{key}, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// takeActivated returns the listener systemd passed under name (the first
// one; ohd's units pass one of each), or nil.
func (d *Daemon) takeActivated(name string) net.Listener {
	l := d.activated[name]
	if len(l) == 0 {
		return nil
	}
	d.activated[name] = l[1:]
	return l[0]
}

func (d *Daemon) serve(ctx context.Context) {
	if d.proxy != nil {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			if err := d.proxy.Serve(ctx, d.api); err != nil && ctx.Err() == nil {
				d.errc <- fmt.Errorf("conversation API: %w", err)
			}
		}()
		// Reconcile has adopted the running conversations: their inner
		// servers forget what a fork interrupted by ohd's stop left there.
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.proxy.SweepForks(ctx)
		}()
	}
	srv := &http.Server{
		Handler:           d.controlHandler(),
		ConnContext:       peercred.ConnContext,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(d.log.Handler(), slog.LevelWarn),
	}
	d.goServe(ctx, "control", srv, d.control)
	d.wg.Add(4)
	go func() {
		defer d.wg.Done()
		if err := d.mgr.Watch(ctx); err != nil && ctx.Err() == nil {
			d.log.Error("engine events stopped", "err", err)
		}
	}()
	go func() {
		defer d.wg.Done()
		d.mgr.RunIdle(ctx)
	}()
	go func() {
		defer d.wg.Done()
		d.mgr.RunPublisher(ctx)
	}()
	go func() {
		defer d.wg.Done()
		d.mgr.RunUndoRetries(ctx)
	}()
}

// worktreeFailpoints names the failpoint of each step pkg/worktree reports
// (Options.OnStep).
var worktreeFailpoints = map[string]string{
	"view":     "create/mid-view",
	"snapshot": "delete/mid-snapshot",
	// A registration moved out of worktrees/, not yet deleted.
	"admin-moved": "delete/mid-admin",
	// The worktree's directory moved to the trash, its files not yet
	// deleted.
	"trashed": "delete/after-trash",
	"publish": "publish/after-import",
	// A restore: its journal written, its worktree added (not yet
	// checked out), the repository's stash cleared (not yet rebuilt).
	"restore":               "restore/after-journal",
	"restore-checkout":      "restore/mid-checkout",
	"restore-stash-cleared": "restore/mid-stash",
}

// dockerFailpoints names the failpoint of each step the Docker runtime
// reports (runtime.DockerOptions.OnStep), and the Kubernetes runtime of
// its start ("created", "started": kubernetes.Options.OnStep).
var dockerFailpoints = map[string]string{
	"created": "create/after-container-created",
	"started": "create/after-container-started",
	// Any exec: an agent's (ohctl exec) or ohd's own in the container
	// (its git view's helper, which a publish and a removal run).
	"exec-created": "exec/after-create",
	"exec-started": "exec/after-start",
}

// goServe runs srv on ln until ctx ends, then shuts it down gracefully.
func (d *Daemon) goServe(ctx context.Context, name string, srv *http.Server, ln net.Listener) {
	d.wg.Add(2)
	go func() {
		defer d.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.errc <- fmt.Errorf("%s server: %w", name, err)
		}
	}()
	go func() {
		defer d.wg.Done()
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			srv.Close()
		}
	}()
}

// Wait blocks until ctx ends (or a server fails) and shuts down: servers
// stop, broker sockets close (their directories stay for the next start),
// the store is flushed and closed. Containers keep running; the next
// start adopts them.
func (d *Daemon) Wait(ctx context.Context) error {
	var err error
	select {
	case <-ctx.Done():
	case err = <-d.errc:
	}
	d.log.Info("ohd shutting down")
	_, _ = sdnotify.Stopping()
	d.close()
	return err
}

// ShutdownBudget bounds a shutdown (SIGTERM to exit): systemd's stop
// timeout is 10 s, after which it kills ohd mid-save. Work still under
// way when it is spent (a call on a wedged container, a removal) is
// abandoned, not waited for: every step of it is recorded before it
// runs, and the next start finishes it.
const ShutdownBudget = 8 * time.Second

func (d *Daemon) close() {
	start := time.Now()
	d.cancel()
	if d.control != nil {
		d.control.Close()
	}
	if d.api != nil {
		d.api.Close() // Serve has closed it already, unless it never ran
	}
	done := make(chan struct{})
	go func() {
		d.wg.Wait()
		if d.wt != nil {
			d.wt.Wait() // removed worktrees' files still being deleted
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(ShutdownBudget - 2*time.Second):
		// Cancelled, but some work has not returned yet (an engine call
		// without an answer gives up only at its own deadline).
		d.log.Warn("shutdown: work still under way after its cancellation; exiting without it: the next start finishes it",
			"waited", time.Since(start).Round(time.Millisecond))
	}
	for _, l := range d.activated {
		for _, ln := range l {
			ln.Close() // passed but unused
		}
	}
	if d.br != nil {
		left := max(ShutdownBudget-time.Since(start)-500*time.Millisecond, 500*time.Millisecond)
		sctx, cancel := context.WithTimeout(context.Background(), min(left, 5*time.Second))
		_ = d.br.Shutdown(sctx)
		cancel()
	}
	if d.mgr != nil {
		_ = d.mgr.Close() // the containers' network namespaces
	}
	if d.rt != nil {
		_ = d.rt.Close()
	}
	if d.store != nil {
		_ = d.store.Close()
	}
	if d.lock != nil {
		_ = d.lock.Truncate(0)
		d.lock.Close()
	}
}

// checkImage warns at start-up when the configured image is not in the
// engine: the first create would pull it (or fail where no registry
// answers), and the operator should know now, not then.
func (d *Daemon) checkImage(ctx context.Context) {
	dk, ok := d.rt.(*runtime.Docker)
	if !ok {
		return
	}
	has, err := dk.HasImage(ctx, d.cfg.Image)
	switch {
	case err != nil:
		d.log.Warn("cannot check the conversation image", "image", d.cfg.Image, "err", err)
	case !has:
		d.log.Warn("the conversation image is not in the Docker engine: the first create pulls it, and fails where no registry answers; "+
			"load it first (docker load -i image.tar) or pass --image with an image the engine has", "image", d.cfg.Image)
	}
}
