package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/ohd-dev/ohd/internal/testimage"
	"github.com/ohd-dev/ohd/pkg/conversation"
	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/store"
)

// LabelBenchLoad labels the idle containers PublishLoad starts beside the
// conversations; its value is the run's id, so a clean-up removes only
// that run's.
const LabelBenchLoad = "dev.ohd.bench.load"

// PublishLoadOptions configure PublishLoad. Zero fields take their
// defaults.
type PublishLoadOptions struct {
	// Agents is the number of conversations committing at once; default 8.
	Agents int
	// Extra is the number of other containers running meanwhile (the
	// test image's idle stand-in server); default 20.
	Extra int
	// Commits is the number of commits each agent makes, and the lone
	// agent of the baseline; default 20.
	Commits int
	// Image is the conversation image (never pulled); default
	// testimage.Ref.
	Image string
	// Helper is a static ohctl; "" builds one.
	Helper string
}

// PublishLoadResult is the publish latency (commit made inside -> on the
// host's branch) of Agents conversations committing at once while Extra
// other containers run, against one conversation alone in the same run.
type PublishLoadResult struct {
	Agents, Extra, Commits int
	// P50 and P99 are under load, over every agent's commits.
	P50, P99 time.Duration
	// AloneP50 and AloneP99 are one agent's, no other container.
	AloneP50, AloneP99 time.Duration
	// Ratio is P99 / AloneP99.
	Ratio float64
}

// Line is the one-line summary.
func (r PublishLoadResult) Line() string {
	return fmt.Sprintf("bench: publish-load agents=%d extra=%d commits=%d ratio=%.2f p50=%s p99=%s alone-p50=%s alone-p99=%s",
		r.Agents, r.Extra, r.Commits, r.Ratio, fmtDur(r.P50), fmtDur(r.P99), fmtDur(r.AloneP50), fmtDur(r.AloneP99))
}

// Detail is the breakdown printed above the table.
func (r PublishLoadResult) Detail() string {
	return fmt.Sprintf("publish-load: %d agents committing at once (%d commits each) while %d other containers run, commit end -> host ref moved: p50 %s, p99 %s; one agent alone: p50 %s, p99 %s; p99 ratio %.2f",
		r.Agents, r.Commits, r.Extra, fmtDur(r.P50), fmtDur(r.P99), fmtDur(r.AloneP50), fmtDur(r.AloneP99), r.Ratio)
}

// PublishLoadRows are the table rows: the p99 under load against the p99
// alone, and the p99 under load against publish's 1 s bound (the ratio
// column holds seconds).
func PublishLoadRows(r PublishLoadResult) []Row {
	return []Row{
		row("publish-load-p99", fmtDur(r.P99)+" p99", fmtDur(r.AloneP99)+" p99 alone", r.Ratio),
		row("publish-load-p99-bound", fmtDur(r.P99)+" p99", "1s bound", r.P99.Seconds()),
	}
}

// loadAgent is one conversation of PublishLoad, with its repository.
type loadAgent struct {
	repo string
	conv store.Conversation
}

