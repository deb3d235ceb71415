package worktree

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

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

// TestRepoLockAcrossManagers: the file lock excludes a second Manager
// (another process) while the first holds it, and a waiter gives up when
// its context ends.
func TestRepoLockAcrossManagers(t *testing.T) {
	dir := testenv.TempDir(t)
	opts := Options{Root: filepath.Join(dir, "worktrees"), LockDir: filepath.Join(dir, "locks")}
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	key := "/some/repo/.git"
	unlock, err := a.lockRepo(testCtx(t), key)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(testCtx(t), 100*time.Millisecond)
	defer cancel()
	if _, err := b.lockRepo(ctx, key); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lockRepo while held = %v, want context.DeadlineExceeded", err)
	}
	// Same Manager, same key: the in-process lock also waits.
	ctx2, cancel2 := context.WithTimeout(testCtx(t), 50*time.Millisecond)
	defer cancel2()
	if _, err := a.lockRepo(ctx2, key); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("nested lockRepo = %v, want context.DeadlineExceeded", err)
	}
	// Another repository is independent.
	u2, err := b.lockRepo(testCtx(t), "/other/repo/.git")
	if err != nil {
		t.Fatalf("lockRepo(other repo): %v", err)
	}
	u2()
	unlock()
	u3, err := b.lockRepo(testCtx(t), key)
	if err != nil {
		t.Fatalf("lockRepo after release: %v", err)
	}
	u3()
}
