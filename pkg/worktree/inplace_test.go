package worktree

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/worktree/mountplan"
)

// addInPlace adds an in-place conversation for repo.
func addInPlace(t testing.TB, m *Manager, repo Repo) Worktree {
	t.Helper()
	plan, err := m.PlanInPlace(testCtx(t), repo, newID(t))
	if err != nil {
		t.Fatalf("PlanInPlace: %v", err)
	}
	wt, err := m.AddInPlace(testCtx(t), plan)
	if err != nil {
		t.Fatalf("AddInPlace: %v", err)
	}
	return wt
}

// inPlaceView runs git as the agent does in place: in the folder, with
// the view as its git dir (mounted over the folder's .git in the
// container).
func inPlaceView(t testing.TB, wt Worktree, args ...string) string {
	t.Helper()
	out, err := testenv.GitOutput(wt.Path, append([]string{"-c", "safe.directory=*", "--git-dir=" + wt.View, "--work-tree=" + wt.Path}, args...)...)
	if err != nil {
		t.Fatalf("git %v in the view: %v\n%s", args, err, out)
	}
	return out
}

func TestInPlaceSeedPublishRemove(t *testing.T) {
	m := newManager(t)
	dir := testenv.NewRepo(t, testenv.RepoOptions{})
	hostGit(t, dir, "branch", "feature")
	repo := mustInspect(t, m, dir)
	id := newID(t)
	plan, err := m.PlanInPlace(testCtx(t), repo, id)
	if err != nil {
		t.Fatalf("PlanInPlace: %v", err)
	}
	main := hostGit(t, dir, "rev-parse", "main")
	if !plan.InPlace || plan.Path != dir || plan.ViewBranch != "main" || plan.StartCommit != main || plan.AdminID != "" {
		t.Fatalf("PlanInPlace = %+v", plan)
	}
	before := listing(t, filepath.Join(dir, ".git"))
	wt, err := m.AddInPlace(testCtx(t), plan)
	if err != nil {
		t.Fatalf("AddInPlace: %v", err)
	}
	if host := hostGit(t, dir, "rev-parse", "refs/heads/"+wt.Branch); host != main {
		t.Errorf("host %s = %s, want %s", wt.Branch, host, main)
	}
	// Mounts: the folder, the view over its .git, the real store read-only.
	mounts, err := m.MountPlan(wt)
	if err != nil {
		t.Fatalf("MountPlan: %v", err)
	}
	want := map[string]mountplan.Mount{
		dir:                        {Source: dir, Target: dir},
		filepath.Join(dir, ".git"): {Source: wt.View, Target: filepath.Join(dir, ".git")},
	}
	for _, mt := range mounts {
		if w, ok := want[mt.Target]; ok && w != mt {
			t.Errorf("mount %s = %+v, want %+v", mt.Target, mt, w)
		}
		delete(want, mt.Target)
		if mt.Source == filepath.Join(dir, ".git") && !mt.ReadOnly {
			t.Errorf("the real git dir is mounted writable: %+v", mt)
		}
		if mt.Source == filepath.Join(dir, ".git", "objects") && !mt.ReadOnly {
			t.Errorf("the real object store is mounted writable: %+v", mt)
		}
	}
	if len(want) > 0 {
		t.Errorf("missing mounts: %v (got %+v)", want, mounts)
	}
	// The agent works: a commit on main in the view, a side branch.
	if got := inPlaceView(t, wt, "symbolic-ref", "HEAD"); got != "refs/heads/main" {
		t.Errorf("the view's HEAD = %q", got)
	}
	testenv.WriteFile(t, filepath.Join(dir, "new.txt"), "agent\n")
	inPlaceView(t, wt, "add", "new.txt")
	inPlaceView(t, wt, "-c", "user.name=a", "-c", "user.email=a@x", "commit", "-qm", "agent")
	inPlaceView(t, wt, "-c", "user.name=a", "-c", "user.email=a@x", "branch", "side")
	tip, err := m.ViewBranch(wt)
	if err != nil || !isHexID(tip) {
		t.Fatalf("ViewBranch = %q, %v", tip, err)
	}
	if _, err := m.Publish(testCtx(t), wt, &hostSandbox{wt: wt}, tip, wt.StartCommit); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if host := hostGit(t, dir, "rev-parse", "refs/heads/"+wt.Branch); host != tip {
		t.Errorf("host %s = %s, want %s", wt.Branch, host, tip)
	}
	if host := hostGit(t, dir, "rev-parse", "main"); host != main {
		t.Errorf("the host's main moved to %s", host)
	}
	res, err := m.Remove(testCtx(t), wt, RemoveOptions{Sandbox: &hostSandbox{wt: wt}, Published: tip})
	if err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if !res.BranchKept {
		t.Errorf("Remove = %+v", res)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "new.txt")); err != nil || string(b) != "agent\n" {
		t.Errorf("the folder lost new.txt: %q %v", b, err)
	}
	if exists(t, filepath.Join(m.Root(), id)) {
		t.Errorf("%s is still there", filepath.Join(m.Root(), id))
	}
	// The real git dir: only ohd's own branch (and its reflog) and new
	// objects; HEAD, index, config, other refs as they were.
	after := listing(t, filepath.Join(dir, ".git"))
	for _, l := range before {
		found := false
		for _, a := range after {
			found = found || a == l
		}
		if !found {
			t.Errorf("the real git dir lost or changed %s", l)
		}
	}
}

