package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/ohd-dev/ohd/internal/testimage"
	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/conversation"
	"github.com/ohd-dev/ohd/pkg/masterkey"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/store"
	"github.com/ohd-dev/ohd/pkg/worktree"
)

// CreateOptions configure Create. Zero fields take their defaults.
type CreateOptions struct {
	// Iterations is the number of measured create/remove cycles on each
	// side (ohd and baseline, alternating); default 10. One untimed cycle
	// on each side warms the engine up first.
	Iterations int
	// Image is the conversation image, which must be in the engine
	// (nothing is pulled); default testimage.Ref, the stand-in agent
	// server.
	Image string
	// Helper is the path of a static ohctl mounted into the containers;
	// "" builds one with `go build` and CGO_ENABLED=0 (the working
	// directory must be inside ohd's module).
	Helper string
	// Files is the number of files committed in the benchmark's
	// repository (what a worktree checks out); default 64.
	Files int
	// Suffix is added to the results' names ("create"+Suffix,
	// "remove"+Suffix), e.g. "-10000-files"; default none.
	Suffix string
	// ReadyTimeout bounds each wait for the inner server's /health; 0
	// means 60s.
	ReadyTimeout time.Duration
	// Logger receives progress; nil discards it.
	Logger *slog.Logger
	// OnStep, if set, also receives every step the conversation manager
	// reports (Publish times its "publish" steps with it).
	OnStep func(id, step string, d time.Duration)
}

// Step names of the breakdown, as conversation.Config.OnStep reports them
// for ohd and as the baseline times its own calls. A create is
// StepWorktree (ohd: worktree add, checkout and recording it; baseline:
// git worktree add), StepContainer (the engine's create and start calls
// and reading the port back) and StepReady (until GET /health answers
// 200). A remove is StepContainer (ohd: list, stop, then remove;
// baseline: a forced remove) and StepWorktree (ohd: snapshot check,
// unlock, remove, branch; baseline: git worktree remove and git branch
// -D).
const (
	StepWorktree  = "worktree"
	StepContainer = "container"
	StepReady     = "ready"
)

// createSteps and removeSteps are the parts of each operation, in order.
var (
	createSteps = []string{StepWorktree, StepContainer, StepReady}
	removeSteps = []string{StepContainer, StepWorktree}
)

// Stat is a latency over the iterations.
type Stat struct {
	Median, P90 time.Duration
	// N is the number of samples; 0 means the step was not measured.
	N int
}

// Breakdown is one side's latencies of an operation.
type Breakdown struct {
	// Steps are the parts, in the order of CreateResult.Steps.
	Steps []Stat
	// Total is the whole operation as the caller sees it.
	Total Stat
	// Own is, per iteration, Total minus the sum of the Steps: the time
	// spent outside the measured parts (for ohd: request validation,
	// repository inspection and worktree planning, image resolution, the
	// store records, the broker socket, the container spec). N is 0 when
	// a step was not measured.
	Own Stat
}

// CreateResult is the create or remove latency of a conversation with a
// worktree and a container: ohd's conversation.Manager against the same
// steps done directly (git CLI and Docker Engine calls), alternating in
// the same run.
type CreateResult struct {
	Op         string // "create" or "remove"
	Iterations int
	// Steps names the parts of the breakdown (StepWorktree, ...).
	Steps         []string
	OHD, Baseline Breakdown
	// Ratio is OHD.Total.Median / Baseline.Total.Median: below 1 ohd is
	// faster.
	Ratio float64
}

// Line is the one-line summary the harness prints:
//
//	bench: <op> ratio=<ohd/baseline> ohd=<median> baseline=<median> own=<median>
func (r CreateResult) Line() string {
	own := "n/a"
	if r.OHD.Own.N > 0 {
		own = fmtDur(r.OHD.Own.Median)
	}
	return fmt.Sprintf("bench: %s ratio=%.2f ohd=%s baseline=%s own=%s",
		r.Op, r.Ratio, fmtDur(r.OHD.Total.Median), fmtDur(r.Baseline.Total.Median), own)
}

