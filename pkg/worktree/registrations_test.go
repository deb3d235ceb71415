package worktree

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/worktree/porcelain"
)

// TestParseWorktreeListRealGit parses what the installed git prints,
// including a lock reason with a newline and a prunable entry of the kind
// the original bug produced.
func TestParseWorktreeListRealGit(t *testing.T) {
	dir := testenv.NewRepo(t, testenv.RepoOptions{})
	tmp := testenv.TempDir(t)
	locked, gone := filepath.Join(tmp, "locked"), filepath.Join(tmp, "gone")
	gitIn(t, dir, "worktree", "add", "-q", "--detach", locked)
	gitIn(t, dir, "worktree", "lock", "--reason", "line one\nline two", locked)
	gitIn(t, dir, "worktree", "add", "-q", "-b", "g", gone)
	// As if created inside a container: the gitdir points to a path the
	// host does not have.
	testenv.WriteFile(t, filepath.Join(dir, ".git", "worktrees", "gone", "gitdir"), "/tmp/conversation-worktrees/x/workspace/.git\n")
	head := gitIn(t, dir, "rev-parse", "HEAD")

	m := newManager(t)
	got, err := m.registrations(testCtx(t), filepath.Join(dir, ".git"), os.Getuid(), os.Getgid())
	if err != nil {
		t.Fatalf("registrations: %v", err)
	}
	want := []porcelain.Registration{
		{Path: dir, Head: head, Branch: "refs/heads/main"},
		{Path: "/tmp/conversation-worktrees/x/workspace", Head: head, Branch: "refs/heads/g", Prunable: true, PrunableReason: "gitdir file points to non-existent location"},
		{Path: locked, Head: head, Detached: true, Locked: true, LockReason: "line one\nline two"},
	}
	byPath := cmpopts.SortSlices(func(a, b porcelain.Registration) bool { return a.Path < b.Path }) // git lists admin dirs in readdir order
	if diff := cmp.Diff(want, got, byPath); diff != "" {
		t.Errorf("registrations mismatch (-want +got):\n%s", diff)
	}
}
