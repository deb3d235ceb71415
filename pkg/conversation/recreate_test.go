package conversation

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/store"
	"github.com/ohd-dev/ohd/pkg/worktree"
)

// TestRecreateKeepsTheEarlierWork: re-creating a deleted conversation's
// id while its work is kept in the repository (its branch with commits,
// its snapshot, its kept refs) is refused with a 409 that says how to get
// the work out, and changes nothing; once the names are freed as the
// error says, the id is created again.
func TestRecreateKeepsTheEarlierWork(t *testing.T) {
	for _, tc := range []struct {
		name   string
		commit bool // a commit on the branch (kept); else only uncommitted work (snapshot)
	}{{"branch", true}, {"snapshot only", false}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			repo := testenv.NewRepo(t, testenv.RepoOptions{})
			c, err := e.m.Create(ctx, CreateRequest{Workspace: repo, Worktree: true})
			if err != nil {
				t.Fatal(err)
			}
			if tc.commit {
				testenv.Git(t, c.Worktree, "-c", "user.name=a", "-c", "user.email=a@x", "commit", "-q", "--allow-empty", "-m", "agent work")
			}
			if err := os.WriteFile(filepath.Join(c.Worktree, "wip.txt"), []byte("wip\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			rm, err := e.m.Remove(ctx, c.ID, RemoveOptions{})
			if err != nil || rm.State != store.StateDeleted || (tc.commit && !rm.Removal.BranchKept) || rm.Removal.SnapshotRef == "" {
				t.Fatalf("Remove = %+v, %v", rm.Removal, err)
			}
			branch := "refs/heads/" + worktree.BranchName(c.ID)
			refsBefore := testenv.Git(t, repo, "for-each-ref")
			keptTip, _ := testenv.GitOutput(repo, "rev-parse", "--verify", "-q", branch)

			_, err = e.m.Create(ctx, CreateRequest{ID: c.ID, Workspace: repo, Worktree: true})
			if !errors.Is(err, ErrConflict) {
				t.Fatalf("re-create with the work kept = %v, want ErrConflict", err)
			}
			t.Log(err)
			want := []string{"ohctl restore " + c.ID, worktree.SnapshotRef(c.ID), "another id", "git -C " + repo}
			if tc.commit {
				want = append(want, "branch "+worktree.BranchName(c.ID))
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the refusal %q lacks %q", err, w)
				}
			}
			if got := testenv.Git(t, repo, "for-each-ref"); got != refsBefore {
				t.Errorf("the refused create changed the refs:\n%s\nwant\n%s", got, refsBefore)
			}
			if old, err := e.st.Conversation(c.ID); err != nil || old.State != store.StateDeleted {
				t.Fatalf("the deleted record after the refusal: %+v, %v", old, err)
			}
			// The way out the error names: restore, then free the names.
			res, err := e.m.Restore(ctx, c.ID, "")
			if err != nil {
				t.Fatalf("Restore = %v", err)
			}
			if b, err := os.ReadFile(filepath.Join(res.Path, "wip.txt")); err != nil || string(b) != "wip\n" {
				t.Errorf("restored wip.txt = %q, %v", b, err)
			}
			testenv.Git(t, res.Path, "branch", "-m", "mine")
			free := exec.Command("sh", "-c", "git for-each-ref --format='delete %(refname)' "+branch+" "+worktree.SnapshotRef(c.ID)+" "+worktree.KeptPrefix(c.ID)+" | git update-ref --stdin")
			free.Dir, free.Env = repo, testenv.GitEnv()
			if out, err := free.CombinedOutput(); err != nil {
				t.Fatalf("free the names: %v: %s", err, out)
			}
			again, err := e.m.Create(ctx, CreateRequest{ID: c.ID, Workspace: repo, Worktree: true})
			if err != nil || again.State != store.StateRunning {
				t.Fatalf("re-create once the names are free = %+v, %v", again, err)
			}
			if got := testenv.Git(t, repo, "rev-parse", "mine"); got != strings.TrimSpace(keptTip) {
				t.Errorf("the kept commits moved: mine = %s, want %s", got, keptTip)
			}
		})
	}
}