// Detail is the breakdown, median and p90 of each step on each side, one
// line per step.
func (r CreateResult) Detail() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d iterations each, median / p90\n", r.Op, r.Iterations)
	fmt.Fprintf(&b, "  %-10s %-21s %s\n", "step", "ohd", "baseline")
	row := func(name string, o, l Stat) {
		fmt.Fprintf(&b, "  %-10s %-21s %s\n", name, fmtStat(o), fmtStat(l))
	}
	for i, s := range r.Steps {
		row(s, r.OHD.Steps[i], r.Baseline.Steps[i])
	}
	row("total", r.OHD.Total, r.Baseline.Total)
	row("own", r.OHD.Own, r.Baseline.Own)
	return strings.TrimSuffix(b.String(), "\n")
}

func fmtStat(s Stat) string {
	if s.N == 0 {
		return "n/a"
	}
	return fmtDur(s.Median) + " / " + fmtDur(s.P90)
}

// fmtDur rounds d for display: 0.1ms below a second, 1ms above.
func fmtDur(d time.Duration) string {
	if d >= time.Second || d <= -time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Microsecond).String()
}

// stepSample is one iteration of one side: the duration of each step seen and
// of the whole operation.
type stepSample struct {
	steps map[string]time.Duration
	total time.Duration
}

// breakdown computes the statistics of samples over steps.
func breakdown(samples []stepSample, steps []string) Breakdown {
	var b Breakdown
	complete := true
	for _, s := range steps {
		var ds []time.Duration
		for _, sm := range samples {
			if d, ok := sm.steps[s]; ok {
				ds = append(ds, d)
			}
		}
		if len(ds) < len(samples) || len(ds) == 0 {
			complete = false
		}
		b.Steps = append(b.Steps, stat(ds))
	}
	var totals, own []time.Duration
	for _, sm := range samples {
		totals = append(totals, sm.total)
		if complete {
			o := sm.total
			for _, s := range steps {
				o -= sm.steps[s]
			}
			own = append(own, o)
		}
	}
	b.Total, b.Own = stat(totals), stat(own)
	return b
}

// stat is the median and 90th percentile (nearest rank) of ds.
func stat(ds []time.Duration) Stat {
	if len(ds) == 0 {
		return Stat{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Stat{Median: med, P90: rank(0.9), N: len(s)}
}

// Create measures the create and remove latency of a conversation with a
// worktree and a container. ohd's side is the real components assembled
// in-process as ohd serve assembles them (bbolt store with a master key,
// worktree manager, broker, Docker runtime, conversation manager, the
// engine event watch); the baseline does the same steps directly: git
// worktree add/remove and branch -D through the git CLI, and Docker
// Engine create, start, inspect and remove through the moby client, with
// the same image, entrypoint, mounts, environment and hardening, and the
// same readiness polling. The two sides alternate, in flipping order, so
// drift on a shared machine hits both. It returns the "create" and the
// "remove" result.
func Create(ctx context.Context, opts CreateOptions) (_ []CreateResult, err error) {
	if opts.Iterations <= 0 {
		opts.Iterations = 10
	}
	if opts.Image == "" {
		opts.Image = testimage.Ref
	}
	if opts.Files <= 0 {
		opts.Files = 64
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = runtime.DefaultReadyTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fail := func(err error) ([]CreateResult, error) { return nil, fmt.Errorf("bench create: %w", err) }

	dir, helper, err := workDir(ctx, "ohdbc-", opts.Helper)
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	repo, start, err := benchRepo(ctx, filepath.Join(dir, "repo"), opts.Files)
	if err != nil {
		return fail(err)
	}

	rec := &stepLog{}
	o, err := newOHDSide(ctx, dir, helper, opts, rec)
	if err != nil {
		return fail(err)
	}
	defer o.close()
	base, err := newBaselineSide(ctx, dir, repo, start, helper, opts)
	if err != nil {
		return fail(err)
	}
	defer base.close()
	// Whatever happens, leave no container or worktree behind.
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if cerr := o.cleanup(cctx); cerr != nil && err == nil {
			err = fmt.Errorf("bench create: cleanup: %w", cerr)
		}
		if cerr := base.cleanup(cctx); cerr != nil && err == nil {
			err = fmt.Errorf("bench create: cleanup: %w", cerr)
		}
	}()

	type side struct {
		name           string
		cycle          func(context.Context) (stepSample, stepSample, error)
		create, remove []stepSample
	}
	sides := []*side{
		{name: "ohd", cycle: func(ctx context.Context) (stepSample, stepSample, error) { return o.cycle(ctx, repo) }},
		{name: "baseline", cycle: base.cycle},
	}
	for _, s := range sides { // warm-up, untimed
		if _, _, err := s.cycle(ctx); err != nil {
			return fail(fmt.Errorf("%s warm-up: %w", s.name, err))
		}
	}
	for i := range opts.Iterations {
		order := slices.Clone(sides)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, s := range order {
			c, r, err := s.cycle(ctx)
			if err != nil {
				return fail(fmt.Errorf("%s iteration %d: %w", s.name, i+1, err))
			}
			s.create, s.remove = append(s.create, c), append(s.remove, r)
			log.Debug("bench create: cycle", "side", s.name, "iteration", i+1, "create", c.total, "remove", r.total)
		}
	}
	result := func(op string, steps []string, ohd, base []stepSample) CreateResult {
		r := CreateResult{Op: op, Iterations: opts.Iterations, Steps: steps,
			OHD: breakdown(ohd, steps), Baseline: breakdown(base, steps)}
		if r.Baseline.Total.Median > 0 {
			r.Ratio = float64(r.OHD.Total.Median) / float64(r.Baseline.Total.Median)
		}
		return r
	}
	return []CreateResult{
		result("create"+opts.Suffix, createSteps, sides[0].create, sides[1].create),
		result("remove"+opts.Suffix, removeSteps, sides[0].remove, sides[1].remove),
	}, nil
}

// workDir makes the benchmark's directory (short: broker sockets live
// below it, and a Unix socket path has at most 107 bytes; 0711: the
// containers' users reach the worktrees and helper through it) and, when
// helper is "", builds a static ohctl in it. The caller removes dir.
func workDir(ctx context.Context, prefix, helper string) (dir, ohctl string, err error) {
	if dir, err = os.MkdirTemp("", prefix); err != nil {
		return "", "", err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	if dir, err = filepath.EvalSymlinks(dir); err != nil {
		return "", "", err
	}
	if err = os.Chmod(dir, 0o711); err != nil {
		return "", "", err
	}
	if helper == "" {
		if helper, err = buildHelper(ctx, filepath.Join(dir, "bin")); err != nil {
			return "", "", err
		}
	}
	return dir, helper, nil
}

// buildHelper builds a static ohctl into dir.
func buildHelper(ctx context.Context, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "ohctl")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "github.com/ohd-dev/ohd/cmd/ohctl")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build cmd/ohctl: %w\n%s", err, out)
	}
	return bin, nil
}

