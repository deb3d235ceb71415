package integration

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
)

// TestDoctorRepoOnAnUnmanagedRepository reproduces the seed's leftovers
// the seed's way: worktrees added inside a private mount namespace (as
// the agent server does inside its container), under a path that exists
// only there, of a repository ohd does not manage. `ohctl doctor --repo`
// lists each with its branch and whether that holds commits nothing else
// has; --repair removes the registrations, keeps every branch, and says
// what it did.
func TestDoctorRepoOnAnUnmanagedRepository(t *testing.T) {
	testenv.RequireUnshare(t)
	d := startDaemon(t, daemonOptions{})
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	ctr := filepath.Join(testenv.TempDir(t), "container-tmp") // /tmp inside the "container"
	worked, idle := store.NewID(), store.NewID()
	wtWorked := ctr + "/conversation-worktrees/" + worked + "/workspace"
	wtIdle := ctr + "/conversation-worktrees/" + idle + "/workspace"
	script := `set -e
mkdir -p "$CTR" && mount -t tmpfs tmpfs "$CTR"
git -C "$REPO" worktree add -q -b "openhands/$WORKED" "$WT1"
echo agent work > "$WT1/agent.txt"
git -C "$WT1" add agent.txt && git -C "$WT1" commit -qm "agent work"
git -C "$REPO" worktree add -q -b "openhands/$IDLE" "$WT2"`
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	cmd.Env = append(testenv.GitEnv(), "CTR="+ctr, "REPO="+repo, "WORKED="+worked, "IDLE="+idle, "WT1="+wtWorked, "WT2="+wtIdle)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("worktree add in a private mount namespace: %v\n%s", err, out)
	}
	if out := testenv.Git(t, repo, "worktree", "list", "--porcelain"); strings.Count(out, "prunable gitdir file points to non-existent location") != 2 {
		t.Fatalf("setup did not reproduce the seed's leftovers:\n%s", out)
	}

	// Warnings, as doctor reports stale registrations elsewhere: exit 0.
	out := d.ohctl("doctor", "--repo", repo)
	for _, want := range []string{
		wtWorked, "branch openhands/" + worked, "has 1 commit(s) no other ref has",
		wtIdle, "branch openhands/" + idle, "no commit that another ref does not have",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor --repo output lacks %q:\n%s", want, out)
		}
	}
	if porc := testenv.Git(t, repo, "worktree", "list", "--porcelain"); strings.Count(porc, "prunable") != 2 {
		t.Errorf("doctor without --repair changed the repository:\n%s", porc)
	}

	out, err := d.ohctlErr("doctor", "--repo", repo, "--repair")
	if err != nil {
		t.Errorf("doctor --repo --repair: %v\n%s", err, out)
	}
	if strings.Count(out, "removed the registration") != 2 || !strings.Contains(out, "kept branch openhands/"+worked) {
		t.Errorf("doctor --repair does not say what it did:\n%s", out)
	}
	if porc := testenv.Git(t, repo, "worktree", "list", "--porcelain"); strings.Contains(porc, "prunable") || strings.Contains(porc, ctr) {
		t.Errorf("after --repair:\n%s", porc)
	}
	for _, b := range []string{worked, idle} {
		if _, err := testenv.GitOutput(repo, "rev-parse", "--verify", "refs/heads/openhands/"+b); err != nil {
			t.Errorf("--repair deleted branch openhands/%s: %v", b, err)
		}
	}
	if got := strings.TrimSpace(testenv.Git(t, repo, "show", "openhands/"+worked+":agent.txt")); got != "agent work" {
		t.Errorf("the agent's commit after --repair: %q", got)
	}
	if out, err := d.ohctlErr("doctor", "--repo", filepath.Join(repo, "nowhere")); err == nil {
		t.Errorf("doctor --repo of a missing path succeeded:\n%s", out)
	}
}
