package worktree

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// mirrorNow runs one round of the publisher's live mirror.
func mirrorNow(t *testing.T, m *Manager, wt Worktree) MirrorResult {
	t.Helper()
	refs, err := m.ViewRefs(wt)
	if err != nil {
		t.Fatalf("ViewRefs: %v", err)
	}
	res, err := m.Mirror(testCtx(t), wt, &hostSandbox{wt: wt}, m.Mirrored(wt, refs))
	if err != nil {
		t.Fatalf("Mirror: %v", err)
	}
	return res
}

// TestMirrorSurvivesHostGC: the agent's side branch on a host commit,
// its annotated tag and its new branch are mirrored under
// refs/ohd/live/<id>/; the host then deletes the branch the side branch
// came from, expires its reflogs and prunes: the view is intact, the
// deleted ref's mirror goes when the agent deletes its branch, and the
// removal keeps the side branch and the tag (listed in its result) and
// drops the mirror. The host's fsck is clean throughout.
func TestMirrorSurvivesHostGC(t *testing.T) {
	m := newManager(t)
	dir := testenv.NewRepo(t, testenv.RepoOptions{})
	hostGit(t, dir, "checkout", "-q", "-b", "feature")
	testenv.WriteFile(t, filepath.Join(dir, "feature.txt"), "feature\n")
	hostGit(t, dir, "add", "feature.txt")
	hostGit(t, dir, "commit", "-qm", "feature")
	feature := hostGit(t, dir, "rev-parse", "HEAD")
	hostGit(t, dir, "checkout", "-q", "-")
	repo := mustInspect(t, m, dir)
	wt := addView(t, m, repo, newID(t), "")
	id := wt.ConversationID

	inView(t, wt, "branch", "side", "feature")
	inView(t, wt, "-c", "user.name=agent", "-c", "user.email=a@x", "tag", "-a", "-m", "agent's tag", "v-agent", "HEAD")
	inView(t, wt, "checkout", "-q", "-b", "topic")
	topic := commitInView2(t, wt, "topic.txt")
	inView(t, wt, "checkout", "-q", wt.Branch)
	res := mirrorNow(t, m, wt)
	if res.Updated != 3 {
		t.Errorf("Mirror updated %d refs, want 3 (side, topic, v-agent): %v", res.Updated, res.Live)
	}
	for ref, want := range map[string]string{"heads/side": feature, "heads/topic": topic, "tags/v-agent": inView(t, wt, "rev-parse", "v-agent")} {
		if got := hostGit(t, dir, "rev-parse", "refs/ohd/live/"+id+"/"+ref); got != want {
			t.Errorf("host refs/ohd/live/%s/%s = %s, want %s", id, ref, got, want)
		}
	}
	if out := hostGit(t, dir, "for-each-ref", "--format=%(refname)", LivePrefix(id)); strings.Contains(out, "heads/main") || strings.Contains(out, wt.Branch) {
		t.Errorf("seeded or own refs mirrored:\n%s", out)
	}

	hostGit(t, dir, "branch", "-D", "feature")
	hostGit(t, dir, "reflog", "expire", "--expire=now", "--all")
	hostGit(t, dir, "gc", "-q", "--prune=now")
	if got := inView(t, wt, "log", "-1", "--format=%s", "side"); got != "feature" {
		t.Errorf("the view's side branch after the host's gc: %q", got)
	}
	hostGit(t, dir, "fsck", "--strict", "--no-dangling")

	inView(t, wt, "branch", "-D", "topic")
	if res := mirrorNow(t, m, wt); res.Deleted != 1 {
		t.Errorf("Mirror after a branch deletion deleted %d, want 1", res.Deleted)
	}
	if _, err := testenv.GitOutput(dir, "-c", "safe.directory=*", "rev-parse", "--verify", "--quiet", "refs/ohd/live/"+id+"/heads/topic"); err == nil {
		t.Error("the deleted branch's mirror is still on the host")
	}

	rres, err := m.Remove(testCtx(t), wt, RemoveOptions{Sandbox: &hostSandbox{wt: wt}, Published: wt.StartCommit})
	if err != nil {
		t.Fatalf("Remove: %v", err)
	}
	for _, want := range []string{KeptRef(id, "refs/heads/side"), KeptRef(id, "refs/tags/v-agent")} {
		if !slices.Contains(rres.Kept, want) {
			t.Errorf("Remove kept %v, want %s", rres.Kept, want)
		}
	}
	if got := hostGit(t, dir, "cat-file", "-t", KeptRef(id, "refs/tags/v-agent")); got != "tag" {
		t.Errorf("the kept tag is a %s, want the annotated tag", got)
	}
	if out := hostGit(t, dir, "for-each-ref", LivePrefix(id)); out != "" {
		t.Errorf("the live mirror is left after removal:\n%s", out)
	}
	hostGit(t, dir, "fsck", "--strict", "--no-dangling")
}

func commitInView2(t *testing.T, wt Worktree, name string) string {
	t.Helper()
	testenv.WriteFile(t, filepath.Join(wt.Path, name), name+"\n")
	inView(t, wt, "add", name)
	inView(t, wt, "-c", "user.name=agent", "-c", "user.email=a@x", "commit", "-qm", name)
	return inView(t, wt, "rev-parse", "HEAD")
}

// TestHostRemoteFollowsTheHost: the view's remote "host" shows the host's
// branches as they move (after RefreshHostView), fetches without copying
// objects, and never shows refs/ohd/ or other conversations' branches.
func TestHostRemoteFollowsTheHost(t *testing.T) {
	m, dir, repo, wt := newView(t)
	other := addView(t, m, repo, newID(t), "")
	inView(t, other, "branch", "other-side")
	mirrorNow(t, m, other) // refs/ohd/live/<other>/... on the host
	main := hostGit(t, dir, "symbolic-ref", "--short", "HEAD")
	testenv.WriteFile(t, filepath.Join(dir, "host.txt"), "new on the host\n")
	hostGit(t, dir, "add", "host.txt")
	hostGit(t, dir, "commit", "-qm", "host moves on")
	moved := hostGit(t, dir, "rev-parse", "HEAD")
	changed, err := m.RefreshHostView(testCtx(t), wt)
	if err != nil || !changed {
		t.Fatalf("RefreshHostView = %v, %v; want a change", changed, err)
	}
	if changed, _ := m.RefreshHostView(testCtx(t), wt); changed {
		t.Error("RefreshHostView changed again with nothing new")
	}
	inView(t, wt, "fetch", "-q", "host")
	if got := inView(t, wt, "rev-parse", "refs/remotes/host/"+main); got != moved {
		t.Errorf("host/%s in the view = %s, want the host's %s", main, got, moved)
	}
	ls := inView(t, wt, "ls-remote", "host")
	if strings.Contains(ls, "refs/ohd/") || strings.Contains(ls, "openhands/") {
		t.Errorf("git ls-remote host shows ohd's or conversations' refs:\n%s", ls)
	}
	if n, _ := filepath.Glob(filepath.Join(wt.View, "objects", "pack", "*")); len(n) != 0 {
		t.Errorf("the fetch copied objects into the view: %v", n)
	}
	mounts, err := m.MountPlan(wt)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mt := range mounts {
		found = found || (mt.Source == hostViewPath(wt) && mt.Target == mt.Source && mt.ReadOnly)
	}
	if !found {
		t.Errorf("MountPlan lacks the host remote, read-only: %+v", mounts)
	}
}
