package integration

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/failpoint"
	"github.com/ohd-dev/ohd/pkg/store"
)

// Bounds of TestBackendFaultInjection.
const (
	// faultEngineTimeout is ohd's --engine-timeout in the test: every
	// engine call on the wedged container gives up after it.
	faultEngineTimeout = 30 * time.Second
	// faultAPIBound is how long a call that touches no container (ohctl
	// ls, show) may take, however loaded the machine and whatever ohd
	// waits on elsewhere.
	faultAPIBound = 10 * time.Second
	// faultCallBound is how long any call may take: an exec on the
	// wedged container is given up by the exec's watchdog after the
	// engine timeout; every other call of an iteration ends with the
	// iteration's fault.
	faultCallBound = faultEngineTimeout + 60*time.Second
	// faultTermBound is systemd's stop budget: SIGTERM must stop ohd
	// within it whatever it is doing.
	faultTermBound = 10 * time.Second
	// faultReconcileBound is how long the next start may take to finish
	// what the fault interrupted (removals, undone creates).
	faultReconcileBound = 2 * time.Minute
)

// faultIterations is how many faults TestBackendFaultInjection injects: 50 by
// default (make test), OHD_FAULT_ITERATIONS for a longer run (make
// fault-long).
func faultIterations() int {
	if n, err := strconv.Atoi(os.Getenv("OHD_FAULT_ITERATIONS")); err == nil && n > 0 {
		return n
	}
	return 50
}

// faultConv is a conversation as TestBackendFaultInjection knows it.
type faultConv struct {
	c store.Conversation
	// commits are the commits the agent made (an exec that printed the
	// commit and exited 0): none may be lost, whatever the faults.
	commits []string
	// removed: its removal is done; restored: ohctl restore completed;
	// restoreInto: where its restore goes (set at the first attempt, so
	// a retry after a fault completes the same one).
	removed, restored bool
	restoreInto       string
}

// faultCall is one ohctl call of an iteration's workload.
type faultCall struct {
	op         string
	args       []string
	out        string
	err        error
	start, end time.Time
}

// faultRun is TestBackendFaultInjection's state.
type faultRun struct {
	t    *testing.T
	d    *daemon
	repo string
	rng  *rand.Rand

	convs   map[string]*faultConv
	wedged  *testenv.Wedged
	wedgedC *faultConv
	b       backend // the runtime ohd runs on

	// What was done, for the summary.
	kinds                                map[string]int
	firedPoints                          map[string]int
	calls                                map[string][2]int // op -> {completed, cut by the fault}
	restoreRetries, commitsChecked       int
	maxTerm, maxAPI, maxStartAPI, maxRec time.Duration
	maxStart                             time.Duration
	// deathAt is when the iteration's fault ended ohd (the signal sent,
	// or the failpoint's death seen).
	deathAt time.Time
}

var shaRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// TestBackendFaultInjection (issue 27, acceptance 5) injects a fault per
// iteration into an ohd busy with creates, removals, restores and
// agents committing (which publishes) and starting execs: a failpoint
// (pkg/failpoint, one of its steps at random, the workload made to
// reach it), a SIGKILL or a SIGTERM at a random moment. One of its
// conversations' containers is wedged for a stretch of iterations
// (testenv.Wedge: the engine hangs on it), and the package's wedged
// container (another program's) is there throughout. It checks, each
// iteration:
//
//   - no call waits longer than its deadline: ohctl ls answers within
//     faultAPIBound throughout (also while a removal waits on the
//     wedged container, and right after each restart), and every call
//     ends within faultCallBound; an exec on the wedged container gives
//     up at the engine timeout, and the log reports the call;
//   - no removal waits for another: with the wedged conversation's
//     removal under way, another conversation's removal completes, and
//     so does the restore of that other conversation;
//   - SIGTERM stops ohd within 10 s (faultTermBound), whatever it does;
//   - the next start finishes what the fault interrupted (no record in
//     provisioning, no removal or undo pending) within
//     faultReconcileBound, in the background while the API answers;
//   - no commit is lost: every commit an agent made is on a ref of the
//     host repository (its branch, a kept ref, a snapshot) once its
//     conversation is removed, and at the end for all;
//   - a restore interrupted by a fault is completed by running it again.
//
// It found two defects, fixed since: a freezing collect that outlived
// a killed ohd stopped the next ohd's own collect, whose removal then
// waited 10 minutes (freeze.Held), and an exec whose process started
// after a removal's freeze ran on unsaved (Manager.BeginExec).
//
// The random choices come from a seed printed at the start (set it with
// OHD_FAULT_SEED to replay the same choices); OHD_FAULT_ITERATIONS sets
// the number of iterations (50; `make fault-long` runs 500).
//
// On Kubernetes (TestBackendFaultInjection/kubernetes, run by make test-kube with
// OHD_FAULT_ITERATIONS from KUBECOUNTS) the wedge stops the pod's
// containerd shim, and the exec failpoints never fire (the exec API is one
// call: no exec steps), so those iterations end in the SIGKILL or SIGTERM
// that follows a failpoint that did not fire.
func TestBackendFaultInjection(t *testing.T) {
	eachBackend(t, testFaultInjection)
}

