package worktree

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// TestFind: a Worktree whose record was lost (a crash after Add) is
// reconstructed from disk, start commit included, and removable.
func TestFind(t *testing.T) {
	m, repo, wt := newRepoWorktree(t)
	commitFile(t, wt.Path, "work.txt", "work\n", "agent work")
	got, err := m.Find(testCtx(t), repo, wt.ConversationID)
	if err != nil {
		t.Fatalf("Find: %v", err)
	}
	want := wt
	want.StartPoint = "" // not recoverable
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Find mismatch (-want +got):\n%s", diff)
	}
	res, err := m.Remove(testCtx(t), got, RemoveOptions{})
	if err != nil || !res.BranchKept || res.CommitsBeyondStart != 1 {
		t.Errorf("Remove(found) = %+v, %v; want the branch kept with 1 commit", res, err)
	}
	assertGone(t, m, wt)

	if _, err := m.Find(testCtx(t), repo, newID(t)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Find(unknown id) = %v, want fs.ErrNotExist", err)
	}
}

// TestFindInterruptedAdd: ohd died while git was creating the admin dir
// (only the lock with our reason exists) and after creating the
// conversation directory; Find and Remove clean up.
func TestFindInterruptedAdd(t *testing.T) {
	m := newManager(t)
	repo := mustInspect(t, m, testenv.NewRepo(t, testenv.RepoOptions{}))
	id := newID(t)
	if err := os.Mkdir(filepath.Join(m.Root(), id), 0o700); err != nil {
		t.Fatal(err)
	}
	half := filepath.Join(repo.CommonDir, "worktrees", "repo")
	testenv.WriteFile(t, filepath.Join(half, "locked"), LockReason(id))
	wt, err := m.Find(testCtx(t), repo, id)
	if err != nil || wt.AdminDir != half {
		t.Fatalf("Find = %+v, %v; want AdminDir %s", wt, err, half)
	}
	if _, err := m.Remove(testCtx(t), wt, RemoveOptions{}); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	assertGone(t, m, wt)
}

// TestRemoveSweepsAbandonedAdminDirs: ohd died while git had created the
// admin dir but not yet written its lock (an empty directory, or an empty
// "locked"): no git command sees it and Find cannot tell it is ours, so
// the removal sweeps what looks exactly like that, and nothing else.
func TestRemoveSweepsAbandonedAdminDirs(t *testing.T) {
	m := newManager(t)
	repo := mustInspect(t, m, testenv.NewRepo(t, testenv.RepoOptions{}))
	id := newID(t)
	if err := os.Mkdir(filepath.Join(m.Root(), id), 0o700); err != nil {
		t.Fatal(err)
	}
	worktrees := filepath.Join(repo.CommonDir, "worktrees")
	mk := func(name string, files map[string]string) string { return mkAdmin(t, worktrees, name, files) }
	gone := []string{mk("repo", nil), mk("repo1", map[string]string{"locked": ""})}
	kept := []string{
		mk("repo2", map[string]string{"locked": "someone's reason"}),
		mk("repo3", map[string]string{"locked": "", "gitdir": "/elsewhere/.git\n"}),
		mk("other", nil),
		mk("repox", nil),
	}
	wt, err := m.Find(testCtx(t), repo, id)
	if err != nil || wt.AdminDir != "" {
		t.Fatalf("Find = %+v, %v; want no admin dir of its own", wt, err)
	}
	if _, err := m.Remove(testCtx(t), wt, RemoveOptions{Undo: true}); err != nil {
		t.Fatalf("Remove(Undo): %v", err)
	}
	for _, d := range gone {
		if ok, _ := lexists(d); ok {
			t.Errorf("%s (left by a killed add) is still there", d)
		}
	}
	for _, d := range kept {
		if ok, _ := lexists(d); !ok {
			t.Errorf("%s was removed: it is not an abandoned admin dir", d)
		}
	}
}

// TestFindWithoutAdminDir: a worktree directory with no admin dir left
// cannot be snapshotted, so Remove refuses without Discard.
func TestFindWithoutAdminDir(t *testing.T) {
	m, repo, wt := newRepoWorktree(t)
	if err := os.RemoveAll(wt.AdminDir); err != nil {
		t.Fatal(err)
	}
	found, err := m.Find(testCtx(t), repo, wt.ConversationID)
	if err != nil || found.AdminID != "" || found.AdminDir != "" {
		t.Fatalf("Find = %+v, %v; want no admin dir", found, err)
	}
	if _, err := m.MountPlan(found); !errors.Is(err, ErrInvalidWorktree) {
		t.Errorf("MountPlan(no admin dir) = %v, want ErrInvalidWorktree", err)
	}
	if _, err := m.Remove(testCtx(t), found, RemoveOptions{}); !errors.Is(err, ErrUnsavedWork) {
		t.Fatalf("Remove(no admin dir) = %v, want ErrUnsavedWork", err)
	}
	if _, err := m.Remove(testCtx(t), found, RemoveOptions{Discard: true}); err != nil {
		t.Fatalf("Remove(Discard): %v", err)
	}
	assertGone(t, m, wt)
	if refExists(t, repo.TopLevel, "refs/heads/"+wt.Branch) {
		t.Errorf("branch kept after Discard")
	}
}