// gitEnv is the environment of the bench's own git commands: no user or
// system configuration, a fixed identity.
func gitEnv() []string {
	return []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=/nonexistent",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=ohd bench", "GIT_AUTHOR_EMAIL=bench@localhost",
		"GIT_COMMITTER_NAME=ohd bench", "GIT_COMMITTER_EMAIL=bench@localhost",
		"GIT_TERMINAL_PROMPT=0",
		"LC_ALL=C",
	}
}

// runGit runs git with args in dir and returns its trimmed output.
func runGit(ctx context.Context, git, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, git, args...)
	cmd.Dir = dir
	cmd.Env = gitEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// benchRepo creates a repository at dir with files files in one commit on
// main, and returns its canonical path and the commit.
func benchRepo(ctx context.Context, dir string, files int) (string, string, error) {
	if err := os.MkdirAll(filepath.Join(dir, "src"), 0o755); err != nil {
		return "", "", err
	}
	for i := range files {
		body := fmt.Sprintf("// file %d of the ohd bench repository\npackage src\n\nconst N%d = %d\n", i, i, i)
		name := filepath.Join(dir, "src", fmt.Sprintf("f%03d.go", i))
		if files > 1000 {
			// A large repository has directories too: 100 files each.
			name = filepath.Join(dir, "src", fmt.Sprintf("d%03d", i/100), fmt.Sprintf("f%05d.go", i))
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				return "", "", err
			}
		}
		if err := os.WriteFile(name, []byte(body), 0o644); err != nil {
			return "", "", err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("ohd bench\n"), 0o644); err != nil {
		return "", "", err
	}
	git, err := exec.LookPath("git")
	if err != nil {
		return "", "", err
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"commit", "-q", "-m", "bench"}} {
		if _, err := runGit(ctx, git, dir, args...); err != nil {
			return "", "", err
		}
	}
	head, err := runGit(ctx, git, dir, "rev-parse", "HEAD")
	if err != nil {
		return "", "", err
	}
	real, err := filepath.EvalSymlinks(dir)
	return real, head, err
}