func testFaultInjection(t *testing.T, b backend) {
	testenv.RequireRoot(t) // the wedge signals the engine's shim
	t0 := time.Now()
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("OHD_FAULT_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d (OHD_FAULT_SEED=%d replays these choices)", seed, seed)
	var r *faultRun
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		t.Logf("failed with seed %d: OHD_FAULT_SEED=%d go test -race -count=1 -run TestBackendFaultInjection/%s ./integration/", seed, seed, b.name)
		// ohd's whole log (with a goroutine dump if a wait timed out),
		// kept past the test's temporary directories.
		if r != nil && r.d != nil {
			p := filepath.Join(os.TempDir(), fmt.Sprintf("ohd-fault-%d.log", seed))
			if err := os.WriteFile(p, []byte(r.d.logs.String()), 0o644); err == nil {
				t.Logf("ohd's log: %s", p)
			}
		}
	})
	n := faultIterations()
	dirs := newDirs(t)
	r = &faultRun{
		t:     t,
		repo:  testenv.NewRepo(t, testenv.RepoOptions{}),
		rng:   rand.New(rand.NewPCG(seed, 27)),
		convs: map[string]*faultConv{}, kinds: map[string]int{}, firedPoints: map[string]int{},
		calls: map[string][2]int{},
	}
	r.b = b
	r.d = b.start(t, daemonOptions{Failpoints: true, Dirs: &dirs, Args: []string{
		"--engine-timeout", faultEngineTimeout.String(),
	}})
	// Failpoints the workload can reach (release/mid-move needs git
	// directories the agent made in its tree, which this agent does not).
	var points []string
	for _, p := range failpoint.Steps {
		if p != "release/mid-move" {
			points = append(points, p)
		}
	}
	wedgeAt, releaseAt := n/4, n/4+max(3, n/10)
	for k := range n {
		r.d.stop() // ended by the last iteration's fault: a no-op
		if k == releaseAt && r.wedged != nil {
			r.wedged.Release()
			r.wedged = nil
		}
		point, kind := "", "kill"
		switch x := r.rng.IntN(10); {
		case x < 5:
			kind, point = "failpoint", points[r.rng.IntN(len(points))]
		case x < 7:
			kind = "term"
		}
		if k == wedgeAt {
			kind, point = "wedge", ""
		}
		r.kinds[kind]++
		r.d.opts.Env = nil
		if point != "" {
			r.d.opts.Env = []string{"OHD_FAILPOINTS=" + point}
		}
		what := fmt.Sprintf("iteration %d (%s %s)", k, kind, point)
		if !r.start(what) || !r.afterStart(what) {
			// The failpoint fired in the start or in what it finishes in
			// the background: recovering was the fault. Start again.
			r.firedPoints[point+" (recovering)"]++
			r.d.opts.Env = nil
			r.start(what + ", again")
			r.afterStart(what + ", again")
		}
		if r.t.Failed() {
			t.FailNow()
		}
		if r.d.opts.Env == nil && point != "" {
			continue // its fault was in the recovery
		}
		if kind == "wedge" {
			r.wedgeIteration()
		} else {
			r.faultIteration(k, kind, point)
		}
	}
	// No more faults: everything left is finished, removed and restored.
	r.d.stop()
	r.d.opts.Env = nil
	if r.wedged != nil {
		r.wedged.Release()
		r.wedged = nil
	}
	r.start("the end")
	r.afterStart("the end")
	r.finish()
	sent := time.Now()
	_ = r.d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.d.done:
	case <-time.After(faultTermBound):
		t.Errorf("ohd did not exit within %v of the last SIGTERM", faultTermBound)
	}
	r.maxTerm = max(r.maxTerm, time.Since(sent))
	var ops []string
	for op, c := range r.calls {
		ops = append(ops, fmt.Sprintf("%s %d/%d", op, c[0], c[0]+c[1]))
	}
	sort.Strings(ops)
	var fired []string
	for p, c := range r.firedPoints {
		fired = append(fired, fmt.Sprintf("%s×%d", p, c))
	}
	sort.Strings(fired)
	t.Logf("%d iterations in %v (seed %d): faults %v; failpoints that fired: %s; calls completed/made: %s; %d commit checks on the host's refs, %d restores run again after a fault; slowest: SIGTERM→exit %v, start until the API answered %v, ohctl ls %v (%v right after a start), reconcile done %v after the start",
		n, time.Since(t0).Round(time.Second), seed, r.kinds, strings.Join(fired, " "), strings.Join(ops, ", "), r.commitsChecked, r.restoreRetries,
		r.maxTerm.Round(time.Millisecond), r.maxStart.Round(time.Millisecond), r.maxAPI.Round(time.Millisecond), r.maxStartAPI.Round(time.Millisecond), r.maxRec.Round(time.Millisecond))
}