// PublishLoad measures the publisher under load: first one conversation
// committing alone (the baseline), then Agents conversations, each on a
// repository of its own, committing in a loop at the same time while
// Extra idle containers of the image run. Every container it starts is
// removed on return, failure included.
func PublishLoad(ctx context.Context, opts PublishLoadOptions) (_ PublishLoadResult, err error) {
	if opts.Agents <= 0 {
		opts.Agents = 8
	}
	if opts.Extra < 0 {
		opts.Extra = 0
	} else if opts.Extra == 0 {
		opts.Extra = 20
	}
	if opts.Commits <= 0 {
		opts.Commits = 20
	}
	if opts.Image == "" {
		opts.Image = testimage.Ref
	}
	res := PublishLoadResult{Agents: opts.Agents, Extra: opts.Extra, Commits: opts.Commits}
	fail := func(err error) (PublishLoadResult, error) { return res, fmt.Errorf("bench publish-load: %w", err) }
	dir, helper, err := workDir(ctx, "ohdbl-", opts.Helper)
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	git, err := exec.LookPath("git")
	if err != nil {
		return fail(err)
	}
	o, err := newOHDSide(ctx, dir, helper, CreateOptions{Image: opts.Image, ReadyTimeout: runtime.DefaultReadyTimeout}, &stepLog{})
	if err != nil {
		return fail(err)
	}
	defer o.close()
	defer o.cleanupInto(ctx, 3*time.Minute, "publish-load", &err)
	defer o.publishing(ctx)()

	agents := make([]loadAgent, opts.Agents)
	for i := range agents {
		repo, _, err := benchRepo(ctx, filepath.Join(dir, fmt.Sprintf("repo%d", i)), 16)
		if err != nil {
			return fail(err)
		}
		agents[i].repo = repo
	}
	// Creates one at a time: what is measured is the publishing.
	for i := range agents {
		c, err := o.mgr.Create(ctx, conversation.CreateRequest{Workspace: agents[i].repo, Worktree: true})
		if err != nil {
			return fail(fmt.Errorf("create agent %d: %w", i, err))
		}
		agents[i].conv = c
	}

	alone, err := commitLoop(ctx, o, git, agents[0], opts.Commits)
	if err != nil {
		return fail(fmt.Errorf("alone: %w", err))
	}
	res.AloneP50, res.AloneP99 = pct(alone, 50), pct(alone, 99)

	runID := store.NewID()[:12]
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return fail(err)
	}
	defer cli.Close()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), engineCallBudget)
		defer cancel()
		if cerr := removeLabelled(cctx, cli, LabelBenchLoad+"="+runID); cerr != nil && err == nil {
			err = fmt.Errorf("bench publish-load: remove the idle containers: %w", cerr)
		}
	}()
	if err := startIdle(ctx, cli, opts.Image, runID, opts.Extra); err != nil {
		return fail(err)
	}

	var (
		mu   sync.Mutex
		all  []time.Duration
		errs = make([]error, len(agents))
		aw   sync.WaitGroup
	)
	for i := range agents {
		aw.Go(func() {
			lat, err := commitLoop(ctx, o, git, agents[i], opts.Commits)
			if err != nil {
				errs[i] = fmt.Errorf("agent %d: %w", i, err)
				return
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		})
	}
	aw.Wait()
	if err := errors.Join(errs...); err != nil {
		return fail(err)
	}
	// The idle containers must still be running: otherwise there was no
	// load.
	if n, err := countRunning(ctx, cli, LabelBenchLoad+"="+runID); err != nil {
		return fail(err)
	} else if n != opts.Extra {
		return fail(fmt.Errorf("%d of the %d idle containers still run after the commits", n, opts.Extra))
	}
	res.P50, res.P99 = pct(all, 50), pct(all, 99)
	if res.AloneP99 > 0 {
		res.Ratio = float64(res.P99) / float64(res.AloneP99)
	} else {
		res.Ratio = math.NaN()
	}
	return res, nil
}

