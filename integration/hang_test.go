package integration

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// TestBackendWedgedContainerHangsNothing (issue 27, acceptance 1 and 3;
// issue 29, acceptance 4): the engine hangs on conversation A's container
// (backend.wedge: its shim stopped; on Kubernetes the pod's, so the
// kubelet's exec and kill of the pod hang while the API server answers).
// `ohctl rm A` gives up on each engine call at its deadline
// (--engine-timeout) and `ohctl show A` says which call timed out when;
// `ohctl rm B` of another conversation does not wait for A's; SIGTERM
// stops ohd within 10 s (systemd's budget) while A's removal is stuck;
// the next start finishes A's removal in the background, its API
// answering at once, and A's commit is not lost.
func TestBackendWedgedContainerHangsNothing(t *testing.T) {
	eachBackend(t, testWedgedContainerHangsNothing)
}

func testWedgedContainerHangsNothing(t *testing.T, be backend) {
	t0 := time.Now()
	phase := func(what string) { t.Logf("%6.1fs %s", time.Since(t0).Seconds(), what) }
	d := be.daemon(t, "--engine-timeout", "30s")
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	var a, b store.Conversation
	d.ohctlJSON(&a, "create", "--repo", repo, "--worktree")
	d.ohctlJSON(&b, "create", "--repo", repo, "--worktree")
	if code, out := d.execIn(a.ID, "sh", "-c", "cd "+a.Worktree+" && echo work > agent.txt && git add agent.txt && git -c user.name=agent -c user.email=a@x commit -q -m 'agent commit'"); code != 0 {
		t.Fatalf("commit in A: %d %s", code, out)
	}
	// Published before the wedge, so that a removal that gives up (the
	// conversation runs on) is shown to keep it too.
	waitFor(t, time.Minute, "A's commit to be published", func() bool {
		got, err := testenv.GitOutput(repo, "log", "-1", "--format=%s", "openhands/"+a.ID)
		return err == nil && got == "agent commit"
	})
	w := be.wedge(t, a.ContainerID)
	phase("created A and B, committed in A, wedged A's container")

	type result struct {
		out string
		err error
	}
	rmA := make(chan result, 1)
	go func() {
		out, err := d.ohctlErr("rm", a.ID)
		rmA <- result{out, err}
	}()
	// A's removal is under way (marked) before B's starts.
	waitFor(t, 30*time.Second, "A's removal to be marked", func() bool {
		var c store.Conversation
		d.ohctlJSON(&c, "show", a.ID)
		return c.Removal != nil
	})
	if out, err := d.ohctlErr("rm", b.ID); err != nil {
		t.Fatalf("ohctl rm B while A's container is wedged: %v\n%s", err, out)
	}
	phase("removed B")
	// The engine (the kubelet, the node's container runtime) goes on with
	// other containers: a new conversation starts, runs a command and is
	// removed while A's container is wedged.
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
	if code, out := d.execIn(c.ID, "sh", "-c", "cd "+c.Worktree+" && git status --short"); code != 0 {
		t.Errorf("exec in C, created while A's container is wedged: %d %s", code, out)
	}
	if out, err := d.ohctlErr("rm", "--discard", c.ID); err != nil {
		t.Errorf("ohctl rm C while A's container is wedged: %v\n%s", err, out)
	}
	phase("created, used and removed C")
	select {
	case r := <-rmA:
		t.Fatalf("A's removal returned before B's finished (%q, %v): the test shows nothing", r.out, r.err)
	default:
	}
	// The stall is reported, with the call, the container and the time.
	// It was seen at about 118 s on a loaded machine (the removal's calls
	// before the one that stalls each take their time): 4 minutes keeps
	// the wait well inside the package's budget without racing it.
	waitFor(t, 4*time.Minute, "ohctl show A to report the engine stall", func() bool {
		return strings.Contains(d.ohctl("show", a.ID), "engine stall")
	})
	show := d.ohctl("show", a.ID)
	t.Logf("ohctl show A:\n%s", grepLines(show, "stall"))
	if !strings.Contains(show, "on "+stalledObject(be, a.ContainerID)) || !strings.Contains(show, "timed out at") {
		t.Errorf("ohctl show A does not name the stalled call's container and time:\n%s", show)
	}
	doc, _ := d.ohctlErr("doctor")
	if !strings.Contains(doc, "timed out at") {
		t.Errorf("ohctl doctor does not report the stall:\n%s", doc)
	}
	// ... with what the operator can do about it: the engine's fix.
	fix := "restart the Docker engine"
	if be.name == "kubernetes" {
		fix = "restart its container runtime (containerd) and then the kubelet"
	}
	if !strings.Contains(doc, fix) {
		t.Errorf("ohctl doctor does not say what to do about the stall (%q):\n%s", fix, doc)
	}
	if !strings.Contains(d.logs.String(), "on "+stalledObject(be, a.ContainerID)+" timed out at") {
		t.Errorf("ohd's log does not report the stalled call:\n%s", tail(grepOut(d.logs.String(), `"level":"DEBUG"`), 20))
	}

	phase("the stall is shown")
	// SIGTERM while A's removal waits on the wedged container.
	sent := time.Now()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		t.Logf("ohd exited %v after SIGTERM", time.Since(sent).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatalf("ohd did not exit within 10 s of SIGTERM while a removal waited on a wedged container:\n%s", tail(d.logs.String(), 30))
	}

	// The engine recovers; the next start finishes A's removal in the
	// background (or, if A's removal had given up before the SIGTERM and
	// left A running, a new `ohctl rm` does).
	w.Release()
	d.restart()
	d.ohctl("ls") // the API answers at once
	phase("restarted")
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
		var c store.Conversation
		d.ohctlJSON(&c, "show", a.ID)
		if c.State == store.StateDeleted {
			break
		}
		if c.Removal == nil && c.RemovalFailed != "" {
			// Given up with the state consistent: A runs on, the record
			// says which call timed out, and its commit is published. (A
			// new rm may still time out: after its own pause on a
			// container whose agent was SIGSTOPped, this engine (cgroup
			// v1) can stay stuck on it; see the report of issue 27.)
			t.Logf("A's removal had given up before the SIGTERM: %s", c.RemovalFailed)
			if !c.State.Live() || !strings.Contains(c.RemovalFailed, "timed out at") {
				t.Errorf("A after a removal that gave up: state %s, %q; want live, naming the call that timed out", c.State, c.RemovalFailed)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("A's interrupted removal did not finish in 3 minutes (state %s, removal %+v, removal failed %q; container exists %v, runs %v):\n%s",
				c.State, c.Removal, c.RemovalFailed, be.exists(t, a.ContainerID), be.running(t, a.ContainerID), tail(grepOut(d.logs.String(), `"level":"DEBUG"`), 40))
		}
	}
	phase("A removed, or its removal given up")
	if got, err := testenv.GitOutput(repo, "log", "-1", "--format=%s", "openhands/"+a.ID); err != nil || got != "agent commit" {
		t.Errorf("A's branch after the removal = %q, %v; want its agent commit kept", got, err)
	}
}

// grepOut drops the lines of s that contain pat.
func grepOut(s, pat string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.Contains(l, pat) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// stalledObject is how a stall names container id: "container <short
// id>" on Docker, "pod <name>" on Kubernetes (whose ids are
// "<name>/<uid>").
func stalledObject(b backend, id string) string {
	if b.name == "kubernetes" {
		name, _, _ := strings.Cut(id, "/")
		return "pod " + name
	}
	return "container " + id[:12]
}
