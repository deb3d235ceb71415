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
	// Commits is the number of commits made inside; default 50. Each also
	// moves a side branch, which the live mirror follows.
	Commits int
	// BigCommits is the number of commits of BigFiles changed files made
	// after them; defaults 10 and 2000.
	BigCommits, BigFiles int
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
	// MirrorCost is one update of the live mirror (the side branch moved
	// with each commit), median.
	MirrorCost time.Duration
	// BigFiles changed files per big commit; BigP50 and BigP99 their
	// latency, BigCost their publish's median cost.
	BigCommits, BigFiles    int
	BigP50, BigP99, BigCost time.Duration
}

// Line is the one-line summary.
func (r PublishResult) Line() string {
	return fmt.Sprintf("bench: publish commits=%d p50=%s p99=%s cost=%s mirror=%s files=%d p50=%s p99=%s cost=%s", r.Commits, fmtDur(r.P50), fmtDur(r.P99), fmtDur(r.Cost),
		fmtDur(r.MirrorCost), r.BigFiles, fmtDur(r.BigP50), fmtDur(r.BigP99), fmtDur(r.BigCost))
}

// Detail is the breakdown printed above the table.
func (r PublishResult) Detail() string {
	return fmt.Sprintf("publish: %d commits inside one conversation, commit end -> host ref moved: p50 %s, p99 %s; one publish costs %s (median), the live mirror of a moved side branch %s; "+
		"%d commits of %d changed files: p50 %s, p99 %s, publish cost %s",
		r.Commits, fmtDur(r.P50), fmtDur(r.P99), fmtDur(r.Cost), fmtDur(r.MirrorCost), r.BigCommits, r.BigFiles, fmtDur(r.BigP50), fmtDur(r.BigP99), fmtDur(r.BigCost))
}

// PublishRows are the table rows: the p99 against its 1 s bound (the ratio
// column holds seconds), the p50 and the cost without a target.
func PublishRows(r PublishResult) []Row {
	return []Row{
		row("publish-p99", fmtDur(r.P99)+" p99", "1s bound", r.P99.Seconds()),
		{Name: "publish-p50", OHD: fmtDur(r.P50) + " p50", Ratio: math.NaN()},
		{Name: "publish-cost", OHD: fmtDur(r.Cost) + " per commit", Ratio: math.NaN()},
		{Name: "publish-mirror-cost", OHD: fmtDur(r.MirrorCost) + " per mirror update", Ratio: math.NaN()},
		row("publish-2000-files-p99", fmtDur(r.BigP99)+" p99", "1s bound", r.BigP99.Seconds()),
		{Name: "publish-2000-files-cost", OHD: fmtDur(r.BigCost) + " per commit", Ratio: math.NaN()},
	}
}

// publishSteps records the durations of the "publish" and "mirror"
// steps.
type publishSteps struct {
	mu     sync.Mutex
	ds, ms []time.Duration
}

func (p *publishSteps) Step(_, step string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch step {
	case "publish":
		p.ds = append(p.ds, d)
	case "mirror":
		p.ms = append(p.ms, d)
	}
}

// Publish measures the publisher: a conversation with a git view, commits
// made inside its container one at a time, each timed until the host's
// branch has it.
func Publish(ctx context.Context, opts PublishOptions) (_ PublishResult, err error) {
	if opts.Commits <= 0 {
		opts.Commits = 50
	}
	if opts.BigCommits <= 0 {
		opts.BigCommits = 10
	}
	if opts.BigFiles <= 0 {
		opts.BigFiles = 2000
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
	defer o.cleanupInto(ctx, 2*time.Minute, "publish", &err)
	defer o.publishing(ctx)()

	c, err := o.mgr.Create(ctx, conversation.CreateRequest{Workspace: repo, Worktree: true})
	if err != nil {
		return fail(err)
	}
	git, err := exec.LookPath("git")
	if err != nil {
		return fail(err)
	}
	// commitAndWait runs script inside (it must print the new commit) and
	// waits until the host's branch has that commit.
	commitAndWait := func(script string) (time.Duration, error) {
		var out bytes.Buffer
		code, err := o.rt.Exec(ctx, c.ContainerID, []string{"sh", "-c", "cd " + c.Worktree + " && " + script}, runtime.ExecOptions{Stdout: &out})
		if err != nil || code != 0 {
			return 0, fmt.Errorf("commit inside: exit %d: %v", code, err)
		}
		tip := strings.TrimSpace(out.String())
		t0 := time.Now()
		for {
			got, _ := runGit(ctx, git, repo, "rev-parse", "--verify", "--quiet", "refs/heads/"+c.Branch)
			if strings.TrimSpace(got) == tip {
				return time.Since(t0), nil
			}
			if time.Since(t0) > 30*time.Second {
				return 0, fmt.Errorf("commit %s did not reach the host in 30s", tip)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	var lat []time.Duration
	for i := range opts.Commits {
		d, err := commitAndWait(fmt.Sprintf("git -c user.name=bench -c user.email=b@x commit -q --allow-empty -m 'commit %d' && git branch -f side HEAD && git rev-parse HEAD", i))
		if err != nil {
			return fail(fmt.Errorf("commit %d: %w", i, err))
		}
		lat = append(lat, d)
	}
	slices.Sort(lat)
	res.P50, res.P99 = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
	steps.mu.Lock()
	res.Cost, res.MirrorCost = median(slices.Clone(steps.ds)), median(slices.Clone(steps.ms))
	steps.ds = nil
	steps.mu.Unlock()

	// Commits of many changed files (the test image has neither seq nor
	// mkdir: a shell loop writes them at the top).
	res.BigCommits, res.BigFiles = opts.BigCommits, opts.BigFiles
	var big []time.Duration
	for i := range opts.BigCommits {
		script := fmt.Sprintf("n=0; while [ $n -lt %d ]; do echo %d-$n > many-$n.txt; n=$((n+1)); done && "+
			"git add . && git -c user.name=bench -c user.email=b@x commit -q -m 'big %d' && git rev-parse HEAD", opts.BigFiles, i, i)
		d, err := commitAndWait(script)
		if err != nil {
			return fail(fmt.Errorf("big commit %d: %w", i, err))
		}
		big = append(big, d)
	}
	slices.Sort(big)
	if len(big) > 0 {
		res.BigP50, res.BigP99 = big[len(big)/2], big[min(len(big)-1, len(big)*99/100)]
	}
	steps.mu.Lock()
	res.BigCost = median(slices.Clone(steps.ds))
	steps.mu.Unlock()
	return res, nil
}
