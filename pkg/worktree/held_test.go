package worktree

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// plantGitlink makes, as the agent in place, a repository of its own at
// x in the folder (its fsmonitor touches marker) and commits it in the
// view as a gitlink; it returns the view's new commit.
func plantGitlink(t *testing.T, m *Manager, wt Worktree, marker string) string {
	t.Helper()
	x := filepath.Join(wt.Path, "x")
	testenv.Git(t, wt.Path, "init", "-q", "x")
	testenv.Git(t, x, "-c", "user.name=a", "-c", "user.email=a@x", "commit", "-q", "--allow-empty", "-m", "agent's")
	testenv.Git(t, x, "config", "core.fsmonitor", "touch "+marker+"; false")
	inPlaceView(t, wt, "add", "x")
	inPlaceView(t, wt, "-c", "user.name=a", "-c", "user.email=a@x", "commit", "-qm", "add x")
	tip, err := m.ViewBranch(wt)
	if err != nil || !isHexID(tip) {
		t.Fatalf("ViewBranch = %q, %v", tip, err)
	}
	return tip
}

// userMergeAndStatus merges ref into the user's checked-out branch on the
// host and runs their git status there (git's default config); it reports
// whether marker appeared.
func userMergeAndStatus(t *testing.T, dir, ref, marker string) bool {
	t.Helper()
	testenv.Git(t, dir, "-c", "user.name=u", "-c", "user.email=u@x", "merge", "-q", "--no-edit", ref)
	_, _ = testenv.GitOutput(dir, "status")
	_, err := os.Stat(marker)
	return err == nil
}

// TestPublishHoldsAGitlinkIntoTheAgentsRepo: in place, the agent makes a
// repository x of its own in the folder and commits it as a gitlink.
// Published, the user's merge of openhands/<id> and next git status would
// enter x as a submodule (GIT_DIR set: no ownership check) and run its
// fsmonitor (the control merges the held commit and it fires). So the
// publish is held: the branch stays, the commit is under
// refs/ohd/held/<id>/, the error says which path. In place it stays held
// while the conversation runs even once x is empty (the agent could fill
// it again after a merge); the removal's last publish, x holding no
// repository, moves the branch and drops the held ref, and the user's
// merge and status run nothing.
func TestPublishHoldsAGitlinkIntoTheAgentsRepo(t *testing.T) {
	m := newManager(t)
	dir := testenv.NewRepo(t, testenv.RepoOptions{})
	wt := addInPlace(t, m, mustInspect(t, m, dir))
	marker := filepath.Join(testenv.TempDir(t), "fired")
	tip := plantGitlink(t, m, wt, marker)

	res, err := m.Publish(testCtx(t), wt, &hostSandbox{wt: wt}, tip, wt.StartCommit)
	held := HeldRef(wt.ConversationID, "refs/heads/"+wt.Branch)
	if !errors.Is(err, ErrHeld) || res.Held != held || len(res.HeldPaths) != 1 || res.HeldPaths[0] != "x" {
		t.Fatalf("Publish = %+v, %v; want held as %s for x", res, err, held)
	}
	if host := hostGit(t, dir, "rev-parse", "refs/heads/"+wt.Branch); host != wt.StartCommit {
		t.Errorf("host %s = %s, want it left at the start %s", wt.Branch, host, wt.StartCommit)
	}
	if got := hostGit(t, dir, "rev-parse", held); got != tip {
		t.Errorf("%s = %s, want the held commit %s", held, got, tip)
	}
	if userMergeAndStatus(t, dir, "refs/heads/"+wt.Branch, marker) {
		t.Fatal("the user's merge of the published branch and git status ran the agent's fsmonitor")
	}

	// Control, on a copy: merging the held commit itself makes the user's
	// git status run it.
	ctl := filepath.Join(testenv.TempDir(t), "copy")
	if err := os.CopyFS(ctl, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if !userMergeAndStatus(t, ctl, held, marker) {
		t.Fatal("control: merging the held commit did not make git status run the agent's fsmonitor: the attack is broken")
	}
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}

	// The agent's repository goes; in place, while the conversation runs,
	// the commit stays held (the agent could make the repository again
	// after the user merged it)...
	if err := os.RemoveAll(filepath.Join(dir, "x", ".git")); err != nil {
		t.Fatal(err)
	}
	res, err = m.Publish(testCtx(t), wt, &hostSandbox{wt: wt}, tip, wt.StartCommit)
	if !errors.Is(err, ErrHeld) || res.Held != held {
		t.Fatalf("Publish in place while running, x empty = %+v, %v; want still held", res, err)
	}
	// ... and is published when it ends: the branch moves, the held ref
	// goes, and the user's merge and git status run nothing.
	rm, err := m.Remove(testCtx(t), wt, RemoveOptions{Sandbox: &hostSandbox{wt: wt}, Published: wt.StartCommit})
	if err != nil || rm.Published != tip || rm.Held != "" {
		t.Fatalf("Remove once x holds no repository = %+v, %v; want %s published", rm, err, tip)
	}
	if refExists(t, dir, held) {
		t.Errorf("%s is still there after the last publish", held)
	}
	if userMergeAndStatus(t, dir, "refs/heads/"+wt.Branch, marker) {
		t.Error("after the publish, the user's merge and git status ran the agent's fsmonitor")
	}
}