// ohdSteps maps the steps conversation.Config.OnStep reports to the
// breakdown's; the others ("broker", "remove_broker", the totals) are
// part of ohd's own share.
var ohdSteps = map[string]string{
	"worktree":         StepWorktree,
	"container_create": StepContainer,
	"container_start":  StepContainer,
	"container_ready":  StepReady,
	"remove_container": StepContainer,
	"save_view":        StepWorktree,
	"remove_worktree":  StepWorktree,
}

// stepLog adds up the step durations reported during one operation (the
// bench runs one at a time).
type stepLog struct {
	mu    sync.Mutex
	steps map[string]time.Duration
}

// Step records that step took d: it is the conversation manager's
// OnStep.
func (l *stepLog) Step(_, step string, d time.Duration) {
	name, ok := ohdSteps[step]
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.steps != nil {
		l.steps[name] += d
	}
}

func (l *stepLog) begin() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.steps = map[string]time.Duration{}
}

func (l *stepLog) end() map[string]time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.steps
	l.steps = nil
	return s
}

// benchAgentUID is the agent's uid on ohd's side, ohd serve's default
// without a system user ohd-agent.
const benchAgentUID = 10001

// ohdSide is ohd's components, assembled as pkg/daemon does.
type ohdSide struct {
	rec   *stepLog
	wt    *worktree.Manager
	st    *store.Store
	br    *broker.Broker
	rt    runtime.Runtime
	mgr   *conversation.Manager
	stop  context.CancelFunc
	watch sync.WaitGroup
}

func newOHDSide(ctx context.Context, dir, helper string, opts CreateOptions, rec *stepLog) (_ *ohdSide, err error) {
	o := &ohdSide{rec: rec}
	defer func() {
		if err != nil {
			o.close()
		}
	}()
	state, run := filepath.Join(dir, "state"), filepath.Join(dir, "run")
	for _, d := range []string{state, run, filepath.Join(run, "conversations")} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, err
		}
	}
	raw := make([]byte, masterkey.Size)
	_, _ = rand.Read(raw)
	key, err := masterkey.New(raw)
	if err != nil {
		return nil, err
	}
	quiet := slog.New(slog.DiscardHandler)
	// OHD_BENCH_TRACE=1 prints a timeline to stderr: every hardened git
	// run with its duration, the worktree manager's and the conversation
	// manager's steps (where a create's or a removal's time goes).
	dbg := quiet
	if os.Getenv("OHD_BENCH_TRACE") != "" {
		dbg = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if o.st, err = store.Open(filepath.Join(state, store.FileName), key, store.Options{Logger: quiet}); err != nil {
		return nil, err
	}
	wt, err := worktree.New(worktree.Options{
		Root: filepath.Join(state, "worktrees"), LockDir: filepath.Join(state, "locks"), Logger: dbg,
		OnStep: func(s string) { dbg.Debug("wtstep", "step", s) },
		// As ohd serve: a removed worktree's files are deleted in the
		// background (cycle waits for that, untimed, before the other
		// side's turn).
		TrashDir: filepath.Join(state, "trash"),
	})
	if err != nil {
		return nil, err
	}
	o.wt = wt
	if o.br, err = broker.New(broker.Options{
		RuntimeDir: run, Key: key.Derive("ohd-broker-key-v1"),
		Backend: conversation.Backend{Store: o.st}, Logger: quiet,
	}); err != nil {
		return nil, err
	}
	rt, err := runtime.NewDocker(ctx, runtime.DockerOptions{Logger: quiet})
	if err != nil {
		return nil, err
	}
	o.rt = rt
	if o.mgr, err = conversation.New(conversation.Config{
		Store: o.st, Worktrees: wt, Broker: o.br,
		Runtime: rt, RuntimeDir: run, Image: opts.Image, ReadyTimeout: opts.ReadyTimeout,
		InnerRoot: filepath.Join(state, "inner"),
		// As ohd serve: the agent runs as a uid of its own, its trees
		// shared with it (package gitboundary).
		AgentUID: benchAgentUID, AgentGID: benchAgentUID, KeptRoot: filepath.Join(state, "kept"),
		Helper: helper, OnStep: func(id, step string, d time.Duration) {
			dbg.Debug("step", "step", step, "d", d)
			rec.Step(id, step, d)
			if opts.OnStep != nil {
				opts.OnStep(id, step, d)
			}
		}, Logger: dbg,
	}); err != nil {
		return nil, err
	}
	// As in ohd serve: the engine's events are followed throughout.
	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	o.stop = stop
	o.watch.Go(func() { _ = o.mgr.Watch(wctx) })
	return o, nil
}