// start starts ohd after a fault and times it until its API answers;
// false if ohd died of its failpoint (SIGKILL) on the way.
func (r *faultRun) start(what string) bool {
	r.t.Helper()
	t0 := time.Now()
	if err := r.d.tryStart(); err != nil {
		if r.dead() && r.d.waitExit(time.Second) && len(r.d.opts.Env) > 0 {
			return false
		}
		r.t.Fatalf("%s: %v", what, err)
	}
	r.maxStart = max(r.maxStart, time.Since(t0))
	return true
}

// containerProcesses lists the processes of each container of ohd, with
// their state (T: stopped), for a failure's report.
func (r *faultRun) containerProcesses() string {
	if r.b.name != "docker" {
		return r.b.everything(r.t)
	}
	ids, err := testenv.Docker(15*time.Second, "ps", "-q", "--filter", "label=dev.ohd.server="+r.d.serverID())
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, id := range strings.Fields(ids) {
		out, err := testenv.Docker(15*time.Second, "top", id, "-o", "pid,ppid,stat,wchan:20,args")
		fmt.Fprintf(&b, "container %s: %v\n%s\n", id, err, out)
	}
	return b.String()
}

// dumpGoroutines makes ohd print its goroutines (SIGQUIT: it exits),
// into its log, which a failed test keeps.
func (r *faultRun) dumpGoroutines() {
	_ = r.d.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-r.d.done:
	case <-time.After(10 * time.Second):
		r.d.kill()
	}
}

// dead reports whether ohd has exited.
func (r *faultRun) dead() bool {
	select {
	case <-r.d.done:
		return true
	default:
		return false
	}
}

// lsAll lists every record; false if ohd has died (its failpoint).
func (r *faultRun) lsAll(what string) ([]store.Conversation, bool) {
	r.t.Helper()
	out, err := r.d.ohctlErr("--json", "ls", "--all")
	if err != nil {
		time.Sleep(100 * time.Millisecond)
		if r.dead() && r.d.waitExit(time.Second) && len(r.d.opts.Env) > 0 {
			return nil, false
		}
		r.t.Fatalf("%s: ohctl ls --all: %v\n%s", what, err, tail(grepOut(r.d.logs.String(), `"level":"DEBUG"`), 30))
	}
	var all []store.Conversation
	if err := jsonUnmarshal(out, &all); err != nil {
		r.t.Fatalf("%s: ohctl ls --all: %v\n%s", what, err, out)
	}
	return all, true
}

// call runs ohctl with a deadline check (faultCallBound) and records it.
func (r *faultRun) call(op string, args ...string) faultCall {
	c := faultCall{op: op, args: args, start: time.Now()}
	c.out, c.err = r.d.ohctlErr(args...)
	c.end = time.Now()
	if took := c.end.Sub(c.start); took > faultCallBound {
		r.t.Errorf("ohctl %s took %v, more than any call may (%v): %v", strings.Join(args, " "), took.Round(time.Millisecond), faultCallBound, c.err)
	}
	return c
}