// TestRemoveInPlaceHoldsAGitlinkIntoTheAgentsRepo: the removal's last
// publish holds such a commit too, and says so; the branch keeps what was
// published before.
func TestRemoveInPlaceHoldsAGitlinkIntoTheAgentsRepo(t *testing.T) {
	m := newManager(t)
	dir := testenv.NewRepo(t, testenv.RepoOptions{})
	wt := addInPlace(t, m, mustInspect(t, m, dir))
	tip := plantGitlink(t, m, wt, filepath.Join(testenv.TempDir(t), "fired"))
	res, err := m.Remove(testCtx(t), wt, RemoveOptions{Sandbox: &hostSandbox{wt: wt}, Published: wt.StartCommit})
	held := HeldRef(wt.ConversationID, "refs/heads/"+wt.Branch)
	if err != nil || res.Held != held || len(res.HeldPaths) != 1 || res.HeldMessage == "" {
		t.Fatalf("Remove = %+v, %v; want the last commit held as %s", res, err, held)
	}
	if got := hostGit(t, dir, "rev-parse", held); got != tip {
		t.Errorf("%s = %s, want %s", held, got, tip)
	}
	if out, err := testenv.GitOutput(dir, "rev-parse", "--verify", "--quiet", "refs/heads/"+wt.Branch); err == nil && out != wt.StartCommit+"\n" {
		t.Errorf("host %s = %q, want the start commit or no branch", wt.Branch, out)
	}
	t.Logf("message: %s", res.Message)
}

// TestPublishInAWorktreeHoldsOnlyOverARepository: in a worktree (whose
// directories go with it, and which the user's main work tree does not
// share), a gitlink the agent adds is held only while its directory in
// the worktree holds a repository, and published as soon as it does not.
func TestPublishInAWorktreeHoldsOnlyOverARepository(t *testing.T) {
	m, _, _, wt := newView(t)
	x := filepath.Join(wt.Path, "x")
	testenv.Git(t, wt.Path, "init", "-q", "x")
	testenv.Git(t, x, "-c", "user.name=a", "-c", "user.email=a@x", "commit", "-q", "--allow-empty", "-m", "agent's")
	inView(t, wt, "add", "x")
	inView(t, wt, "-c", "user.name=a", "-c", "user.email=a@x", "commit", "-qm", "add x")
	tip, err := m.ViewBranch(wt)
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.Publish(testCtx(t), wt, &hostSandbox{wt: wt}, tip, wt.StartCommit)
	if !errors.Is(err, ErrHeld) || len(res.HeldPaths) != 1 || res.HeldPaths[0] != "x" {
		t.Fatalf("Publish over x's repository = %+v, %v; want held for x", res, err)
	}
	if err := os.RemoveAll(filepath.Join(x, ".git")); err != nil {
		t.Fatal(err)
	}
	if res, err := m.Publish(testCtx(t), wt, &hostSandbox{wt: wt}, tip, wt.StartCommit); err != nil || res.Published != tip {
		t.Fatalf("Publish once x holds no repository = %+v, %v; want published", res, err)
	}
}