// cycle creates a conversation with a worktree of repo, then removes it.
func (o *ohdSide) cycle(ctx context.Context, repo string) (stepSample, stepSample, error) {
	o.rec.begin()
	t0 := time.Now()
	c, err := o.mgr.Create(ctx, conversation.CreateRequest{Workspace: repo, Worktree: true})
	create := stepSample{total: time.Since(t0), steps: o.rec.end()}
	if err != nil {
		return stepSample{}, stepSample{}, err
	}
	if c.ContainerID == "" || c.Worktree == "" {
		return stepSample{}, stepSample{}, fmt.Errorf("conversation %s has no container or no worktree: %+v", c.ID, c)
	}
	o.rec.begin()
	t1 := time.Now()
	r, err := o.mgr.Remove(ctx, c.ID, conversation.RemoveOptions{})
	remove := stepSample{total: time.Since(t1), steps: o.rec.end()}
	// The files of the worktree, deleted in the background, are gone
	// before anything else runs: the next cycle (the baseline's, or this
	// side's) does not share the machine with that deletion.
	o.wt.Wait()
	if err != nil {
		return stepSample{}, stepSample{}, err
	}
	if r.Removal == nil || r.Removal.BranchKept || r.Removal.SnapshotRef != "" {
		return stepSample{}, stepSample{}, fmt.Errorf("conversation %s: the removal kept its branch or a snapshot: %+v", c.ID, r.Removal)
	}
	return create, remove, nil
}

// cleanupInto is cleanup for a deferred call: it runs within d even when
// ctx has ended, and an error of it becomes *err unless the benchmark
// already failed (what names the benchmark).
func (o *ohdSide) cleanupInto(ctx context.Context, d time.Duration, what string, err *error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	defer cancel()
	if cerr := o.cleanup(cctx); cerr != nil && *err == nil {
		*err = fmt.Errorf("bench %s: cleanup: %w", what, cerr)
	}
}

// publishing runs the side's publisher until the returned stop is called
// (stop waits for it to end).
func (o *ohdSide) publishing(ctx context.Context) (stop func()) {
	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { o.mgr.RunPublisher(pctx) })
	return func() { cancel(); wg.Wait() }
}

// cleanup removes every conversation left live and every container of
// this store's server.
func (o *ohdSide) cleanup(ctx context.Context) error {
	if o.mgr == nil {
		return nil
	}
	var errs []error
	for _, c := range o.mgr.List() {
		if c.State != store.StateDeleted {
			if _, err := o.mgr.Remove(ctx, c.ID, conversation.RemoveOptions{Discard: true}); err != nil {
				errs = append(errs, err)
			}
		}
	}
	list, err := o.rt.List(ctx, o.st.ServerID())
	errs = append(errs, err)
	for _, c := range list {
		errs = append(errs, o.rt.Remove(ctx, c.ID))
	}
	return errors.Join(errs...)
}

func (o *ohdSide) close() {
	if o.wt != nil {
		o.wt.Wait()
	}
	if o.stop != nil {
		o.stop()
		o.watch.Wait()
	}
	if o.br != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = o.br.Shutdown(sctx)
		cancel()
	}
	if o.rt != nil {
		_ = o.rt.Close()
	}
	if o.st != nil {
		_ = o.st.Close()
	}
}

// Readiness polling, as pkg/runtime does it: 10ms, doubling up to 250ms,
// each GET bounded by 2s.
const (
	baseReadyFirst   = 10 * time.Millisecond
	baseReadyMax     = 250 * time.Millisecond
	baseReadyAttempt = 2 * time.Second
)

// baselineSide does a conversation's steps directly, without ohd.
type baselineSide struct {
	cli      *client.Client
	git      string
	repo     string
	start    string // the start commit
	root     string // worktrees go to <root>/<id>/<basename(repo)>
	serverID string
	image    string // image ID
	cmd      []string
	mounts   []mount.Mount // the key directory and the helper
	env      []string
	uid, gid int
	res      container.Resources
	logCfg   container.LogConfig
	timeout  time.Duration
	httpc    *http.Client
}

// baseConv is a conversation the baseline created.
type baseConv struct {
	id, path, branch, container string
}