// cut reports whether c failed because the iteration's fault ended ohd
// (it ended after, or just before, ohd was seen to go); otherwise ohd
// answered it with an error while it ran.
func (r *faultRun) cut(c faultCall) bool {
	return c.err != nil && !r.deathAt.IsZero() && c.end.After(r.deathAt.Add(-500*time.Millisecond))
}

// count records c in the summary.
func (r *faultRun) count(c faultCall) {
	v := r.calls[c.op]
	if c.err == nil {
		v[0]++
	} else {
		v[1]++
	}
	r.calls[c.op] = v
}

// sorted lists every conversation the test knows, by ID (the random
// choices then depend on the seed alone).
func (r *faultRun) sorted() []*faultConv {
	out := make([]*faultConv, 0, len(r.convs))
	for _, c := range r.convs {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].c.ID < out[j].c.ID })
	return out
}

// live lists the conversations a workload may use: live, not the wedged
// one, in a stable order.
func (r *faultRun) live() []*faultConv {
	var out []*faultConv
	for _, c := range r.convs {
		if !c.removed && c != r.wedgedC {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].c.ID < out[j].c.ID })
	return out
}

// afterStart checks the start that follows a fault: the API answers at
// once, and the start finishes within faultReconcileBound what the
// fault interrupted; then it takes in what the records say (removals
// done, conversations it did not know of) and checks that no commit of
// a removed conversation is lost.
func (r *faultRun) afterStart(what string) bool {
	t := r.t
	t.Helper()
	t0 := time.Now()
	all, ok := r.lsAll(what)
	if !ok {
		return false
	}
	r.maxStartAPI = max(r.maxStartAPI, time.Since(t0))
	if took := time.Since(t0); took > faultAPIBound {
		t.Errorf("%s: ohctl ls right after the start took %v: the start blocks the API", what, took)
	}
	for deadline := time.Now().Add(faultReconcileBound); ; time.Sleep(200 * time.Millisecond) {
		if all, ok = r.lsAll(what); !ok {
			return false
		}
		var pending []string
		for _, c := range all {
			if r.wedgedC != nil && c.ID == r.wedgedC.c.ID {
				continue // waits on the wedged container
			}
			switch {
			case c.State == store.StateProvisioning:
				pending = append(pending, c.ID+" provisioning")
			case c.Removal != nil && !c.Removal.Done:
				pending = append(pending, c.ID+" removal pending")
			case c.UndoPending:
				pending = append(pending, c.ID+" undo pending")
			}
		}
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: %v after the start, not finished: %v\n%s", what, faultReconcileBound, pending, tail(grepOut(r.d.logs.String(), `"level":"DEBUG"`), 30))
			t.Logf("the containers' processes:\n%s", r.containerProcesses())
			r.dumpGoroutines()
			return true
		}
	}
	r.maxRec = max(r.maxRec, time.Since(t0))
	for _, c := range all {
		fc := r.convs[c.ID]
		switch {
		case fc == nil && c.State.Live():
			// Made by a create whose answer the fault cut off.
			r.convs[c.ID] = &faultConv{c: c}
		case fc == nil:
		case !fc.removed && c.State == store.StateDeleted && c.Removal != nil && c.Removal.Done:
			fc.c, fc.removed = c, true
			r.checkCommits(what, fc)
		case !fc.removed && !c.State.Live():
			t.Errorf("%s: conversation %s, live before, is %s: %s", what, c.ID, c.State, c.Error)
			fc.c, fc.removed = c, true
		case !fc.removed:
			fc.c = c
		}
	}
	return true
}

// checkCommits checks that every commit the agent of fc made is on a
// ref of the host repository.
func (r *faultRun) checkCommits(what string, fc *faultConv) {
	r.t.Helper()
	for _, sha := range fc.commits {
		refs, err := testenv.GitOutput(r.repo, "-c", "safe.directory=*", "for-each-ref", "--contains", sha, "--format=%(refname)")
		if err != nil || strings.TrimSpace(refs) == "" {
			r.t.Errorf("%s: commit %s of conversation %s (removed: %v) is on no ref of the host repository: lost (%v)", what, sha, fc.c.ID, fc.removed, err)
		}
		r.commitsChecked++
	}
}

