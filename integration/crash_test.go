package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/control"
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
	if d.opts.Runtime != "local" {
		// The engine finishes a container create whose client (an ohd
		// killed mid-create) died, so such a container can appear after
		// reconcile; ohd's periodic sweep (every 30 s) removes it.
		orphans := func() []string {
			var out []string
			for id, conv := range backendOf(d).ofServer(t, d.serverID()) {
				if _, ok := live[conv]; !ok {
					out = append(out, "container "+id+" of conversation "+conv)
				}
			}
			return out
		}
		deadline := time.Now().Add(45 * time.Second)
		left := orphans()
		for len(left) > 0 && time.Now().Before(deadline) {
			time.Sleep(time.Second)
			left = orphans()
		}
		for _, o := range left {
			t.Errorf("%s has no live record, 45 s after reconcile", o)
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
			// What each holds says which step left it.
			var what []string
			for _, e := range admin {
				in, _ := os.ReadDir(filepath.Join(repo, ".git", "worktrees", e.Name()))
				var names []string
				for _, f := range in {
					names = append(names, f.Name())
				}
				what = append(what, e.Name()+": "+strings.Join(names, " "))
			}
			t.Errorf("%s: %d admin dirs for %d registrations:\n%s\nregistrations: %v", repo, len(admin), len(wts)-1, strings.Join(what, "\n"), wts[1:])
		}
		// A registration's removal moves it out of worktrees/ first
		// (pkg/worktree/admindir Remove): nothing of one is left once
		// reconcile finished.
		if left, _ := filepath.Glob(filepath.Join(repo, ".git", "ohd-removing-*")); len(left) > 0 {
			t.Errorf("%s: an interrupted admin dir removal left %v", repo, left)
		}
	}
	return convs
}

// assertNothingLeft asserts that a failed or undone create left nothing of
// itself: no container of d's server, no socket directory, no worktree
// registration, branch or folder in repo.
func assertNothingLeft(t testing.TB, d *daemon, repo string) {
	t.Helper()
	if left := backendOf(d).ofServer(t, d.serverID()); len(left) != 0 {
		t.Errorf("containers left: %s", left)
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
// path under one of dirs and that are still there a moment after ohd
// died: the children of a killed ohd must not outlive it (the kernel's
// parent-death signal reaches them as ohd dies; they may take a few
// milliseconds to go, or longer when a write holds them in the kernel: one
// with SIGKILL pending is dying, and runs nothing of its own again).
func gitProcessesUnder(dirs ...string) []string {
	var found []string
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if found = gitProcessesNow(dirs); len(found) == 0 || time.Now().After(deadline) {
			return found
		}
	}
}

// procDying reads /proc/<pid>/status (dir is /proc/<pid>): the process's
// state line, and whether SIGKILL is pending for it (to it or to its
// thread group), so that it will never return to user space.
func procDying(dir string) (state string, dying bool) {
	b, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return "gone", true
	}
	const sigkill = 1 << (9 - 1)
	for _, line := range strings.Split(string(b), "\n") {
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimSpace(value)
		switch name {
		case "State":
			state = value
		case "SigPnd", "ShdPnd":
			if mask, err := strconv.ParseUint(value, 16, 64); err == nil && mask&sigkill != 0 {
				dying = true
			}
		}
	}
	return state, dying
}