// TestInPlaceViewSeesARacilyCleanChange: a change the user made at the
// same size in the second of their last index write shows in the agent's
// view. The view's index is a copy of the host's; with a new time, git in
// the view took the file for unchanged (status clean, commit -a without
// it).
func TestInPlaceViewSeesARacilyCleanChange(t *testing.T) {
	m := newManager(t)
	dir := testenv.NewRepo(t, testenv.RepoOptions{})
	raceIndex(t, dir, filepath.Join(dir, ".git", "index"))
	wt := addInPlace(t, m, mustInspect(t, m, dir))
	if got := inPlaceView(t, wt, "--no-optional-locks", "status", "--porcelain"); got != "M last.txt" {
		t.Errorf("status in the view = %q, want last.txt modified, as on the host", got)
	}
}

func TestInPlaceRemoveUnusedDeletesBranch(t *testing.T) {
	m := newManager(t)
	dir := testenv.NewRepo(t, testenv.RepoOptions{})
	hostGit(t, dir, "checkout", "-q", "--detach")
	repo := mustInspect(t, m, dir)
	plan, err := m.PlanInPlace(testCtx(t), repo, newID(t))
	if err != nil {
		t.Fatal(err)
	}
	if plan.ViewBranch != "" {
		t.Errorf("a detached host HEAD gave the view branch %q, want the conversation's own", plan.ViewBranch)
	}
	wt, err := m.AddInPlace(testCtx(t), plan)
	if err != nil {
		t.Fatal(err)
	}
	if got := inPlaceView(t, wt, "symbolic-ref", "HEAD"); got != "refs/heads/"+wt.Branch {
		t.Errorf("the view's HEAD = %q", got)
	}
	res, err := m.Remove(testCtx(t), wt, RemoveOptions{Sandbox: &hostSandbox{wt: wt}, Published: wt.StartCommit})
	if err != nil || !res.BranchDeleted {
		t.Fatalf("Remove = %+v, %v; want the unused branch deleted", res, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "README.md")); err != nil {
		t.Errorf("the folder lost README.md: %v", err)
	}
}

func TestInPlaceUnbornBranch(t *testing.T) {
	m := newManager(t)
	dir := filepath.Join(testenv.TempDir(t), "empty")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.Git(t, dir, "init", "-q", "-b", "main")
	plan, err := m.PlanInPlace(testCtx(t), mustInspect(t, m, dir), newID(t))
	if err != nil || plan.StartCommit != "" || plan.ViewBranch != "main" {
		t.Fatalf("PlanInPlace on an unborn branch = %+v, %v", plan, err)
	}
	wt, err := m.AddInPlace(testCtx(t), plan)
	if err != nil {
		t.Fatal(err)
	}
	testenv.WriteFile(t, filepath.Join(dir, "first.txt"), "first\n")
	inPlaceView(t, wt, "add", "first.txt")
	inPlaceView(t, wt, "-c", "user.name=a", "-c", "user.email=a@x", "commit", "-qm", "first")
	tip, err := m.ViewBranch(wt)
	if err != nil || !isHexID(tip) {
		t.Fatalf("ViewBranch = %q, %v", tip, err)
	}
	if _, err := m.Publish(testCtx(t), wt, &hostSandbox{wt: wt}, tip, ""); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if host := hostGit(t, dir, "rev-parse", "refs/heads/"+wt.Branch); host != tip {
		t.Errorf("host %s = %s, want %s", wt.Branch, host, tip)
	}
	if out, err := testenv.GitOutput(dir, "rev-parse", "--verify", "--quiet", "refs/heads/main"); err == nil {
		t.Errorf("the host's unborn main was born: %s", out)
	}
	if _, err := m.Remove(testCtx(t), wt, RemoveOptions{Sandbox: &hostSandbox{wt: wt}, Published: tip}); err != nil {
		t.Fatalf("Remove: %v", err)
	}
}

