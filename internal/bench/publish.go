package bench

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ohd-dev/ohd/internal/testimage"
	"github.com/ohd-dev/ohd/pkg/conversation"
	"github.com/ohd-dev/ohd/pkg/runtime"
)

// PublishOptions configure Publish. Zero fields take their defaults.
type PublishOptions struct {
	// Commits is the number of commits made inside; default 50.
	Commits int
	// Image is the conversation image (never pulled); default
	// testimage.Ref.
	Image string
	// Helper is a static ohctl; "" builds one.
	Helper string
	// Logger receives progress; nil discards it.
	Logger *slog.Logger
}

// PublishResult is how fast a commit made inside a conversation's
// container reaches the host's branch (openhands/<id>) through ohd's
// publisher, and what one publish costs ohd.
type PublishResult struct {
	Commits int
	// Latency is from the end of the commit inside to the host ref
	// moving: p50 and p99.
	P50, P99 time.Duration
	// Cost is the publish itself (pack in the container, validated
	// import, ref move), median over the publishes.
	Cost time.Duration
}

// Line is the one-line summary.
func (r PublishResult) Line() string {
	return fmt.Sprintf("bench: publish commits=%d p50=%s p99=%s cost=%s", r.Commits, fmtDur(r.P50), fmtDur(r.P99), fmtDur(r.Cost))
}

// Detail is the breakdown printed above the table.
func (r PublishResult) Detail() string {
	return fmt.Sprintf("publish: %d commits inside one conversation, commit end -> host ref moved: p50 %s, p99 %s; one publish costs %s (median)",
		r.Commits, fmtDur(r.P50), fmtDur(r.P99), fmtDur(r.Cost))
}

// PublishRows are the table rows: the p99 against its 1 s bound (the ratio
// column holds seconds), the p50 and the cost without a target.
func PublishRows(r PublishResult) []Row {
	return []Row{
		row("publish-p99", fmtDur(r.P99)+" p99", "1s bound", r.P99.Seconds()),
		{Name: "publish-p50", OHD: fmtDur(r.P50) + " p50", Ratio: math.NaN()},
		{Name: "publish-cost", OHD: fmtDur(r.Cost) + " per commit", Ratio: math.NaN()},
	}
}

// publishSteps records the durations of the "publish" step.
type publishSteps struct {
	mu sync.Mutex
	ds []time.Duration
}

func (p *publishSteps) Step(_, step string, d time.Duration) {
	if step == "publish" {
		p.mu.Lock()
		p.ds = append(p.ds, d)
		p.mu.Unlock()
	}
}

// Publish measures the publisher: a conversation with a git view, commits
// made inside its container one at a time, each timed until the host's
// branch has it.
func Publish(ctx context.Context, opts PublishOptions) (_ PublishResult, err error) {
	if opts.Commits <= 0 {
		opts.Commits = 50
	}
	if opts.Image == "" {
		opts.Image = testimage.Ref
	}
	res := PublishResult{Commits: opts.Commits}
	fail := func(err error) (PublishResult, error) { return res, fmt.Errorf("bench publish: %w", err) }
	dir, helper, err := workDir(ctx, "ohdbp-", opts.Helper)
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	repo, _, err := benchRepo(ctx, filepath.Join(dir, "repo"), 64)
	if err != nil {
		return fail(err)
	}
	steps := &publishSteps{}
	o, err := newOHDSide(ctx, dir, helper, CreateOptions{Image: opts.Image, ReadyTimeout: runtime.DefaultReadyTimeout, OnStep: steps.Step}, &stepLog{})
	if err != nil {
		return fail(err)
	}
	defer o.close()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if cerr := o.cleanup(cctx); cerr != nil && err == nil {
			err = fmt.Errorf("bench publish: cleanup: %w", cerr)
		}
	}()
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { o.mgr.RunPublisher(pctx) })
	defer func() { stop(); wg.Wait() }()

	c, err := o.mgr.Create(ctx, conversation.CreateRequest{Workspace: repo, Worktree: true})
	if err != nil {
		return fail(err)
	}
	git, err := exec.LookPath("git")
	if err != nil {
		return fail(err)
	}
	var lat []time.Duration
	for i := range opts.Commits {
		var out bytes.Buffer
		code, err := o.rt.Exec(ctx, c.ContainerID, []string{"sh", "-c",
			fmt.Sprintf("cd %s && git -c user.name=bench -c user.email=b@x commit -q --allow-empty -m 'commit %d' && git rev-parse HEAD", c.Worktree, i)},
			runtime.ExecOptions{Stdout: &out})
		if err != nil || code != 0 {
			return fail(fmt.Errorf("commit %d inside: exit %d: %v", i, code, err))
		}
		tip := strings.TrimSpace(out.String())
		t0 := time.Now()
		for {
			got, _ := runGit(ctx, git, repo, "rev-parse", "--verify", "--quiet", "refs/heads/"+c.Branch)
			if strings.TrimSpace(got) == tip {
				break
			}
			if time.Since(t0) > 30*time.Second {
				return fail(fmt.Errorf("commit %d did not reach the host in 30s", i))
			}
			time.Sleep(2 * time.Millisecond)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	res.P50, res.P99 = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
	steps.mu.Lock()
	costs := slices.Clone(steps.ds)
	steps.mu.Unlock()
	if len(costs) > 0 {
		slices.Sort(costs)
		res.Cost = costs[len(costs)/2]
	}
	return res, nil
}