// gitProcessesNow is one look at /proc for gitProcessesUnder.
func gitProcessesNow(dirs []string) []string {
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
				if state, dying := procDying(filepath.Dir(p)); !dying {
					found = append(found, filepath.Dir(p)+" ("+state+"): "+line)
				}
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

func TestBackendCrashAtEveryStep(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		createPoints := []string{
			"create/after-record", "create/mid-view", "create/after-worktree", "create/after-broker",
			"create/after-container-created", "create/after-container-started", "create/after-start",
		}
		deletePoints := []string{
			"delete/after-mark", "delete/mid-snapshot", "delete/after-save", "delete/after-container", "delete/after-broker", "delete/mid-admin", "delete/after-trash", "delete/after-worktree",
		}
		runs := crashRuns()
		dirs := newDirs(t)
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		d := b.start(t, daemonOptions{Failpoints: true, Dirs: &dirs})
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
			var removed []store.Conversation
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
				// ohd answers at once (the removal finishes in the
				// background, not before ohd listens), and finishes it.
				if _, err := d.ohctlErr("ls"); err != nil {
					t.Errorf("%s: ohd does not answer right after its restart: %v", point, err)
				}
				waitForState(t, d, c.ID, store.StateDeleted, 2*time.Minute)
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
				removed = append(removed, c)
			}
			// A restore killed at each of its steps is completed by running
			// it again (issue 27: a kill left a half-made worktree, with an
			// index.lock and every file a staged deletion, and the retry was
			// refused as "already restored").
			for i, point := range []string{"restore/after-journal", "restore/mid-checkout"} {
				c := removed[i]
				into := filepath.Join(testenv.TempDir(t), "restored")
				crashWith(point, func() {
					if _, err := d.ohctlErr("restore", c.ID, "--into", into); err == nil {
						t.Errorf("%s: restore succeeded through a crash", point)
					}
				})
				if out, err := d.ohctlErr("restore", c.ID, "--into", into); err != nil {
					t.Errorf("%s: the restore after the crash: %v\n%s", point, err, out)
					continue
				}
				status, err := testenv.GitOutput(into, "status", "--porcelain")
				if err != nil || !strings.Contains(status, "M README.md") || !strings.Contains(status, "?? unsaved.txt") || strings.Contains(status, "D ") {
					t.Errorf("%s: restored status = %q, %v; want the work as uncommitted changes, nothing deleted", point, status, err)
				}
				if _, err := os.Stat(filepath.Join(repo, ".git", "worktrees")); err == nil {
					if locks, _ := filepath.Glob(filepath.Join(repo, ".git", "worktrees", "*", "index.lock")); len(locks) > 0 {
						t.Errorf("%s: index.lock left: %v", point, locks)
					}
				}
				if got, err := testenv.GitOutput(repo, "log", "-1", "--format=%s", "refs/tags/crash-tag"); err != nil || !strings.HasPrefix(got, "tagged ") {
					if got2, err2 := testenv.GitOutput(repo, "tag", "--list", "*crash-tag"); err2 != nil || got2 == "" {
						t.Errorf("%s: the agent's tag did not come back: %q %v", point, got2, err)
					}
				}
				testenv.Git(t, repo, "worktree", "remove", "--force", into)
				// The next run's conversations start from the host's refs:
				// the restored tags would be theirs.
				for _, tag := range strings.Fields(testenv.Git(t, repo, "tag", "--list", "*crash-tag")) {
					testenv.Git(t, repo, "tag", "-d", tag)
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
		// git worktree add killed right after it opened commondir leaves it
		// empty, which breaks `git worktree list`, gc and branch deletion in
		// the whole repository: reconcile's undo must remove that admin dir.
		id := store.NewID()
		crashWith("create/after-record", func() {
			_, err := control.NewClient(d.socket).Create(context.Background(), control.CreateRequest{ID: id, Repo: repo, Worktree: true})
			if err == nil {
				t.Error("create succeeded through a crash")
			}
			d.waitExit(60e9)
			admin := filepath.Join(repo, ".git", "worktrees", "repo")
			wt := filepath.Join(dirs.Worktrees, id, "repo")
			for p, content := range map[string]string{
				filepath.Join(admin, "locked"):    "ohd conversation " + id,
				filepath.Join(admin, "gitdir"):    wt + "/.git\n",
				filepath.Join(admin, "commondir"): "",
				filepath.Join(wt, ".git"):         "gitdir: " + admin + "\n",
			} {
				testenv.WriteFile(t, p, content)
			}
			if _, err := testenv.GitOutput(repo, "-c", "safe.directory=*", "gc", "-q"); err == nil {
				t.Error("the planted half registration does not break git gc: the test plants the wrong thing")
			}
		})
		if out, err := testenv.GitOutput(repo, "-c", "safe.directory=*", "worktree", "list", "--porcelain"); err != nil || strings.Contains(out, id) {
			t.Errorf("after reconcile: git worktree list = %v\n%s", err, out)
		}
		if _, err := testenv.GitOutput(repo, "-c", "safe.directory=*", "gc", "-q"); err != nil {
			t.Errorf("after reconcile git gc still fails: %v", err)
		}
		t.Logf("crash points × runs: %d × %d + 1 = %d crashes, every one recovered", len(createPoints)+len(deletePoints)+1, runs, count)
		// Everything left can be cleaned.
		if left := b.ofServer(t, d.serverID()); len(left) != 0 {
			t.Errorf("containers left at the end: %v", left)
		}
	})
}

