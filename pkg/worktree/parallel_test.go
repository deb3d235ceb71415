package worktree

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// TestParallelAddRemove: 16 concurrent Adds in one repository, through two
// Managers sharing a lock dir (as two ohd processes would), all succeed;
// so do 16 concurrent Removes, leaving no registration.
func TestParallelAddRemove(t *testing.T) {
	const n = 16
	dir := testenv.TempDir(t)
	root, locks := filepath.Join(dir, "worktrees"), filepath.Join(dir, "locks")
	var ms [2]*Manager
	for i := range ms {
		m, err := New(Options{Root: root, LockDir: locks})
		if err != nil {
			t.Fatal(err)
		}
		ms[i] = m
	}
	repo := mustInspect(t, ms[0], testenv.NewRepo(t, testenv.RepoOptions{}))
	ctx := testCtx(t)

	wts := make([]Worktree, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			wts[i], errs[i] = ms[i%2].Add(ctx, AddOptions{Repo: repo, ConversationID: newID(t)})
		})
	}
	wg.Wait()
	admins := map[string]bool{}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Add #%d: %v", i, err)
		}
		admins[wts[i].AdminDir] = true
	}
	if len(admins) != n {
		t.Errorf("%d distinct admin dirs for %d worktrees", len(admins), n)
	}
	if got := len(worktreeList(t, repo.TopLevel)); got != n+1 {
		t.Errorf("git worktree list has %d entries, want %d", got, n+1)
	}

	for i := range n {
		wg.Go(func() {
			_, errs[i] = ms[i%2].Remove(ctx, wts[i], RemoveOptions{})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Remove #%d: %v", i, err)
		}
	}
	if regs := worktreeList(t, repo.TopLevel); len(regs) != 1 {
		t.Errorf("git worktree list after removing all = %+v, want only the main worktree", regs)
	}
	if branches := gitIn(t, repo.TopLevel, "branch", "--list", "openhands/*"); branches != "" {
		t.Errorf("branches left: %q", branches)
	}
}
