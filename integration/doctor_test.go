package integration

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/internal/testimage"
	"github.com/ohd-dev/ohd/pkg/control"
	"github.com/ohd-dev/ohd/pkg/store"
)

// TestBackendDoctorFindsAndRepairsContainerMadeWorktrees reproduces the
// reference bug for real (a worktree created inside a container, of a
// repository bind-mounted at /workspace) next to a live ohd conversation
// whose registration was damaged, and checks doctor reports both and
// --repair fixes both from the host.
func TestBackendDoctorFindsAndRepairsContainerMadeWorktrees(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		d := b.daemon(t)
		repo := testenv.NewRepo(t, testenv.RepoOptions{})
		var c store.Conversation
		d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")

		// The existing agent server's way: worktree add inside a container
		// (on Docker whatever ohd's own backend: the bug is the other tool's).
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
	})
}

// TestBackendDoctorHintsWithAGitView: a containerized conversation has two admin
// dirs, the host's registration (<repo>/.git/worktrees/<admin>) and the
// container's, in its git view (<root>/<id>/.ohd/git/worktrees/<admin>).
// For each way one of its paths breaks, doctor names the right path and
// offers only what --repair does, and the way out it names works.
func TestBackendDoctorHintsWithAGitView(t *testing.T) {
	eachBackend(t, doctorHintsWithAGitView)
}