// create makes a conversation (no fault expected to cut it) and tracks
// it; false if the call failed.
func (r *faultRun) create() (faultCall, *faultConv) {
	c := r.call("create", "--json", "create", "--repo", r.repo, "--worktree")
	if c.err != nil {
		return c, nil
	}
	var conv store.Conversation
	if err := jsonUnmarshal(c.out, &conv); err != nil || conv.ID == "" {
		r.t.Errorf("ohctl create: %v\n%s", err, c.out)
		return c, nil
	}
	fc := &faultConv{c: conv}
	return c, fc
}

// commitScript is what the agent runs to commit: a file of its own, now
// and then a stash entry too (which a restore brings back), and the new
// commit printed.
func commitScript(c store.Conversation, tag string, stash bool) string {
	s := "cd " + c.Worktree + " && echo " + tag + " > " + tag + ".txt && git add " + tag + ".txt && git -c user.name=agent -c user.email=a@x commit -q -m " + tag
	if stash {
		s += " && echo stash > s-" + tag + ".txt && git add s-" + tag + ".txt && git -c user.name=agent -c user.email=a@x stash -q"
	}
	return s + " && git rev-parse HEAD"
}

// faultIteration runs a workload on the running ohd and ends it with a
// fault: the failpoint point (the workload made to reach it; SIGKILL or
// SIGTERM if it does not fire within a few seconds), a SIGKILL (kind
// "kill") or a SIGTERM ("term") at a random moment.
func (r *faultRun) faultIteration(k int, kind, point string) {
	t := r.t
	t.Helper()
	what := fmt.Sprintf("iteration %d (%s %s)", k, kind, point)
	r.deathAt = time.Time{}
	died := make(chan time.Time, 1)
	done := r.d.done // the next start makes another
	go func() { <-done; died <- time.Now() }()
	live := r.live()
	// Enough conversations to work with (a create/ failpoint fires here).
	wantCreate := strings.HasPrefix(point, "create/") || len(live) < 2 || r.rng.IntN(4) == 0
	var restoreOf *faultConv
	for _, fc := range r.sorted() {
		// Only a conversation whose agent committed has work to restore
		// (one that left nothing is refused as such).
		if fc.removed && !fc.restored && len(fc.commits) > 0 && fc.c.State == store.StateDeleted && (fc.restoreInto != "" || strings.HasPrefix(point, "restore/") || r.rng.IntN(6) == 0) {
			if restoreOf == nil || fc.restoreInto != "" {
				restoreOf = fc
			}
		}
	}
	var rmOf []*faultConv
	if len(live) >= 2 && (strings.HasPrefix(point, "delete/") || r.rng.IntN(2) == 0) {
		rmOf = append(rmOf, live[r.rng.IntN(len(live))])
		if len(live) >= 4 && r.rng.IntN(2) == 0 { // two removals at once
			for _, fc := range live {
				if fc != rmOf[0] {
					rmOf = append(rmOf, fc)
					break
				}
			}
		}
	}
	type committer struct {
		fc    *faultConv
		tag   string
		stash bool
	}
	var commits []committer
	for _, fc := range live {
		if r.rng.IntN(3) > 0 || strings.HasPrefix(point, "publish/") || strings.HasPrefix(point, "exec/") {
			commits = append(commits, committer{fc, fmt.Sprintf("k%d-%s", k, fc.c.ID[:8]), r.rng.IntN(4) == 0})
		}
	}
	var execOn *faultConv
	if len(live) > 0 {
		execOn = live[r.rng.IntN(len(live))]
	}
	// Early in the workload (most calls cut) or later (some done,
	// others deep in their work).
	killAfter := time.Duration(100+r.rng.IntN(2400)) * time.Millisecond
	if r.rng.IntN(2) == 0 {
		killAfter = time.Duration(2500+r.rng.IntN(3500)) * time.Millisecond
	}
	window := 6 * time.Second
	termInstead := r.rng.IntN(2) == 0

	var (
		mu      sync.Mutex
		results []faultCall
		wg      sync.WaitGroup
		stop    = make(chan struct{})
	)
	start := time.Now()
	record := func(c faultCall) { mu.Lock(); results = append(results, c); mu.Unlock() }
	newConvs := make(chan *faultConv, 1)
	committed := map[*faultConv]string{}
	if wantCreate {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, fc := r.create()
			record(c)
			newConvs <- fc
		}()
	}
	for _, fc := range rmOf {
		wg.Add(1)
		go func() {
			defer wg.Done()
			record(r.call("rm", "rm", fc.c.ID))
		}()
	}
	if restoreOf != nil {
		if restoreOf.restoreInto == "" {
			restoreOf.restoreInto = filepath.Join(testenv.TempDir(t), "restored")
		} else {
			r.restoreRetries++
		}
		into := restoreOf.restoreInto
		wg.Add(1)
		go func() {
			defer wg.Done()
			record(r.call("restore", "restore", restoreOf.c.ID, "--into", into))
		}()
	}
	for _, cm := range commits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := r.call("commit", "exec", cm.fc.c.ID, "--", "sh", "-c", commitScript(cm.fc.c, cm.tag, cm.stash))
			record(c)
			if sha := strings.TrimSpace(c.out); c.err == nil && shaRE.MatchString(sha) {
				mu.Lock()
				committed[cm.fc] = sha
				mu.Unlock()
			}
		}()
	}
	if execOn != nil {
		// Execs being started (as removals freeze containers).
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				select {
				case <-stop:
					return
				default:
				}
				c := r.call("exec", "exec", execOn.c.ID, "--", "sh", "-c", ":")
				record(c)
				if c.err != nil {
					return
				}
			}
		}()
	}
	// The API answers throughout.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
			c := r.call("ls", "ls")
			record(c)
			if c.err != nil {
				return
			}
		}
	}()

	// The fault.
	fault := func(term bool) {
		r.deathAt = time.Now()
		if !term {
			r.d.kill()
			return
		}
		_ = r.d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.d.done:
			r.maxTerm = max(r.maxTerm, time.Since(r.deathAt))
		case <-time.After(faultTermBound):
			t.Errorf("%s: ohd did not exit within %v of SIGTERM:\n%s", what, faultTermBound, tail(grepOut(r.d.logs.String(), `"level":"DEBUG"`), 30))
			r.d.kill()
		}
	}
	switch kind {
	case "failpoint":
		select {
		case at := <-died:
			r.deathAt = at
			if r.d.waitExit(time.Second) {
				r.firedPoints[point]++
			} else {
				t.Errorf("%s: ohd exited, not by the failpoint's SIGKILL: %v\n%s", what, r.d.err, tail(r.d.logs.String(), 20))
			}
		case <-time.After(window):
			fault(termInstead)
		}
	case "kill", "term":
		select {
		case at := <-died:
			t.Errorf("%s: ohd died on its own at %v: %v\n%s", what, at, r.d.err, tail(r.d.logs.String(), 20))
			r.deathAt = at
		case <-time.After(killAfter):
			fault(kind == "term")
		}
	}
	close(stop)
	wg.Wait()

	// Take in what the workload did; the log says what each call came to.
	var lines []string
	for _, c := range results {
		if c.op == "ls" {
			continue
		}
		res := "ok"
		if c.err != nil {
			res = "cut"
			if !r.cut(c) {
				res = "failed: " + strings.TrimSpace(c.err.Error())
			}
		}
		lines = append(lines, fmt.Sprintf("%s %s (%v)", c.op, res, c.end.Sub(c.start).Round(time.Millisecond)))
	}
	t.Logf("%s: fault after %v; %s", what, r.deathAt.Sub(start).Round(time.Millisecond), strings.Join(lines, "; "))
	if wantCreate {
		if fc := <-newConvs; fc != nil {
			r.convs[fc.c.ID] = fc
		}
	}
	for fc, sha := range committed {
		fc.commits = append(fc.commits, sha)
	}
	for _, c := range results {
		r.count(c)
		if c.op == "ls" && c.err == nil {
			r.maxAPI = max(r.maxAPI, c.end.Sub(c.start))
			if took := c.end.Sub(c.start); took > faultAPIBound {
				t.Errorf("%s: ohctl ls took %v (bound %v)", what, took.Round(time.Millisecond), faultAPIBound)
			}
		}
		if c.err == nil || r.cut(c) {
			if c.op == "restore" && c.err == nil {
				restoreOf.restored = true
				r.checkRestored(what, restoreOf)
			}
			continue
		}
		// ohd answered with an error while it ran: only an exec may
		// (its container frozen or gone under a removal).
		if c.op != "exec" && c.op != "commit" {
			var about string
			if len(c.args) > 1 && r.convs[c.args[1]] != nil {
				fc := r.convs[c.args[1]]
				about = fmt.Sprintf(" (its agent's commits %v, its removal %+v)", fc.commits, fc.c.Removal)
			}
			t.Errorf("%s: ohctl %s failed while ohd ran: %v%s\n%s", what, strings.Join(c.args, " "), c.err, about, c.out)
		}
	}
}

