package integration

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/internal/testimage"
	"github.com/ohd-dev/ohd/pkg/control"
	"github.com/ohd-dev/ohd/pkg/store"
)

// TestDoctorFindsAndRepairsContainerMadeWorktrees reproduces the
// reference bug for real (a worktree created inside a container, of a
// repository bind-mounted at /workspace) next to a live ohd conversation
// whose registration was damaged, and checks doctor reports both and
// --repair fixes both from the host.
func TestDoctorFindsAndRepairsContainerMadeWorktrees(t *testing.T) {
	d := dockerDaemon(t)
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	var c store.Conversation
	d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")

	// The existing agent server's way: worktree add inside a container.
	other := store.NewID()
	run(t, "docker", "run", "--rm", "-v", repo+":/workspace", testimage.Ensure(t),
		"git", "-C", "/workspace", "worktree", "add", "-b", "openhands/"+other, "/tmp/conversation-worktrees/"+other+"/workspace")
	if out := testenv.Git(t, repo, "worktree", "list", "--porcelain"); !strings.Contains(out, "prunable gitdir file points to non-existent location") {
		t.Fatalf("setup did not reproduce the bug:\n%s", out)
	}
	// And something rewrote our live conversation's registration to a
	// container-only path.
	gitdir := filepath.Join(c.CommonDir, "worktrees", c.AdminID, "gitdir")
	if err := os.WriteFile(gitdir, []byte("/tmp/conversation-worktrees/"+c.ID+"/workspace/.git\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	out, err := d.ohctlErr("doctor")
	var oe *ohctlError
	if !errors.As(err, &oe) || oe.code == 0 {
		t.Fatalf("doctor with a broken live worktree exited 0:\n%s", out)
	}
	for _, want := range []string{"stale-worktree", "/tmp/conversation-worktrees/" + other + "/workspace", "openhands/" + other, "worktree-host", "FAIL", "--repair would"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out)
		}
	}

	var rep control.DoctorReport
	out, err = d.ohctlErr("--json", "doctor", "--repair")
	if err != nil {
		t.Fatalf("doctor --repair: %v\n%s", err, out)
	}
	if err := jsonUnmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	repaired := 0
	for _, ck := range rep.Checks {
		if ck.Repaired {
			repaired++
		}
		if ck.Status == "fail" {
			t.Errorf("after repair: %+v", ck)
		}
	}
	if repaired != 2 {
		t.Errorf("repaired %d problems, want 2: %+v", repaired, rep.Checks)
	}
	porc := testenv.Git(t, repo, "worktree", "list", "--porcelain")
	if strings.Contains(porc, "prunable") || strings.Contains(porc, "/tmp/conversation-worktrees") {
		t.Errorf("after doctor --repair:\n%s", porc)
	}
	if e := entryFor(porcelain(t, repo), c.Worktree); e == nil || e["locked"] == "" {
		t.Errorf("the live conversation's registration after repair: %v", e)
	}
	if _, err := testenv.GitOutput(repo, "rev-parse", "--verify", "refs/heads/openhands/"+other); err != nil {
		t.Errorf("repair deleted the other tool's branch: %v", err)
	}
	// Inside the container, still valid.
	if code, out := d.execIn(c.ID, "git", "-C", c.Worktree, "status", "--short", "--branch"); code != 0 || !strings.HasPrefix(out, "## openhands/"+c.ID) {
		t.Errorf("inside after repair: %d %q", code, out)
	}
	// A healthy system: doctor exits 0 and says so for every check.
	if out := d.ohctl("doctor"); strings.Contains(out, "FAIL") || !strings.Contains(out, "container-hardening") || !strings.Contains(out, "broker") {
		t.Errorf("doctor on a healthy system:\n%s", out)
	}
	d.ohctl("rm", c.ID)
}