// pct is the p-th percentile of ds (nearest rank below), 0 for none.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// commitLoop makes n commits inside a's container, one after the other,
// each timed from the end of the commit until the host's branch has it.
func commitLoop(ctx context.Context, o *ohdSide, git string, a loadAgent, n int) ([]time.Duration, error) {
	var lat []time.Duration
	for i := range n {
		script := fmt.Sprintf("cd %s && git -c user.name=bench -c user.email=b@x commit -q --allow-empty -m 'load %d' && git rev-parse HEAD", a.conv.Worktree, i)
		var out bytes.Buffer
		ectx, cancel := context.WithTimeout(ctx, engineCallBudget)
		code, err := o.rt.Exec(ectx, a.conv.ContainerID, []string{"sh", "-c", script}, runtime.ExecOptions{Stdout: &out})
		cancel()
		if err != nil || code != 0 {
			return nil, fmt.Errorf("commit %d inside: exit %d: %v", i, code, err)
		}
		tip := strings.TrimSpace(out.String())
		t0 := time.Now()
		for {
			if hostRef(ctx, git, a.repo, a.conv.Branch) == tip {
				lat = append(lat, time.Since(t0))
				break
			}
			if time.Since(t0) > 60*time.Second {
				return nil, fmt.Errorf("commit %d (%s) did not reach the host in 60s", i, tip)
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return lat, nil
}

// hostRef is branch's commit in repo: the loose ref's file when there is
// one (polling it costs no process, which nine pollers on two cores would
// feel), else git rev-parse.
func hostRef(ctx context.Context, git, repo, branch string) string {
	if b, err := os.ReadFile(filepath.Join(repo, ".git", "refs", "heads", filepath.FromSlash(branch))); err == nil {
		return strings.TrimSpace(string(b))
	}
	got, _ := runGit(ctx, git, repo, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch)
	return strings.TrimSpace(got)
}

// startIdle starts n containers of image running its own command (the
// stand-in server, idle), labelled LabelBenchLoad=runID.
func startIdle(ctx context.Context, cli *client.Client, image, runID string, n int) error {
	for i := range n {
		cctx, cancel := context.WithTimeout(ctx, engineCallBudget)
		res, err := cli.ContainerCreate(cctx, client.ContainerCreateOptions{
			Name: fmt.Sprintf("ohd-bench-load-%s-%d", runID, i),
			Config: &container.Config{
				Image:  image,
				Env:    []string{"OH_CONVERSATIONS_PATH=/tmp/conversations"},
				Labels: map[string]string{LabelBenchLoad: runID},
			},
			HostConfig: &container.HostConfig{Init: new(true)},
		})
		if err == nil {
			_, err = cli.ContainerStart(cctx, res.ID, client.ContainerStartOptions{})
		}
		cancel()
		if err != nil {
			return fmt.Errorf("idle container %d: %w", i, err)
		}
	}
	return nil
}

// countRunning is the number of running containers with label.
func countRunning(ctx context.Context, cli *client.Client, label string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, engineCallBudget)
	defer cancel()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{Filters: make(client.Filters).Add("label", label)})
	if err != nil {
		return 0, err
	}
	return len(list.Items), nil
}

// removeLabelled force-removes every container with label.
func removeLabelled(ctx context.Context, cli *client.Client, label string) error {
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", label)})
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range list.Items {
		_, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// CreateParallelOptions configure CreateParallel. Zero fields take their
// defaults.
type CreateParallelOptions struct {
	// Folders is the number of repositories created at once; default 8.
	Folders int
	// Rounds is the number of sets of each kind, alternating which kind
	// goes first; default 3. The result is each kind's median.
	Rounds int
	// Image is the conversation image (never pulled); default
	// testimage.Ref.
	Image string
	// Helper is a static ohctl; "" builds one.
	Helper string
}

// CreateParallelResult is the wall time of Folders in-place creates of
// as many different folders at once, against Folders worktree creates of
// the same repositories at once, in the same run.
type CreateParallelResult struct {
	Folders, Rounds   int
	InPlace, Worktree time.Duration
	// Ratio is InPlace / Worktree.
	Ratio float64
}

// Line is the one-line summary.
func (r CreateParallelResult) Line() string {
	return fmt.Sprintf("bench: create-parallel folders=%d rounds=%d ratio=%.2f in-place=%s worktree=%s", r.Folders, r.Rounds, r.Ratio, fmtDur(r.InPlace), fmtDur(r.Worktree))
}

// Detail is the breakdown printed above the table.
func (r CreateParallelResult) Detail() string {
	return fmt.Sprintf("create-parallel: %d creates at once of %d different folders, wall time of the set (median of %d rounds): in place %s, worktrees %s; ratio %.2f",
		r.Folders, r.Folders, r.Rounds, fmtDur(r.InPlace), fmtDur(r.Worktree), r.Ratio)
}

// CreateParallelRows is the table row.
func CreateParallelRows(r CreateParallelResult) []Row {
	return []Row{row("create-parallel", fmtDur(r.InPlace)+" in place", fmtDur(r.Worktree)+" worktrees", r.Ratio)}
}

// CreateParallel creates Folders conversations in place, one per
// repository, all at once, and times the set until every create returned;
// removes them; then does the same with worktrees of the same
// repositories; Rounds times, alternating which kind goes first. An
// untimed create and removal of each kind warms up first.
func CreateParallel(ctx context.Context, opts CreateParallelOptions) (_ CreateParallelResult, err error) {
	if opts.Folders <= 0 {
		opts.Folders = 8
	}
	if opts.Rounds <= 0 {
		opts.Rounds = 3
	}
	if opts.Image == "" {
		opts.Image = testimage.Ref
	}
	res := CreateParallelResult{Folders: opts.Folders, Rounds: opts.Rounds, Ratio: math.NaN()}
	fail := func(err error) (CreateParallelResult, error) {
		return res, fmt.Errorf("bench create-parallel: %w", err)
	}
	dir, helper, err := workDir(ctx, "ohdbq-", opts.Helper)
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	o, err := newOHDSide(ctx, dir, helper, CreateOptions{Image: opts.Image, ReadyTimeout: runtime.DefaultReadyTimeout}, &stepLog{})
	if err != nil {
		return fail(err)
	}
	defer o.close()
	defer o.cleanupInto(ctx, 3*time.Minute, "create-parallel", &err)
	repos := make([]string, opts.Folders)
	for i := range repos {
		if repos[i], _, err = benchRepo(ctx, filepath.Join(dir, fmt.Sprintf("folder%d", i)), 64); err != nil {
			return fail(err)
		}
	}
	warm, _, err := benchRepo(ctx, filepath.Join(dir, "warm"), 8)
	if err != nil {
		return fail(err)
	}
	for _, wt := range []bool{true, false} {
		c, err := o.mgr.Create(ctx, conversation.CreateRequest{Workspace: warm, Worktree: wt})
		if err != nil {
			return fail(fmt.Errorf("warm-up: %w", err))
		}
		if _, err := o.mgr.Remove(ctx, c.ID, conversation.RemoveOptions{}); err != nil {
			return fail(fmt.Errorf("warm-up: %w", err))
		}
	}
	set := func(worktree bool) (time.Duration, error) {
		ids := make([]string, len(repos))
		errs := make([]error, len(repos))
		var wg sync.WaitGroup
		t0 := time.Now()
		for i := range repos {
			wg.Go(func() {
				c, err := o.mgr.Create(ctx, conversation.CreateRequest{Workspace: repos[i], Worktree: worktree})
				switch {
				case err != nil:
					errs[i] = fmt.Errorf("create %d: %w", i, err)
				case c.ContainerID == "" || c.InPlace == worktree:
					errs[i] = fmt.Errorf("create %d: container %q, in place %v, asked worktree %v", i, c.ContainerID, c.InPlace, worktree)
				}
				ids[i] = c.ID
			})
		}
		wg.Wait()
		d := time.Since(t0)
		if err := errors.Join(errs...); err != nil {
			return 0, err
		}
		for _, id := range ids {
			if _, err := o.mgr.Remove(ctx, id, conversation.RemoveOptions{}); err != nil {
				return 0, fmt.Errorf("remove %s: %w", id, err)
			}
		}
		return d, nil
	}
	var inPlace, worktrees []time.Duration
	for i := range opts.Rounds {
		order := []bool{false, true}
		if i%2 == 1 {
			order = []bool{true, false}
		}
		for _, wt := range order {
			d, err := set(wt)
			if err != nil {
				return fail(fmt.Errorf("round %d, worktree %v: %w", i+1, wt, err))
			}
			if wt {
				worktrees = append(worktrees, d)
			} else {
				inPlace = append(inPlace, d)
			}
		}
	}
	res.InPlace, res.Worktree = stat(inPlace).Median, stat(worktrees).Median
	res.Ratio = float64(res.InPlace) / float64(res.Worktree)
	return res, nil
}