// bigRepo makes a repository of n files in a few directories, owned by
// owner when given.
func bigRepo(t testing.TB, n int, owner *testenv.Owner) string {
	t.Helper()
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	for i := range n {
		p := filepath.Join(repo, fmt.Sprintf("d%02d", i%30), fmt.Sprintf("f%04d.txt", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(fmt.Sprintf("file %d\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Git(t, repo, "add", "-A")
	testenv.Git(t, repo, "commit", "-q", "-m", fmt.Sprintf("%d files", n))
	if owner != nil {
		testenv.ChownR(t, repo, owner.UID, owner.GID)
	}
	return repo
}

// TestBackendCrashRandomKills SIGKILLs ohd at random moments while creates and
// removals run concurrently in two repositories (one of 3,000 files, one
// owned by uid 1000), and checks after every restart that reconcile left
// the repositories usable and every record finished (issue 11, acceptance
// 6).
func TestBackendCrashRandomKills(t *testing.T) {
	testenv.RequireRoot(t)
	eachBackend(t, func(t *testing.T, b backend) {
		kills := 40
		if n, err := strconv.Atoi(os.Getenv("OHD_CRASH_KILLS")); err == nil && n > 0 {
			kills = n
		}
		repos := []string{bigRepo(t, 3000, nil), bigRepo(t, 50, &testenv.Owner{UID: 1000, GID: 1000})}
		dirs := newDirs(t)
		d := b.start(t, daemonOptions{Dirs: &dirs})
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
		seed := rng.Uint64()
		rng = rand.New(rand.NewPCG(seed, 7))
		t.Logf("seed %d", seed)
		checked, violations := 0, 0
		check := func(what string, ok bool, format string, args ...any) {
			checked++
			if !ok {
				violations++
				t.Errorf(what+": "+format, args...)
			}
		}
		everRunning := map[string]bool{}
		for k := range kills {
			// Work in flight: creates in both repositories, removals of what runs.
			var live []store.Conversation
			d.ohctlJSON(&live, "ls")
			var wg sync.WaitGroup
			for i := range 2 + rng.IntN(2) {
				repo := repos[(k+i)%2]
				wg.Add(1)
				go func() {
					defer wg.Done()
					out, err := d.ohctlErr("--json", "create", "--repo", repo, "--worktree")
					var c store.Conversation
					if err == nil && json.Unmarshal([]byte(out), &c) == nil && c.ID != "" {
						// Not testenv.WriteFile: t.Fatal must not run off the test's goroutine.
						if err := os.WriteFile(filepath.Join(c.Worktree, "wip.txt"), []byte("work of "+c.ID+"\n"), 0o644); err != nil {
							t.Errorf("write into the new worktree %s: %v", c.Worktree, err)
						}
					}
				}()
			}
			for _, c := range live {
				everRunning[c.ID] = true
				if rng.IntN(2) == 0 {
					wg.Add(1)
					go func(id string) {
						defer wg.Done()
						_, _ = d.ohctlErr("rm", id)
					}(c.ID)
				}
			}
			time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
			d.kill()
			wg.Wait()
			procs := gitProcessesUnder(append(append([]string{}, repos...), dirs.Worktrees)...)
			check("kill "+strconv.Itoa(k), len(procs) == 0, "git children outlived ohd: %v", procs)
			d.start() // reconcile
			// Interrupted removals are finished in the background once ohd
			// listens (never before it): wait for them, then check.
			var all []store.Conversation
			for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(300 * time.Millisecond) {
				all = nil
				d.ohctlJSON(&all, "ls", "--all")
				pending := false
				for _, c := range all {
					pending = pending || (c.Removal != nil && !c.Removal.Done)
				}
				if !pending || time.Now().After(deadline) {
					break
				}
			}
			for _, c := range all {
				check("kill "+strconv.Itoa(k), c.State != store.StateProvisioning, "record %s stuck in provisioning", c.ID)
				check("kill "+strconv.Itoa(k), c.Removal == nil || c.Removal.Done, "removal of %s not finished; ohd said:\n%s", c.ID, linesAbout(d.logs.String(), c.ID, 12))
				if c.State == store.StateFailed && !everRunning[c.ID] {
					_, err := testenv.GitOutput(c.Repo, "-c", "safe.directory=*", "rev-parse", "--verify", "--quiet", "refs/ohd/snapshots/"+c.ID)
					check("kill "+strconv.Itoa(k), err != nil, "undone create %s has a snapshot", c.ID)
				}
				if c.State == store.StateDeleted && c.Removal != nil && c.Removal.SnapshotRef != "" {
					_, err := testenv.GitOutput(c.Repo, "-c", "safe.directory=*", "rev-parse", "--verify", "--quiet", c.Removal.SnapshotRef)
					check("kill "+strconv.Itoa(k), err == nil, "snapshot %s of %s is gone", c.Removal.SnapshotRef, c.ID)
				}
				if c.State.Live() && c.Worktree != "" {
					_, err := os.Stat(filepath.Join(c.Worktree, ".git"))
					check("kill "+strconv.Itoa(k), err == nil, "live %s has no worktree: %v", c.ID, err)
				}
			}
			for _, repo := range repos {
				out, err := testenv.GitOutput(repo, "-c", "safe.directory=*", "worktree", "list", "--porcelain")
				check("kill "+strconv.Itoa(k), err == nil, "git worktree list in %s: %v", repo, err)
				check("kill "+strconv.Itoa(k), !strings.Contains(out, "prunable"), "prunable registration in %s:\n%s", repo, out)
				_, err = testenv.GitOutput(repo, "-c", "safe.directory=*", "fsck", "--connectivity-only", "--no-dangling")
				check("kill "+strconv.Itoa(k), err == nil, "git fsck in %s: %v", repo, err)
			}
			checkInvariants(t, d, repos...)
			checked += 3
		}
		// Everything still there can be removed, and nothing is left behind.
		var all []store.Conversation
		d.ohctlJSON(&all, "ls")
		for _, c := range all {
			d.ohctl("rm", c.ID)
		}
		checkInvariants(t, d, repos...)
		t.Logf("%d kills × invariants: %d checks, %d violations", kills, checked, violations)
	})
}

// linesAbout returns the last n warning or error lines of a daemon's log
// that mention id.
func linesAbout(log, id string, n int) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, id) && (strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`)) {
			out = append(out, l)
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return strings.Join(out, "\n")
}
