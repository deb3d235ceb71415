package worktree

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// containerOnlyRegistration makes what the reference bug leaves in a host
// repository: a registration whose worktree lives at a path only a
// container had (/tmp/conversation-worktrees/<id>/workspace).
func containerOnlyRegistration(t *testing.T, repo, branch string, lock bool) string {
	t.Helper()
	tmp := filepath.Join(testenv.TempDir(t), "workspace")
	args := []string{"worktree", "add", "-b", branch, tmp}
	if lock {
		args = []string{"worktree", "add", "--lock", "-b", branch, tmp}
	}
	testenv.Git(t, repo, args...)
	admin := filepath.Join(repo, ".git", "worktrees", "workspace")
	gone := "/tmp/conversation-worktrees/" + newID(t) + "/workspace/.git"
	if err := os.WriteFile(filepath.Join(admin, "gitdir"), []byte(gone+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(tmp); err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(gone)
}

func TestStaleRegistrationFoundAndRemoved(t *testing.T) {
	m, repo, wt := newRepoWorktree(t)
	path := containerOnlyRegistration(t, repo.TopLevel, "openhands/container-made", false)
	if out := testenv.Git(t, repo.TopLevel, "worktree", "list", "--porcelain"); !strings.Contains(out, "prunable gitdir file points to non-existent location") {
		t.Fatalf("setup: git does not report the registration prunable:\n%s", out)
	}
	stale, err := m.StaleRegistrations(testCtx(t), repo.CommonDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) != 1 || stale[0].Path != path || stale[0].Branch != "openhands/container-made" || stale[0].Locked {
		t.Fatalf("StaleRegistrations = %+v, want the one container-made registration", stale)
	}
	if err := m.RemoveStale(testCtx(t), repo.CommonDir, stale[0]); err != nil {
		t.Fatal(err)
	}
	out := testenv.Git(t, repo.TopLevel, "worktree", "list", "--porcelain")
	if strings.Contains(out, "prunable") || !strings.Contains(out, wt.Path) {
		t.Errorf("after RemoveStale:\n%s\nwant no prunable entry and the live worktree kept", out)
	}
	if _, err := testenv.GitOutput(repo.TopLevel, "rev-parse", "--verify", "refs/heads/openhands/container-made"); err != nil {
		t.Errorf("RemoveStale deleted the branch: %v", err)
	}
	// The live conversation is not stale, and a second removal is refused.
	if err := m.RemoveStale(testCtx(t), repo.CommonDir, stale[0]); err == nil {
		t.Error("RemoveStale of a gone registration succeeded")
	}
}

func TestStaleLockedRegistrationIsKept(t *testing.T) {
	m, repo, _ := newRepoWorktree(t)
	containerOnlyRegistration(t, repo.TopLevel, "other-tool", true)
	stale, err := m.StaleRegistrations(testCtx(t), repo.CommonDir)
	if err != nil || len(stale) != 1 || !stale[0].Locked {
		t.Fatalf("StaleRegistrations = %+v, %v", stale, err)
	}
	if err := m.RemoveStale(testCtx(t), repo.CommonDir, stale[0]); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Errorf("RemoveStale of a locked registration = %v, want a refusal that says it is locked", err)
	}
	if _, err := os.Stat(stale[0].AdminDir); err != nil {
		t.Errorf("the locked registration was removed: %v", err)
	}
}

func TestRepairMakesALiveWorktreeValidAgain(t *testing.T) {
	m, repo, wt := newRepoWorktree(t)
	// Something rewrote the registration to a container-only path.
	if err := os.WriteFile(filepath.Join(wt.AdminDir, "gitdir"), []byte("/tmp/conversation-worktrees/x/workspace/.git\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(wt.AdminDir, "locked")); err != nil {
		t.Fatal(err)
	}
	h, err := m.Health(testCtx(t), wt)
	// The host lists the registration under the container path, prunable,
	// and has none for the real worktree.
	if err != nil || h.Registered || h.GitdirResolves {
		t.Fatalf("setup: Health = %+v, %v; want no valid registration", h, err)
	}
	if out := testenv.Git(t, repo.TopLevel, "worktree", "list", "--porcelain"); !strings.Contains(out, "prunable") {
		t.Fatalf("setup: git does not report it prunable:\n%s", out)
	}
	if err := m.Repair(testCtx(t), wt); err != nil {
		t.Fatal(err)
	}
	h, err = m.Health(testCtx(t), wt)
	if err != nil || !h.Registered || h.Prunable || !h.GitdirResolves || !h.Locked || h.LockReason != LockReason(wt.ConversationID) {
		t.Errorf("after Repair: Health = %+v, %v", h, err)
	}
	if out := testenv.Git(t, wt.Path, "status", "--short", "--branch"); !strings.HasPrefix(out, "## "+wt.Branch) {
		t.Errorf("git status in the repaired worktree = %q", out)
	}
	if out := testenv.Git(t, repo.TopLevel, "worktree", "list", "--porcelain"); strings.Contains(out, "prunable") {
		t.Errorf("still prunable after Repair:\n%s", out)
	}
}

func TestAddWithAPlan(t *testing.T) {
	m := newManager(t)
	repo := mustInspect(t, m, testenv.NewRepo(t, testenv.RepoOptions{}))
	id := newID(t)
	plan, err := m.Plan(testCtx(t), AddOptions{Repo: repo, ConversationID: id})
	if err != nil {
		t.Fatal(err)
	}
	// A plan for another conversation is refused, and nothing is made.
	other := newID(t)
	if _, err := m.Add(testCtx(t), AddOptions{Repo: repo, ConversationID: other, Planned: &plan}); !errors.Is(err, ErrInvalidWorktree) {
		t.Errorf("Add with another conversation's plan = %v, want ErrInvalidWorktree", err)
	}
	if _, err := os.Stat(filepath.Join(m.Root(), other)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused plan left %s behind", other)
	}
	wt, err := m.Add(testCtx(t), AddOptions{Repo: repo, ConversationID: id, Planned: &plan})
	if err != nil {
		t.Fatal(err)
	}
	if wt.Path != plan.Path || wt.StartCommit != plan.StartCommit || wt.AdminID == "" {
		t.Errorf("Add with its plan = %+v, plan %+v", wt, plan)
	}
	if h, err := m.Health(testCtx(t), wt); err != nil || !h.Registered || h.Prunable || !h.Locked {
		t.Errorf("Health = %+v, %v", h, err)
	}
}