func newBaselineSide(ctx context.Context, dir, repo, start, helper string, opts CreateOptions) (_ *baselineSide, err error) {
	git, err := exec.LookPath("git")
	if err != nil {
		return nil, err
	}
	b := &baselineSide{
		git: git, repo: repo, start: start, root: filepath.Join(dir, "base-worktrees"),
		serverID: "bench-baseline-" + store.NewID()[:8], timeout: opts.ReadyTimeout,
		httpc: &http.Client{
			Transport: &http.Transport{
				Proxy: nil, DisableKeepAlives: true,
				DialContext: (&net.Dialer{Timeout: time.Second}).DialContext,
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
	if err := os.MkdirAll(b.root, 0o711); err != nil {
		return nil, err
	}
	st, err := os.Stat(filepath.Join(repo, ".git"))
	if err != nil {
		return nil, err
	}
	// The container runs as the repository's owner, as ohd's do.
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, fmt.Errorf("stat %s: no owner", repo)
	}
	b.uid, b.gid = int(sys.Uid), int(sys.Gid)

	if b.cli, err = client.New(client.FromEnv); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			b.cli.Close()
		}
	}()
	if _, err := b.cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		return nil, fmt.Errorf("%w: %w", runtime.ErrEngineUnavailable, err)
	}
	img, err := b.cli.ImageInspect(ctx, opts.Image)
	if err != nil {
		return nil, fmt.Errorf("inspect image %s: %w", opts.Image, err)
	}
	b.image = img.ID
	if img.Config != nil {
		b.cmd = append(slices.Clone(img.Config.Entrypoint), img.Config.Cmd...)
	}
	if len(b.cmd) == 0 {
		return nil, fmt.Errorf("image %s has neither entrypoint nor command", opts.Image)
	}
	// The limits and log settings ohd's runtime applies by default.
	info, err := b.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return nil, err
	}
	cpus := int64(runtime.DefaultNanoCPUs)
	if n := info.Info.NCPU; n > 0 {
		cpus = min(cpus, int64(n)*1_000_000_000)
	}
	pids := int64(runtime.DefaultPidsLimit)
	b.res = container.Resources{Memory: runtime.DefaultMemoryBytes, MemorySwap: runtime.DefaultMemoryBytes, NanoCPUs: cpus, PidsLimit: &pids}
	if d := info.Info.LoggingDriver; d == "json-file" || d == "local" {
		b.logCfg = container.LogConfig{Type: d, Config: map[string]string{"max-size": "10m", "max-file": "3"}}
	}

	// What ohd's broker directory gives the entrypoint wrapper: the inner
	// key file, and a mountpoint for the helper. Made once: the baseline
	// has no broker.
	keyDir := filepath.Join(dir, "base-key")
	if err := os.MkdirAll(filepath.Join(keyDir, "bin"), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(keyDir, conversation.InnerKeyFile), []byte(store.NewID()), 0o400); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(keyDir, "bin", "ohctl"), nil, 0o555); err != nil {
		return nil, err
	}
	b.mounts = []mount.Mount{
		bindMount(keyDir, conversation.ContainerBrokerDir, true),
		bindMount(helper, conversation.ContainerHelper, true),
	}
	git2 := append(worktree.ContainerGitConfig(),
		[2]string{"credential.helper", conversation.ContainerHelper + " git-credential"},
		[2]string{"credential.useHttpPath", "true"})
	b.env = []string{
		"OH_CONVERSATION_RUNTIME=local",
		// The stand-in, like the agent server, needs a conversations
		// directory its uid can create.
		"OH_CONVERSATIONS_PATH=/tmp/conversations",
		"OHD_BROKER_SOCKET=" + conversation.ContainerBrokerDir + "/broker.sock",
		"OHD_BROKER_TOKEN_FILE=" + conversation.ContainerBrokerDir + "/token",
		"GIT_CONFIG_COUNT=" + strconv.Itoa(len(git2)),
	}
	for i, kv := range git2 {
		b.env = append(b.env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, kv[0]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, kv[1]))
	}
	return b, nil
}

func bindMount(src, dst string, ro bool) mount.Mount {
	return mount.Mount{
		Type: mount.TypeBind, Source: src, Target: dst, ReadOnly: ro,
		BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate, NonRecursive: true},
	}
}

// cycle creates a conversation directly, then removes it.
func (b *baselineSide) cycle(ctx context.Context) (stepSample, stepSample, error) {
	c, create, err := b.create(ctx)
	if err != nil {
		return stepSample{}, stepSample{}, err
	}
	remove, err := b.remove(ctx, c)
	return create, remove, err
}