// TestInPlaceMountsSubmodules: in place, the submodules' git dirs are
// mounted read-only where git inside looks for them (the view has an
// empty directory there), and each submodule's .git file read-only: the
// common dir's modules/ for the main work tree, the admin dir's for a
// folder that is a linked worktree.
func TestInPlaceMountsSubmodules(t *testing.T) {
	for _, linked := range []bool{false, true} {
		t.Run(map[bool]string{false: "main", true: "linked"}[linked], func(t *testing.T) {
			m := newManager(t)
			dir := testenv.NewRepo(t, testenv.RepoOptions{})
			other := testenv.NewRepo(t, testenv.RepoOptions{})
			hostGit(t, dir, "-c", "protocol.file.allow=always", "submodule", "add", "-q", other, "sub")
			hostGit(t, dir, "commit", "-qm", "submodule")
			folder := dir
			if linked {
				folder = filepath.Join(testenv.TempDir(t), "linked")
				hostGit(t, dir, "worktree", "add", "-q", folder)
				hostGit(t, folder, "-c", "protocol.file.allow=always", "submodule", "update", "-q", "--init")
			}
			wt := addInPlace(t, m, mustInspect(t, m, folder))
			mounts, err := m.MountPlan(wt)
			if err != nil {
				t.Fatalf("MountPlan: %v", err)
			}
			modules, viewModules := filepath.Join(dir, ".git", "modules"), filepath.Join(wt.View, "modules")
			if linked {
				modules, viewModules = filepath.Join(wt.AdminDir, "modules"), filepath.Join(wt.View, "worktrees", wt.AdminID, "modules")
			}
			want := map[string]bool{modules: false, filepath.Join(folder, "sub", ".git"): false}
			view := -1
			for i, mt := range mounts {
				if mt.Target == wt.CommonDir {
					view = i
				}
				if _, ok := want[mt.Target]; !ok {
					continue
				}
				want[mt.Target] = true
				if mt.Source != mt.Target || !mt.ReadOnly {
					t.Errorf("mount %+v, want %s read-only at its own path", mt, mt.Target)
				}
				if view < 0 {
					t.Errorf("mount %+v comes before the view's, which would hide it", mt)
				}
			}
			for target, found := range want {
				if !found {
					t.Errorf("no mount of %s in %+v", target, mounts)
				}
			}
			if st, err := os.Lstat(viewModules); err != nil || !st.IsDir() {
				t.Errorf("the view has no modules directory to mount on: %v", err)
			}
		})
	}
}

// TestInPlaceProtectsUnpopulatedSubmodules: the user's next git status on
// the host enters every populated submodule, and a submodule is populated
// when its directory has a .git: so an unpopulated one's directory is
// mounted read-only (made, as git's checkout makes it, when missing), at
// every depth, and a submodule path that is not a directory is refused.
func TestInPlaceProtectsUnpopulatedSubmodules(t *testing.T) {
	m := newManager(t)
	deep := testenv.NewRepo(t, testenv.RepoOptions{})
	inner := testenv.NewRepo(t, testenv.RepoOptions{})
	hostGit(t, inner, "-c", "protocol.file.allow=always", "submodule", "add", "-q", deep, "deep")
	hostGit(t, inner, "commit", "-qm", "deep")
	dir := testenv.NewRepo(t, testenv.RepoOptions{})
	hostGit(t, dir, "-c", "protocol.file.allow=always", "submodule", "add", "-q", inner, "sub")
	hostGit(t, dir, "-c", "protocol.file.allow=always", "submodule", "add", "-q", deep, "lib/sub2")
	hostGit(t, dir, "commit", "-qm", "submodules")
	// sub is populated, its own deep is not (an empty directory); lib/sub2
	// is gone altogether.
	if err := os.RemoveAll(filepath.Join(dir, "lib")); err != nil {
		t.Fatal(err)
	}
	wt := addInPlace(t, m, mustInspect(t, m, dir))
	mounts, err := m.MountPlan(wt)
	if err != nil {
		t.Fatalf("MountPlan: %v", err)
	}
	got := map[string]bool{}
	for _, mt := range mounts {
		if mt.Source == mt.Target && mt.ReadOnly {
			got[mt.Target] = true
		}
	}
	for _, p := range []string{"sub/.git", "sub/deep", "lib/sub2"} {
		if !got[filepath.Join(dir, p)] {
			t.Errorf("%s is not mounted read-only at its own path: %+v", p, mounts)
		}
	}
	if st, err := os.Lstat(filepath.Join(dir, "lib", "sub2")); err != nil || !st.IsDir() {
		t.Errorf("the missing submodule directory was not made: %v", err)
	}
	if got := hostGit(t, dir, "status", "--porcelain"); got != "" {
		t.Errorf("host status after the plan = %q, want clean (an empty submodule directory is git's own)", got)
	}

	// A submodule path that is a file cannot be kept from becoming a
	// directory with a .git: refused, saying what to do.
	if err := os.Remove(filepath.Join(dir, "lib", "sub2")); err != nil {
		t.Fatal(err)
	}
	testenv.WriteFile(t, filepath.Join(dir, "lib", "sub2"), "a file\n")
	if _, err := m.MountPlan(wt); err == nil || !errors.Is(err, ErrInvalidWorktree) || !strings.Contains(err.Error(), "git submodule update --init lib/sub2") {
		t.Errorf("MountPlan with a file at a submodule path = %v, want a refusal naming git submodule update", err)
	}
}
