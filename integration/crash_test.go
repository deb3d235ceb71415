package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/internal/testimage"
	"github.com/ohd-dev/ohd/pkg/store"
)

// checkInvariants asserts what must hold after any crash and reconcile:
// no container without a live record, no orphan socket directory, no
// stale or prunable worktree registration, no record stuck in
// provisioning.
func checkInvariants(t testing.TB, d *daemon, repos ...string) []store.Conversation {
	t.Helper()
	var convs []store.Conversation
	d.ohctlJSON(&convs, "ls", "--all")
	live := map[string]store.Conversation{}
	for _, c := range convs {
		if c.State == store.StateProvisioning {
			t.Errorf("record %s stuck in provisioning", c.ID)
		}
		if c.State.Live() {
			live[c.ID] = c
		}
	}
	if d.opts.Runtime == "docker" {
		out := run(t, "docker", "ps", "-a", "--filter", "label=dev.ohd.server="+d.serverID(), "--format", `{{.ID}} {{.Label "dev.ohd.conversation"}}`)
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if line == "" {
				continue
			}
			id, conv, _ := strings.Cut(line, " ")
			if _, ok := live[conv]; !ok {
				t.Errorf("container %s of conversation %s has no live record", id, conv)
			}
		}
	}
	entries, _ := os.ReadDir(filepath.Join(d.dirs.Run, "conversations"))
	for _, e := range entries {
		if _, ok := live[e.Name()]; !ok {
			t.Errorf("socket directory %s has no live record", e.Name())
		}
	}
	for _, repo := range repos {
		wts := porcelain(t, repo)
		for _, e := range wts[1:] {
			if _, ok := e["prunable"]; ok {
				t.Errorf("%s: prunable registration %v", repo, e)
			}
			owned := false
			for _, c := range live {
				owned = owned || c.Worktree == e["worktree"]
			}
			if !owned {
				t.Errorf("%s: registration %s belongs to no live conversation", repo, e["worktree"])
			}
		}
		admin, _ := os.ReadDir(filepath.Join(repo, ".git", "worktrees"))
		if len(admin) != len(wts)-1 {
			t.Errorf("%s: %d admin dirs for %d registrations", repo, len(admin), len(wts)-1)
		}
	}
	return convs
}

// assertNothingLeft asserts that a failed or undone create left nothing of
// itself: no container of d's server, no socket directory, no worktree
// registration, branch or folder in repo.
func assertNothingLeft(t testing.TB, d *daemon, repo string) {
	t.Helper()
	if out := run(t, "docker", "ps", "-aq", "--filter", "label=dev.ohd.server="+d.serverID()); strings.TrimSpace(out) != "" {
		t.Errorf("containers left: %s", out)
	}
	if entries, _ := os.ReadDir(filepath.Join(d.dirs.Run, "conversations")); len(entries) != 0 {
		t.Errorf("socket dirs left: %v", entries)
	}
	if got := porcelain(t, repo); len(got) != 1 {
		t.Errorf("worktrees left: %v", got)
	}
	if refs := testenv.Git(t, repo, "for-each-ref", "--format=%(refname)"); strings.Contains(refs, "openhands/") {
		t.Errorf("branches left:\n%s", refs)
	}
	if entries, _ := os.ReadDir(d.dirs.Worktrees); len(entries) != 0 {
		t.Errorf("worktree folders left: %v", entries)
	}
}

// crashRuns is how many times each crash point runs: 3 in the default
// test run, OHD_CRASH_RUNS for a longer one.
func crashRuns() int {
	if n, err := strconv.Atoi(os.Getenv("OHD_CRASH_RUNS")); err == nil && n > 0 {
		return n
	}
	return 3
}

// gitProcessesUnder lists the git processes whose command line names a
// path under one of dirs: the children of a killed ohd must not outlive
// it.
func gitProcessesUnder(dirs ...string) []string {
	var found []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || len(b) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if filepath.Base(args[0]) != "git" {
			continue
		}
		line := strings.Join(args, " ")
		for _, d := range dirs {
			if strings.Contains(line, d) {
				found = append(found, filepath.Dir(p)+": "+line)
				break
			}
		}
	}
	return found
}