// checkRestored checks a completed restore: the restored worktree has
// the conversation's last commit.
func (r *faultRun) checkRestored(what string, fc *faultConv) {
	if len(fc.commits) == 0 {
		return
	}
	last := fc.commits[len(fc.commits)-1]
	if _, err := testenv.GitOutput(fc.restoreInto, "-c", "safe.directory=*", "merge-base", "--is-ancestor", last, "HEAD"); err != nil {
		r.t.Errorf("%s: the restore of %s into %s lacks its agent's last commit %s: %v", what, fc.c.ID, fc.restoreInto, last, err)
	}
}

// wedgeIteration wedges a conversation's container (W) whose commit is
// published and checks, while W's removal waits on it, that another
// conversation's removal completes, that the API answers, that an exec
// on W gives up at the engine timeout and the log names the call; then
// SIGTERM must stop ohd within 10 s. W stays wedged for the next
// iterations (their starts retry its removal in the background); it is
// released later and its removal must then finish with its commit kept.
func (r *faultRun) wedgeIteration() {
	t := r.t
	t.Helper()
	r.deathAt = time.Time{}
	for len(r.live()) < 2 {
		c, fc := r.create()
		if fc == nil {
			t.Fatalf("wedge: create: %v", c.err)
		}
		r.convs[fc.c.ID] = fc
	}
	live := r.live()
	w, b := live[0], live[1]
	for _, fc := range []*faultConv{w, b} {
		c := r.call("commit", "exec", fc.c.ID, "--", "sh", "-c", commitScript(fc.c, "wedge-"+fc.c.ID[:8], false))
		sha := strings.TrimSpace(c.out)
		if c.err != nil || !shaRE.MatchString(sha) {
			t.Fatalf("wedge: commit in %s: %v\n%s", fc.c.ID, c.err, c.out)
		}
		fc.commits = append(fc.commits, sha)
	}
	last := w.commits[len(w.commits)-1]
	waitFor(t, 2*time.Minute, "W's commit to be published", func() bool {
		_, err := testenv.GitOutput(r.repo, "merge-base", "--is-ancestor", last, "refs/heads/"+w.c.Branch)
		return err == nil
	})
	r.wedged = r.b.wedge(t, w.c.ContainerID)
	r.wedgedC = w
	// An exec on W, before W's removal holds execs off.
	execW := make(chan faultCall, 1)
	go func() { execW <- r.call("exec", "exec", w.c.ID, "--", "sh", "-c", ":") }()
	time.Sleep(500 * time.Millisecond)
	rmW := make(chan faultCall, 1)
	go func() { rmW <- r.call("rm", "rm", w.c.ID) }()
	waitFor(t, 30*time.Second, "W's removal to be marked", func() bool {
		var c store.Conversation
		r.d.ohctlJSON(&c, "show", w.c.ID)
		return c.Removal != nil
	})
	t0 := time.Now()
	if out, err := r.d.ohctlErr("ls"); err != nil || time.Since(t0) > faultAPIBound {
		t.Errorf("wedge: ohctl ls while W's removal waits: %v in %v\n%s", err, time.Since(t0), out)
	}
	rmB := r.call("rm", "rm", b.c.ID)
	if rmB.err != nil {
		t.Errorf("wedge: ohctl rm B while W's removal waits on its wedged container: %v\n%s", rmB.err, rmB.out)
	}
	b.removed = rmB.err == nil
	var restoreB faultCall
	if b.removed {
		r.d.ohctlJSON(&b.c, "show", b.c.ID)
		r.checkCommits("wedge", b)
		// Nor does a restore of another conversation wait for W's
		// removal.
		b.restoreInto = filepath.Join(testenv.TempDir(t), "restored")
		restoreB = r.call("restore", "restore", b.c.ID, "--into", b.restoreInto)
		if restoreB.err != nil {
			t.Errorf("wedge: ohctl restore B while W's removal waits: %v\n%s", restoreB.err, restoreB.out)
		} else {
			b.restored = true
			r.checkRestored("wedge", b)
		}
		r.count(restoreB)
	}
	select {
	case c := <-rmW:
		t.Errorf("wedge: W's removal returned (%v) before B's removal and restore did: the test shows nothing", c.err)
		rmW <- c
	default:
	}
	// The exec on W gives up at the engine timeout, and says so.
	ex := <-execW
	if ex.err == nil {
		t.Errorf("wedge: an exec on the wedged container succeeded")
	}
	if took := ex.end.Sub(ex.start); took > faultEngineTimeout+30*time.Second {
		t.Errorf("wedge: the exec on the wedged container took %v; its start has a deadline of %v", took, faultEngineTimeout)
	}
	if !strings.Contains(r.d.logs.String(), "on "+stalledObject(r.b, w.c.ContainerID)+" timed out at") {
		t.Errorf("wedge: ohd's log does not report the call on the wedged container that timed out:\n%s", tail(grepOut(r.d.logs.String(), `"level":"DEBUG"`), 20))
	}
	// SIGTERM while W's removal waits.
	r.deathAt = time.Now()
	_ = r.d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.d.done:
		r.maxTerm = max(r.maxTerm, time.Since(r.deathAt))
	case <-time.After(faultTermBound):
		t.Errorf("wedge: ohd did not exit within %v of SIGTERM while a removal waited on a wedged container", faultTermBound)
		r.d.kill()
	}
	cw := <-rmW
	r.count(cw)
	r.count(rmB)
	r.count(ex)
	t.Logf("wedge: W %s wedged; rm B %v (%v) and restore B %v (%v) while rm W waited; exec on W gave up after %v (%v); SIGTERM; rm W: %v",
		w.c.ID, rmB.err, rmB.end.Sub(rmB.start).Round(time.Millisecond), restoreB.err, restoreB.end.Sub(restoreB.start).Round(time.Millisecond),
		ex.end.Sub(ex.start).Round(time.Millisecond), ex.err, cw.err)
}