func doctorHintsWithAGitView(t *testing.T, b backend) {
	d := b.daemon(t)
	hostAdmin := func(c store.Conversation) string { return filepath.Join(c.CommonDir, "worktrees", c.AdminID) }
	viewAdmin := func(c store.Conversation) string { return filepath.Join(c.GitView, "worktrees", c.AdminID) }
	type state struct {
		name string
		// commit makes a commit in the container and waits for it to be
		// published, so the branch has work to keep.
		commit bool
		brk    func(c store.Conversation)
		check  string                              // the check that fails
		want   func(c store.Conversation) []string // in its detail
		repair func(c store.Conversation) string   // the repair offered; nil: none
		// rm is the way out when --repair has none: "rm" or "discard".
		rm string
	}
	states := []state{
		{name: "folder gone", commit: true, brk: func(c store.Conversation) { _ = os.RemoveAll(c.Worktree) }, check: "worktree-host",
			want: func(c store.Conversation) []string {
				return []string{"the worktree folder " + c.Worktree + " is gone", "`ohctl rm " + c.ID + "`"}
			}, rm: "rm"},
		{name: ".git file wrong", brk: func(c store.Conversation) {
			_ = os.WriteFile(filepath.Join(c.Worktree, ".git"), []byte("gitdir: /nowhere\n"), 0o644)
		}, check: "worktree-host",
			want: func(c store.Conversation) []string { return []string{"registration " + hostAdmin(c) + " do not point"} },
			repair: func(c store.Conversation) string {
				return "rewrite " + filepath.Join(c.Worktree, ".git") + " to name " + hostAdmin(c) + " and " + filepath.Join(hostAdmin(c), "gitdir")
			}},
		{name: "host registration gone", brk: func(c store.Conversation) { _ = os.RemoveAll(hostAdmin(c)) }, check: "worktree-host",
			want: func(c store.Conversation) []string {
				return []string{"registration " + hostAdmin(c) + " is gone", "--repair cannot re-create", "not affected (its admin dir is the view's, " + viewAdmin(c) + ")", "`ohctl rm " + c.ID + "`"}
			}, rm: "rm"},
		{name: "unlocked", brk: func(c store.Conversation) { _ = os.Remove(filepath.Join(hostAdmin(c), "locked")) }, check: "worktree-host",
			want:   func(c store.Conversation) []string { return []string{"not locked"} },
			repair: func(c store.Conversation) string { return "lock the registration " + hostAdmin(c) }},
		{name: "view gone", commit: true, brk: func(c store.Conversation) { _ = os.RemoveAll(c.GitView) }, check: "worktree-container",
			want: func(c store.Conversation) []string {
				return []string{"git view " + c.GitView + " (its git dir in the container, mounted at " + c.CommonDir + ") is gone", "branch <name> " + c.Branch, "`ohctl rm --discard " + c.ID + "`"}
			}, rm: "discard"},
		{name: "view admin dir gone", brk: func(c store.Conversation) { _ = os.RemoveAll(viewAdmin(c)) }, check: "worktree-container",
			want: func(c store.Conversation) []string {
				return []string{"admin dir " + viewAdmin(c) + " (at " + hostAdmin(c) + " in the container", "`ohctl rm --discard " + c.ID + "`"}
			}, rm: "discard"},
	}
	for _, st := range states {
		t.Run(st.name, func(t *testing.T) {
			repo := testenv.NewRepo(t, testenv.RepoOptions{})
			var c store.Conversation
			d.ohctlJSON(&c, "create", "--repo", repo, "--worktree")
			if c.GitView == "" {
				t.Fatalf("conversation %s has no git view", c.ID)
			}
			if st.commit {
				if code, out := d.execIn(c.ID, "git", "-C", c.Worktree, "-c", "user.name=a", "-c", "user.email=a@example.com", "commit", "--allow-empty", "-qm", "agent work"); code != 0 {
					t.Fatalf("commit in the container: %d %s", code, out)
				}
				waitFor(t, time.Minute, "the commit to be published", func() bool {
					return testenv.Git(t, repo, "rev-parse", c.Branch) != testenv.Git(t, repo, "rev-parse", "HEAD")
				})
			}
			if code, out := d.execIn(c.ID, "sh", "-c", "echo draft > "+filepath.Join(c.Worktree, "notes.txt")); code != 0 {
				t.Fatalf("write in the container: %d %s", code, out)
			}
			st.brk(c)
			var rep control.DoctorReport
			out, _ := d.ohctlErr("--json", "doctor", c.ID)
			if err := jsonUnmarshal(out, &rep); err != nil {
				t.Fatalf("doctor --json: %v: %s", err, out)
			}
			var ck *control.DoctorCheck
			for i := range rep.Checks {
				if rep.Checks[i].Check == st.check {
					ck = &rep.Checks[i]
				} else if rep.Checks[i].Repair != "" {
					t.Errorf("check %s offers a repair for a problem it does not have: %+v", rep.Checks[i].Check, rep.Checks[i])
				}
			}
			if ck == nil || ck.Status == "ok" {
				t.Fatalf("doctor shows no problem in %s: %+v", st.check, rep.Checks)
			}
			t.Logf("%s: %s (--repair would: %s)", ck.Status, ck.Detail, ck.Repair)
			for _, w := range st.want(c) {
				if !strings.Contains(ck.Detail, w) {
					t.Errorf("%s detail %q lacks %q", st.check, ck.Detail, w)
				}
			}
			if st.repair == nil {
				if ck.Repair != "" {
					t.Errorf("repair offered %q; --repair cannot do anything here", ck.Repair)
				}
			} else {
				if !strings.HasPrefix(ck.Repair, st.repair(c)) {
					t.Errorf("repair offered %q, want %q...", ck.Repair, st.repair(c))
				}
				d.ohctl("doctor", "--repair", c.ID)
				if out, err := d.ohctlErr("doctor", c.ID); err != nil || strings.Contains(out, "FAIL") || strings.Contains(b.doctorProblems(out), "WARN") {
					t.Errorf("doctor after --repair: %v\n%s", err, out)
				}
				// The repair leaves the agent's .git read-only: the agent
				// tries to point it at a git dir of its own, and fails
				// (a rename over the file had detached its mount).
				if code, out := d.execIn(c.ID, "sh", "-c", "echo 'gitdir: /tmp/evil' > "+filepath.Join(c.Worktree, ".git")); code == 0 || !strings.Contains(strings.ToLower(out), "read-only") {
					t.Errorf("after --repair the agent rewrote its .git: exit %d %q, want EROFS", code, out)
				}
				d.ohctl("rm", "--discard", c.ID)
				return
			}
			switch st.rm {
			case "rm":
				out := d.ohctl("rm", c.ID)
				if st.commit {
					if _, err := testenv.GitOutput(repo, "rev-parse", "--verify", c.Branch); err != nil {
						t.Errorf("ohctl rm, as the hint says, did not keep the branch with its commit: %v\n%s", err, out)
					}
				} else if refs := testenv.Git(t, repo, "for-each-ref", "refs/ohd/snapshots/"); !strings.Contains(refs, c.ID) {
					t.Errorf("ohctl rm, as the hint says, kept no snapshot of notes.txt: %q\n%s", refs, out)
				}
			case "discard":
				// A plain rm cannot save the work: refused, nothing torn down.
				if out, err := d.ohctlErr("rm", c.ID); err == nil || !strings.Contains(err.Error(), "nothing was removed") {
					t.Errorf("ohctl rm with the view gone = %q, %v; want a refusal", out, err)
				}
				if code, out := d.execIn(c.ID, "sh", "-c", ":"); code != 0 {
					t.Errorf("after the refused rm, exec in the container: %d %s", code, out)
				}
				testenv.Git(t, repo, "branch", "kept-by-hand", c.Branch)
				d.ohctl("rm", "--discard", c.ID)
				if _, err := testenv.GitOutput(repo, "rev-parse", "--verify", "kept-by-hand"); err != nil {
					t.Errorf("the branch kept by hand is gone: %v", err)
				}
			}
			var after store.Conversation
			d.ohctlJSON(&after, "show", c.ID)
			if after.State != store.StateDeleted {
				t.Errorf("after the way out the hint names: %s", after.State)
			}
		})
	}
}