// snapshotRefs lists refs/ohd/snapshots/ of repo.
func snapshotRefs(t testing.TB, repo string) []string {
	t.Helper()
	out := strings.TrimSpace(testenv.Git(t, repo, "-c", "safe.directory=*", "for-each-ref", "--format=%(refname)", "refs/ohd/snapshots/"))
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

func TestCrashAtEveryStep(t *testing.T) {
	testenv.RequireDocker(t)
	img := testimage.Ensure(t)
	createPoints := []string{
		"create/after-record", "create/mid-view", "create/after-worktree", "create/after-broker",
		"create/after-container-created", "create/after-container-started", "create/after-start",
	}
	deletePoints := []string{
		"delete/after-mark", "delete/after-container", "delete/after-broker", "delete/mid-snapshot", "delete/after-worktree",
	}
	runs := crashRuns()
	dirs := newDirs(t)
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	opts := daemonOptions{Runtime: "docker", Failpoints: true, Dirs: &dirs, Args: []string{"--image", img, "--memory", "268435456"}}
	d := startDaemon(t, opts)
	t.Cleanup(func() { removeServerContainers(t, d) })
	count := 0
	crashWith := func(point string, action func()) {
		t.Helper()
		d.stop()
		d.opts.Env = []string{"OHD_FAILPOINTS=" + point}
		d.start()
		action()
		if !d.waitExit(120e9) {
			t.Fatalf("%s: ohd did not die of SIGKILL: %v\n%s", point, d.err, tail(d.logs.String(), 20))
		}
		if procs := gitProcessesUnder(repo, dirs.Worktrees); len(procs) > 0 {
			t.Errorf("%s: git children of the killed ohd are still running: %v", point, procs)
		}
		d.opts.Env = nil
		d.start() // reconcile
		count++
	}
	for run := 0; run < runs; run++ {
		for _, point := range createPoints {
			snapsBefore := snapshotRefs(t, repo)
			crashWith(point, func() {
				if _, err := d.ohctlErr("create", "--repo", repo, "--worktree"); err == nil {
					t.Errorf("%s: create succeeded through a crash", point)
				}
			})
			convs := checkInvariants(t, d, repo)
			for _, c := range convs {
				if c.State == store.StateRunning {
					t.Errorf("%s: a conversation survived the crashed create as running: %s", point, c.ID)
				}
			}
			// Never running: undone without a snapshot of a half checkout.
			if snaps := snapshotRefs(t, repo); len(snaps) != len(snapsBefore) {
				t.Errorf("%s: the undone create left snapshots: %v, before %v", point, snaps, snapsBefore)
			}
		}
		for _, point := range deletePoints {
			var c store.Conversation
			d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
			testenv.WriteFile(t, filepath.Join(c.Worktree, "unsaved.txt"), point+"\n")
			testenv.WriteFile(t, filepath.Join(c.Worktree, "README.md"), "changed by "+point+"\n")
			// A tag made in the view: kept by the removal however it was
			// interrupted.
			d.inside(c, "git -c user.name=a -c user.email=a@x commit -q --allow-empty -m 'tagged "+point+"' && git -c user.name=a -c user.email=a@x tag -a -m t crash-tag HEAD && git reset -q --soft HEAD~1")
			crashWith(point, func() {
				if _, err := d.ohctlErr("rm", c.ID); err == nil {
					t.Errorf("%s: rm succeeded through a crash", point)
				}
			})
			checkInvariants(t, d, repo)
			var after store.Conversation
			d.ohctlJSON(&after, "show", c.ID)
			if after.State != store.StateDeleted || after.Removal == nil || !after.Removal.Done {
				t.Errorf("%s: removal not finished after restart: %s %+v", point, after.State, after.Removal)
				continue
			}
			ref := "refs/ohd/snapshots/" + c.ID
			if got, err := testenv.GitOutput(repo, "show", ref+":unsaved.txt"); err != nil || got != point {
				t.Errorf("%s: snapshot lacks the untracked file: %q %v", point, got, err)
			}
			if got, err := testenv.GitOutput(repo, "show", ref+":README.md"); err != nil || got != "changed by "+point {
				t.Errorf("%s: snapshot lacks the modified file: %q %v", point, got, err)
			}
			if got, err := testenv.GitOutput(repo, "log", "-1", "--format=%s", "refs/ohd/kept/"+c.ID+"/tags/crash-tag"); err != nil || got != "tagged "+point {
				t.Errorf("%s: the view's tag was not kept: %q %v", point, got, err)
			}
		}
		// A publish interrupted after its import finishes after the restart.
		var c store.Conversation
		d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
		crashWith("publish/after-import", func() {
			d.inside(c, "git -c user.name=a -c user.email=a@x commit -q --allow-empty -m published")
		})
		tip := d.inside(c, "git rev-parse HEAD")
		waitHostRef(t, repo, "refs/heads/"+c.Branch, tip, 10*time.Second)
		checkInvariants(t, d, repo)
		d.ohctl("rm", c.ID)
	}
	t.Logf("crash points × runs: %d × %d = %d crashes, every one recovered", len(createPoints)+len(deletePoints)+1, runs, count)
	// Everything left can be cleaned.
	out := run(t, "docker", "ps", "-aq", "--filter", "label=dev.ohd.server="+d.serverID())
	if strings.TrimSpace(out) != "" {
		t.Errorf("containers left at the end: %s", out)
	}
	_ = exec.Command
}
