package conversation

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/control"
	"github.com/ohd-dev/ohd/pkg/store"
)

// TestRemoveRefusedWhenTheRepositoryMovedChangesNothing: the repository
// of a conversation was moved away; a removal cannot save the work into
// it, so it is refused before anything is torn down (the broker still
// answers, the worktree and the record are as they were), with a message
// that says what to do; once the repository is back, the removal works.
func TestRemoveRefusedWhenTheRepositoryMovedChangesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	c, err := e.m.Create(ctx, CreateRequest{Workspace: repo, Worktree: true})
	if err != nil {
		t.Fatal(err)
	}
	moved := repo + ".moved"
	if err := os.Rename(repo, moved); err != nil {
		t.Fatal(err)
	}
	_, err = e.m.Remove(ctx, c.ID, RemoveOptions{})
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "move the repository back") || !strings.Contains(err.Error(), "nothing was removed") {
		t.Fatalf("Remove with the repository moved away = %v, want ErrConflict saying what to do", err)
	}
	got, err := e.st.Conversation(c.ID)
	if err != nil || got.State != store.StateRunning || got.Removal != nil || got.BrokerEpoch != c.BrokerEpoch {
		t.Errorf("record after the refused removal = %+v, %v; want it unchanged (running, no removal)", got, err)
	}
	cl := broker.NewClient(filepath.Join(c.BrokerDir, "broker.sock"), filepath.Join(c.BrokerDir, "token"))
	defer cl.Close()
	if _, err := cl.Whoami(ctx); err != nil {
		t.Errorf("the broker after the refused removal: %v, want it still serving", err)
	}
	if !exists(c.Worktree) {
		t.Error("the worktree is gone after the refused removal")
	}
	if err := os.Rename(moved, repo); err != nil {
		t.Fatal(err)
	}
	if r, err := e.m.Remove(ctx, c.ID, RemoveOptions{}); err != nil || r.State != store.StateDeleted {
		t.Errorf("Remove with the repository back = %+v, %v", r.State, err)
	}
}

// TestDoctorHintsMatchTheState: for each way a conversation's worktree
// can break on the host, doctor's worktree-host check names what is wrong
// with its path, offers as a repair only what --repair does, and the way
// out it names works: --repair where it offers one, `ohctl rm` otherwise.
// (A worktree shared with the container, as the local runtime has: the
// git view's own states are in integration's TestDoctorHintsWithAGitView.)
func TestDoctorHintsMatchTheState(t *testing.T) {
	type state struct {
		name  string
		brk   func(t *testing.T, c store.Conversation)
		want  []string // in the detail
		fix   string   // in the repair offered; "" when none may be
		after string   // status after --repair
	}
	admin := func(c store.Conversation) string { return filepath.Join(c.CommonDir, "worktrees", c.AdminID) }
	states := []state{
		{name: "folder gone", brk: func(t *testing.T, c store.Conversation) { must(t, os.RemoveAll(c.Worktree)) },
			want: []string{"the worktree folder ", " is gone", "ohctl rm "}, after: "fail"},
		{name: ".git file wrong", brk: func(t *testing.T, c store.Conversation) {
			must(t, os.WriteFile(filepath.Join(c.Worktree, ".git"), []byte("gitdir: /nowhere\n"), 0o644))
		}, want: []string{"do not point at each other"}, fix: "rewrite ", after: "ok"},
		{name: "host registration gone", brk: func(t *testing.T, c store.Conversation) { must(t, os.RemoveAll(admin(c))) },
			want: []string{"registration ", " is gone", "--repair cannot re-create", "git -C ", " branch <name> openhands/", "ohctl rm --discard "}, after: "fail"},
		{name: "unlocked", brk: func(t *testing.T, c store.Conversation) { must(t, os.Remove(filepath.Join(admin(c), "locked"))) },
			want: []string{"not locked"}, fix: "lock the registration ", after: "ok"},
	}
	for _, st := range states {
		t.Run(st.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			c, err := e.m.Create(ctx, CreateRequest{Workspace: testenv.NewRepo(t, testenv.RepoOptions{}), Worktree: true})
			if err != nil {
				t.Fatal(err)
			}
			st.brk(t, c)
			hostCheck := func(repair bool) control.DoctorCheck {
				t.Helper()
				rep, err := e.m.Doctor(ctx, c.ID, repair)
				if err != nil {
					t.Fatal(err)
				}
				for _, ck := range rep.Checks {
					if ck.Check == "worktree-host" {
						return ck
					}
				}
				t.Fatalf("Doctor(repair=%v): no worktree-host check: %+v", repair, rep.Checks)
				return control.DoctorCheck{}
			}
			ck := hostCheck(false)
			t.Logf("doctor: %s %s (--repair would: %s)", ck.Status, ck.Detail, ck.Repair)
			for _, w := range st.want {
				if !strings.Contains(ck.Detail, w) {
					t.Errorf("detail %q lacks %q", ck.Detail, w)
				}
			}
			if ck.Status == "ok" {
				t.Errorf("check = %+v, want a problem", ck)
			}
			switch {
			case st.fix == "" && ck.Repair != "":
				t.Errorf("repair offered: %q, want none (--repair cannot do it)", ck.Repair)
			case st.fix != "" && !strings.HasPrefix(ck.Repair, st.fix):
				t.Errorf("repair offered: %q, want %q...", ck.Repair, st.fix)
			}
			if st.fix != "" && !strings.Contains(ck.Repair, admin(c)) {
				t.Errorf("repair %q does not name the registration %s", ck.Repair, admin(c))
			}
			ck = hostCheck(true)
			if ck.Status != st.after || ck.Repaired != (st.fix != "") {
				t.Errorf("after --repair: %+v, want status %s, repaired %v", ck, st.after, st.fix != "")
			}
			if st.name == "folder gone" && exists(c.Worktree) {
				t.Error("doctor --repair re-created the worktree folder")
			}
			if st.after != "fail" {
				return
			}
			// The way out the hint names.
			if !strings.Contains(ck.Detail, "--discard") {
				if r, err := e.m.Remove(ctx, c.ID, RemoveOptions{}); err != nil || r.State != store.StateDeleted {
					t.Errorf("ohctl rm, as the hint says: %v, %v", r.State, err)
				}
				return
			}
			// A plain rm cannot save the work: it is refused, changing nothing.
			if _, err := e.m.Remove(ctx, c.ID, RemoveOptions{}); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "nothing was removed") {
				t.Errorf("ohctl rm where the hint says --discard = %v, want a refusal", err)
			}
			if got, _ := e.st.Conversation(c.ID); got.State != store.StateRunning || got.Removal != nil || !exists(c.Worktree) || !exists(c.BrokerDir) {
				t.Errorf("the refused rm changed the conversation: %s, removal %+v", got.State, got.Removal)
			}
			testenv.Git(t, c.Repo, "branch", "kept-by-hand", c.Branch)
			if r, err := e.m.Remove(ctx, c.ID, RemoveOptions{Discard: true}); err != nil || r.State != store.StateDeleted {
				t.Errorf("ohctl rm --discard, as the hint says: %v, %v", r.State, err)
			}
			if _, err := testenv.GitOutput(c.Repo, "rev-parse", "--verify", "refs/heads/kept-by-hand"); err != nil {
				t.Errorf("the branch kept by hand is gone: %v", err)
			}
		})
	}
}