// finish ends the run without faults: W's removal finishes now that its
// container answers (or is run again if it gave up), every live
// conversation is removed, every interrupted restore completed; then no
// commit is lost, and the repository and ohd's state are clean.
func (r *faultRun) finish() {
	t := r.t
	t.Helper()
	if w := r.wedgedC; w != nil && !w.removed {
		var c store.Conversation
		waitFor(t, 3*time.Minute, "W's removal to finish or give up", func() bool {
			r.d.ohctlJSON(&c, "show", w.c.ID)
			return c.Removal == nil || c.Removal.Done
		})
		r.wedgedC = nil
		if c.State == store.StateDeleted {
			w.c, w.removed = c, true
			r.checkCommits("W after its release", w)
		} else {
			t.Logf("W's removal had given up (%s); removing it again", c.RemovalFailed)
		}
	}
	for _, fc := range r.live() {
		if c := r.call("rm", "rm", fc.c.ID); c.err != nil {
			t.Errorf("the end: ohctl rm %s: %v\n%s", fc.c.ID, c.err, c.out)
			continue
		}
		r.d.ohctlJSON(&fc.c, "show", fc.c.ID)
		fc.removed = true
	}
	for _, fc := range r.sorted() {
		id := fc.c.ID
		r.checkCommits("the end", fc)
		if fc.restoreInto != "" && !fc.restored {
			r.restoreRetries++
			if c := r.call("restore", "restore", id, "--into", fc.restoreInto); c.err != nil {
				t.Errorf("the end: the restore of %s interrupted earlier does not complete: %v\n%s", id, c.err, c.out)
			} else {
				fc.restored = true
				r.checkRestored("the end", fc)
			}
		}
		if fc.restored {
			testenv.Git(t, r.repo, "-c", "safe.directory=*", "worktree", "remove", "--force", fc.restoreInto)
		}
	}
	checkInvariants(t, r.d, r.repo)
}