// create is git worktree add, then the container's create, start,
// port inspection and readiness.
func (b *baselineSide) create(ctx context.Context) (baseConv, stepSample, error) {
	s := stepSample{steps: map[string]time.Duration{}}
	id := store.NewID()
	c := baseConv{id: id, path: filepath.Join(b.root, id, filepath.Base(b.repo)), branch: worktree.BranchName(id)}
	t0 := time.Now()
	if err := os.Mkdir(filepath.Dir(c.path), 0o700); err != nil {
		return c, s, err
	}
	tw := time.Now()
	_, err := runGit(ctx, b.git, b.repo, "worktree", "add", "--lock", "-b", c.branch, "--no-track", c.path, b.start)
	s.steps[StepWorktree] = time.Since(tw)
	if err != nil {
		return c, s, err
	}
	// The same mounts as ohd's: the worktree, the common dir read-only
	// with its writable parts, the worktree's admin dir.
	gitFile, err := os.ReadFile(filepath.Join(c.path, ".git"))
	if err != nil {
		return c, s, err
	}
	admin, ok := strings.CutPrefix(strings.TrimSpace(string(gitFile)), "gitdir: ")
	if !ok {
		return c, s, fmt.Errorf("%s/.git is not a gitdir file", c.path)
	}
	common := filepath.Dir(filepath.Dir(admin))
	if err := os.MkdirAll(filepath.Join(common, "logs"), 0o755); err != nil {
		return c, s, err
	}
	mounts := []mount.Mount{bindMount(c.path, c.path, false), bindMount(common, common, true)}
	for _, p := range []string{"logs", "objects", "refs"} {
		mounts = append(mounts, bindMount(filepath.Join(common, p), filepath.Join(common, p), false))
	}
	mounts = append(mounts, bindMount(admin, admin, false))
	mounts = append(mounts, b.mounts...)

	tc := time.Now()
	port, err := b.startContainer(ctx, &c, mounts)
	s.steps[StepContainer] = time.Since(tc)
	if err != nil {
		return c, s, err
	}
	tr := time.Now()
	err = b.waitReady(ctx, fmt.Sprintf("http://127.0.0.1:%d%s", port, runtime.DefaultHealthPath))
	s.steps[StepReady] = time.Since(tr)
	s.total = time.Since(t0)
	return c, s, err
}

// startContainer creates and starts c's container with ohd's hardening and
// returns the published port.
// engineCallBudget bounds each baseline step's engine calls (a create
// with its start and inspect, a removal, an exec, a clean-up).
const engineCallBudget = 2 * time.Minute

func (b *baselineSide) startContainer(ctx context.Context, c *baseConv, mounts []mount.Mount) (int, error) {
	// Every engine call has a deadline: on a loaded engine, with a
	// container it is wedged on, a bench must end too (issue 27).
	ctx, cancel := context.WithTimeout(ctx, engineCallBudget)
	defer cancel()
	port, _ := network.PortFrom(runtime.DefaultInnerPort, network.TCP)
	cfg := &container.Config{
		Image: b.image,
		User:  fmt.Sprintf("%d:%d", b.uid, b.gid),
		Env:   append(slices.Clone(b.env), "OHD_CONVERSATION_ID="+c.id),
		Entrypoint: []string{conversation.ContainerHelper, "inner-exec", "--env-file",
			openhands.SessionKeyEnv + "=" + conversation.ContainerBrokerDir + "/" + conversation.InnerKeyFile, "--"},
		Cmd: b.cmd,
		Labels: map[string]string{
			runtime.LabelServer: b.serverID, runtime.LabelConversation: c.id,
			runtime.LabelInnerPort: strconv.Itoa(runtime.DefaultInnerPort),
		},
		ExposedPorts: network.PortSet{port: {}},
	}
	hc := &container.HostConfig{
		Mounts:        mounts,
		PortBindings:  network.PortMap{port: {{HostIP: netip.AddrFrom4([4]byte{127, 0, 0, 1})}}},
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		LogConfig:     b.logCfg,
		CapDrop:       []string{"ALL"},
		SecurityOpt:   []string{"no-new-privileges"},
		IpcMode:       container.IPCModePrivate,
		Init:          new(true),
		Resources:     b.res,
	}
	res, err := b.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: runtime.ContainerName(c.id), Config: cfg, HostConfig: hc})
	if err != nil {
		return 0, fmt.Errorf("create container: %w", err)
	}
	c.container = res.ID
	if _, err := b.cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		return 0, fmt.Errorf("start container: %w", err)
	}
	ins, err := b.cli.ContainerInspect(ctx, res.ID, client.ContainerInspectOptions{})
	if err != nil {
		return 0, fmt.Errorf("inspect container: %w", err)
	}
	if ns := ins.Container.NetworkSettings; ns != nil {
		for _, pb := range ns.Ports[port] {
			if p, err := strconv.Atoi(pb.HostPort); err == nil && p > 0 {
				return p, nil
			}
		}
	}
	return 0, errors.New("inspect container: no published port")
}