// TestDoctorRepoLockedRegistrationHint: a dead registration that is
// locked is not removed by --repair; the hint names the exact command
// that unlocks it, and after running it --repair removes it.
func TestDoctorRepoLockedRegistrationHint(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	dead := filepath.Join(testenv.TempDir(t), "gone")
	testenv.Git(t, repo, "worktree", "add", "-q", "--lock", "--reason", "held by another tool", "-b", "other", dead)
	must(t, os.RemoveAll(dead))
	common := filepath.Join(repo, ".git")
	if r, err := filepath.EvalSymlinks(common); err == nil {
		common = r
	}
	for _, repair := range []bool{false, true} {
		rep, err := e.m.DoctorRepo(ctx, repo, repair)
		must(t, err)
		if len(rep.Checks) != 1 || rep.Checks[0].Repair != "" || rep.Checks[0].Repaired {
			t.Fatalf("DoctorRepo(repair=%v) = %+v, want one stale registration and no repair offered", repair, rep.Checks)
		}
		ck := rep.Checks[0]
		if want := "`git -C " + common + " worktree unlock "; !strings.Contains(ck.Detail, want) || !strings.Contains(ck.Detail, "gone`") {
			t.Fatalf("detail %q lacks the unlock command (%s... %s)", ck.Detail, want, dead)
		}
		if repair {
			// The command the hint names, as given.
			cmd := ck.Detail[strings.Index(ck.Detail, "`git -C ")+len("`git -C "):]
			cmd = cmd[:strings.Index(cmd, "`")]
			f := strings.Fields(cmd)
			testenv.Git(t, f[0], f[1:]...)
		}
	}
	rep, err := e.m.DoctorRepo(ctx, repo, true)
	must(t, err)
	if len(rep.Checks) != 1 || !rep.Checks[0].Repaired {
		t.Fatalf("DoctorRepo(repair) after the unlock = %+v, want the registration removed", rep.Checks)
	}
	if _, err := testenv.GitOutput(repo, "rev-parse", "--verify", "refs/heads/other"); err != nil {
		t.Errorf("the branch of the removed registration is gone: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