// waitReady polls url until it answers 200.
func (b *baselineSide) waitReady(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	delay := baseReadyFirst
	for {
		actx, acancel := context.WithTimeout(ctx, baseReadyAttempt)
		req, _ := http.NewRequestWithContext(actx, http.MethodGet, url, nil)
		resp, err := b.httpc.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		acancel()
		if err == nil && resp.StatusCode == http.StatusOK {
			return nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("wait for %s: %w", url, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, baseReadyMax)
	}
}

// remove is one `git status` in the container (the least a removal that
// loses no uncommitted work must ask: ohd saves the work through the
// running container the same way), a forced container remove, git
// worktree remove and git branch -D.
func (b *baselineSide) remove(ctx context.Context, c baseConv) (stepSample, error) {
	// Every engine call has a deadline: on a loaded engine, with a
	// container it is wedged on, a bench must end too (issue 27).
	ctx, cancel := context.WithTimeout(ctx, engineCallBudget)
	defer cancel()
	s := stepSample{steps: map[string]time.Duration{}}
	t0 := time.Now()
	if err := b.statusInside(ctx, c); err != nil {
		return s, err
	}
	s.steps[StepWorktree] = time.Since(t0)
	tc := time.Now()
	if _, err := b.cli.ContainerRemove(ctx, c.container, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
		return s, fmt.Errorf("remove container: %w", err)
	}
	s.steps[StepContainer] = time.Since(tc)
	tw := time.Now()
	if _, err := runGit(ctx, b.git, b.repo, "worktree", "remove", "--force", "--force", c.path); err != nil {
		return s, err
	}
	if _, err := runGit(ctx, b.git, b.repo, "branch", "-D", c.branch); err != nil {
		return s, err
	}
	s.steps[StepWorktree] += time.Since(tw)
	err := os.Remove(filepath.Dir(c.path))
	s.total = time.Since(t0)
	return s, err
}

// statusInside runs `git status --porcelain` in the worktree inside the
// container, through the Engine API's exec.
func (b *baselineSide) statusInside(ctx context.Context, c baseConv) error {
	// Every engine call has a deadline: on a loaded engine, with a
	// container it is wedged on, a bench must end too (issue 27).
	ctx, cancel := context.WithTimeout(ctx, engineCallBudget)
	defer cancel()
	ex, err := b.cli.ExecCreate(ctx, c.container, client.ExecCreateOptions{
		Cmd: []string{"git", "-C", c.path, "status", "--porcelain"}, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return fmt.Errorf("exec git status: %w", err)
	}
	att, err := b.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return fmt.Errorf("exec git status: %w", err)
	}
	_, _ = io.Copy(io.Discard, att.Reader)
	att.Close()
	for {
		ins, err := b.cli.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
		if err != nil {
			return fmt.Errorf("exec git status: %w", err)
		}
		if !ins.Running {
			if ins.ExitCode != 0 {
				return fmt.Errorf("git status in the container exited %d", ins.ExitCode)
			}
			return nil
		}
		time.Sleep(time.Millisecond)
	}
}

// cleanup removes every container of the baseline's server and prunes
// the repository's worktree registrations.
func (b *baselineSide) cleanup(ctx context.Context) error {
	// Every engine call has a deadline: on a loaded engine, with a
	// container it is wedged on, a bench must end too (issue 27).
	ctx, cancel := context.WithTimeout(ctx, engineCallBudget)
	defer cancel()
	list, err := b.cli.ContainerList(ctx, client.ContainerListOptions{
		All: true, Filters: make(client.Filters).Add("label", runtime.LabelServer+"="+b.serverID),
	})
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range list.Items {
		_, err := b.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (b *baselineSide) close() {
	b.httpc.CloseIdleConnections()
	if b.cli != nil {
		b.cli.Close()
	}
}
