package worktree

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// assertGone checks that nothing of wt is left: no registration, no admin
// dir, no conversation directory.
func assertGone(t *testing.T, m *Manager, wt Worktree) {
	t.Helper()
	for _, r := range worktreeList(t, wt.Repo) {
		if r.Path != wt.Repo {
			t.Errorf("git worktree list still has %+v, want only the main worktree %s", r, wt.Repo)
		}
	}
	for _, p := range []string{wt.AdminDir, wt.Path, filepath.Join(m.Root(), wt.ConversationID)} {
		if exists(t, p) {
			t.Errorf("%s still exists after Remove", p)
		}
	}
}

// TestRemoveKeepsWork: modified, staged and untracked files end up in the
// snapshot with their content; the branch is kept; nothing stale remains.
func TestRemoveKeepsWork(t *testing.T) {
	m, repo, wt := newRepoWorktree(t)
	ctx := testCtx(t)
	id := wt.ConversationID

	testenv.WriteFile(t, filepath.Join(wt.Path, "README.md"), "modified\n")
	testenv.WriteFile(t, filepath.Join(wt.Path, "staged.txt"), "staged\n")
	gitIn(t, wt.Path, "add", "staged.txt")
	testenv.WriteFile(t, filepath.Join(wt.Path, "dir", "untracked.txt"), "untracked\n")
	testenv.WriteFile(t, filepath.Join(wt.Path, ".gitignore"), "*.log\n")
	testenv.WriteFile(t, filepath.Join(wt.Path, "ignored.log"), "ignored\n")
	indexBefore := readFile(t, filepath.Join(wt.AdminDir, "index"))

	res, err := m.Remove(ctx, wt, RemoveOptions{})
	if err != nil {
		t.Fatalf("Remove: %v", err)
	}
	ref := "refs/ohd/snapshots/" + id
	want := RemoveResult{
		SnapshotRef:        ref,
		SnapshotCommit:     gitIn(t, repo.TopLevel, "rev-parse", ref),
		CommitsBeyondStart: 0,
		BranchKept:         true,
		IgnoredFiles:       1,
		IgnoredBytes:       8,
		Message:            "worktree " + wt.Path + " removed; branch openhands/" + id + " kept: uncommitted work saved in " + ref + "; 1 ignored file (8 bytes) not kept",
	}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("Remove result mismatch (-want +got):\n%s", diff)
	}
	files := map[string]string{
		"README.md":         "modified\n",
		"staged.txt":        "staged\n",
		"dir/untracked.txt": "untracked\n",
		".gitignore":        "*.log\n",
	}
	for f, content := range files {
		if got := gitIn(t, repo.TopLevel, "show", ref+":"+f) + "\n"; got != content {
			t.Errorf("snapshot %s = %q, want %q", f, got, content)
		}
	}
	if got := gitIn(t, repo.TopLevel, "ls-tree", "-r", "--name-only", ref); strings.Contains(got, "ignored.log") {
		t.Errorf("snapshot tree has ignored.log: %q", got)
	}
	if got, want := gitIn(t, repo.TopLevel, "rev-parse", ref+"^1"), wt.StartCommit; got != want {
		t.Errorf("snapshot parent = %s, want HEAD %s", got, want)
	}
	// The index (staged.txt added) differed from HEAD and from the working
	// tree, so it is the second parent.
	if got := gitIn(t, repo.TopLevel, "ls-tree", "-r", "--name-only", ref+"^2"); got != "README.md\nstaged.txt" {
		t.Errorf("snapshot index parent tree = %q, want README.md and staged.txt", got)
	}
	if got := gitIn(t, repo.TopLevel, "show", ref+"^2:README.md"); got != "hello" {
		t.Errorf("snapshot index README.md = %q, want the unstaged original", got)
	}
	_ = indexBefore
	if !refExists(t, repo.TopLevel, "refs/heads/"+wt.Branch) {
		t.Errorf("branch %s deleted, want kept (a snapshot was needed)", wt.Branch)
	}
	assertGone(t, m, wt)
}

// TestSnapshotDoesNotTouchIndex: Snapshot leaves the worktree's own index
// byte-for-byte unchanged, and returns nothing for a clean worktree.
func TestSnapshotDoesNotTouchIndex(t *testing.T) {
	m, repo, wt := newRepoWorktree(t)
	ctx := testCtx(t)
	if ref, commit, err := m.Snapshot(ctx, wt); err != nil || ref != "" || commit != "" {
		t.Fatalf("Snapshot(clean) = %q, %q, %v; want nothing", ref, commit, err)
	}
	if refExists(t, repo.TopLevel, SnapshotRef(wt.ConversationID)) {
		t.Fatalf("Snapshot(clean) created %s", SnapshotRef(wt.ConversationID))
	}
	testenv.WriteFile(t, filepath.Join(wt.Path, "new.txt"), "new\n")
	index := filepath.Join(wt.AdminDir, "index")
	before := readFile(t, index)
	ref, commit, err := m.Snapshot(ctx, wt)
	if err != nil || ref != SnapshotRef(wt.ConversationID) || !isHexID(commit) {
		t.Fatalf("Snapshot = %q, %q, %v; want the snapshot ref and a commit", ref, commit, err)
	}
	if after := readFile(t, index); after != before {
		t.Errorf("Snapshot changed the worktree's index")
	}
	if got := gitIn(t, wt.Path, "status", "--porcelain"); got != "?? new.txt" {
		t.Errorf("git status after Snapshot = %q, want new.txt still untracked", got)
	}
	if got := gitIn(t, repo.TopLevel, "rev-list", "--parents", "-n", "1", commit); got != commit+" "+wt.StartCommit {
		t.Errorf("snapshot parents = %q, want only HEAD (index == HEAD)", got)
	}
}

// TestSnapshotSeesARacilyCleanChange: a file the agent changed at the same
// size in the same second as its index was last written (commit, then the
// next write 200 ms later) is saved. Git trusts such an entry's size and
// times only because the index file is no older than it; the snapshot's
// copy of the index once had a new time, git took the file for unchanged
// and the change was lost.
func TestSnapshotSeesARacilyCleanChange(t *testing.T) {
	m, repo, wt := newRepoWorktree(t)
	raceIndex(t, wt.Path, filepath.Join(wt.AdminDir, "index"))
	_, commit, err := m.Snapshot(testCtx(t), wt)
	if err != nil || commit == "" {
		t.Fatalf("Snapshot = %q, %v; want a commit holding last.txt = 11", commit, err)
	}
	if got := gitIn(t, repo.TopLevel, "show", commit+":last.txt"); got != "11" {
		t.Errorf("snapshot last.txt = %q, want 11", got)
	}
}

// raceIndex commits last.txt = 10 in the work tree at dir (whose index is
// index), then writes 11 into it, with the file's and the index's
// modification times in one second, as when an agent writes 200 ms after
// its commit: git sees the change only because the entry is no older
// than the index. It checks that git sees it there.
func raceIndex(t *testing.T, dir, index string) {
	t.Helper()
	f := filepath.Join(dir, "last.txt")
	past := time.Now().Add(-time.Hour).Truncate(time.Second)
	for attempt := 1; ; attempt++ {
		testenv.WriteFile(t, f, "10\n")
		if err := os.Chtimes(f, past, past); err != nil {
			t.Fatal(err)
		}
		gitIn(t, dir, "add", "last.txt")
		// --allow-empty: on a retry, c10 is committed already.
		gitIn(t, dir, "-c", "user.name=a", "-c", "user.email=a@x", "commit", "-q", "--allow-empty", "-m", "c10")
		// The same size, and the same file (inode).
		testenv.WriteFile(t, f, "11\n")
		for _, p := range []string{f, index} {
			if err := os.Chtimes(p, past, past); err != nil {
				t.Fatal(err)
			}
		}
		// Git compares the change time's seconds too: the write must
		// fall in the second the entry recorded.
		if entryCtime(t, dir, "last.txt") == fileCtime(t, f) {
			break
		}
		if attempt == 5 {
			t.Fatal("five attempts each crossed a second: cannot set the race up")
		}
	}
	// --no-optional-locks: a status that refreshed the index would
	// rewrite it and end the race.
	if got := gitIn(t, dir, "--no-optional-locks", "status", "--porcelain"); got != "M last.txt" {
		t.Fatalf("git status = %q, want last.txt modified", got)
	}
}

// entryCtime is the change time's seconds that the index of the work tree
// at dir records for path.
func entryCtime(t *testing.T, dir, path string) string {
	t.Helper()
	out := gitIn(t, dir, "ls-files", "--debug", "--", path)
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "ctime: "); ok {
			sec, _, _ := strings.Cut(v, ":")
			return sec
		}
	}
	t.Fatalf("git ls-files --debug %s printed no ctime:\n%s", path, out)
	return ""
}

// fileCtime is path's change time's seconds.
func fileCtime(t *testing.T, path string) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return strconv.FormatInt(st.Ctim.Sec, 10)
}

// TestRemoveBranchPolicy: a branch with a commit is kept, a clean branch
// without commits is deleted, Discard deletes branch and snapshot.
func TestRemoveBranchPolicy(t *testing.T) {
	t.Run("commit kept", func(t *testing.T) {
		m, repo, wt := newRepoWorktree(t)
		commitFile(t, wt.Path, "work.txt", "work\n", "agent work")
		commitFile(t, wt.Path, "more.txt", "more\n", "more work")
		res, err := m.Remove(testCtx(t), wt, RemoveOptions{})
		if err != nil {
			t.Fatalf("Remove: %v", err)
		}
		want := RemoveResult{
			CommitsBeyondStart: 2,
			BranchKept:         true,
			Message:            "worktree " + wt.Path + " removed; branch " + wt.Branch + " kept: 2 commits beyond start",
		}
		if diff := cmp.Diff(want, res); diff != "" {
			t.Errorf("Remove result mismatch (-want +got):\n%s", diff)
		}
		if got := gitIn(t, repo.TopLevel, "show", wt.Branch+":work.txt"); got != "work" {
			t.Errorf("kept branch work.txt = %q, want %q", got, "work")
		}
		assertGone(t, m, wt)
	})
	t.Run("clean deleted", func(t *testing.T) {
		m, repo, wt := newRepoWorktree(t)
		res, err := m.Remove(testCtx(t), wt, RemoveOptions{})
		if err != nil {
			t.Fatalf("Remove: %v", err)
		}
		want := RemoveResult{
			CommitsBeyondStart: 0,
			BranchDeleted:      true,
			Message:            "worktree " + wt.Path + " removed; branch " + wt.Branch + " deleted (no commits beyond start, nothing uncommitted)",
		}
		if diff := cmp.Diff(want, res); diff != "" {
			t.Errorf("Remove result mismatch (-want +got):\n%s", diff)
		}
		if refExists(t, repo.TopLevel, "refs/heads/"+wt.Branch) {
			t.Errorf("branch %s kept, want deleted", wt.Branch)
		}
		if exists(t, filepath.Join(wt.CommonDir, "logs", "refs", "heads", wt.Branch)) {
			t.Errorf("the branch's reflog is left behind")
		}
		assertGone(t, m, wt)
	})
	t.Run("discard", func(t *testing.T) {
		m, repo, wt := newRepoWorktree(t)
		commitFile(t, wt.Path, "work.txt", "work\n", "agent work")
		testenv.WriteFile(t, filepath.Join(wt.Path, "dirty.txt"), "dirty\n")
		// An earlier snapshot exists too: Discard drops it.
		if _, _, err := m.Snapshot(testCtx(t), wt); err != nil {
			t.Fatal(err)
		}
		res, err := m.Remove(testCtx(t), wt, RemoveOptions{Discard: true})
		if err != nil {
			t.Fatalf("Remove(Discard): %v", err)
		}
		if !res.BranchDeleted || res.BranchKept || res.SnapshotRef != "" {
			t.Errorf("Remove(Discard) = %+v, want branch deleted and no snapshot", res)
		}
		for _, ref := range []string{"refs/heads/" + wt.Branch, SnapshotRef(wt.ConversationID)} {
			if refExists(t, repo.TopLevel, ref) {
				t.Errorf("%s exists after Remove(Discard)", ref)
			}
		}
		assertGone(t, m, wt)
	})
	t.Run("checked out elsewhere", func(t *testing.T) {
		m, repo, wt := newRepoWorktree(t)
		// The user took the branch over in another worktree of their own.
		other := filepath.Join(testenv.TempDir(t), "other")
		gitIn(t, wt.Path, "checkout", "-q", "--detach")
		gitIn(t, repo.TopLevel, "worktree", "add", "-q", other, wt.Branch)
		res, err := m.Remove(testCtx(t), wt, RemoveOptions{Discard: true})
		if err != nil {
			t.Fatalf("Remove: %v", err)
		}
		if !res.BranchKept || res.BranchDeleted || !strings.Contains(res.Message, "checked out in "+other) {
			t.Errorf("Remove = %+v, want the branch kept because %s has it checked out", res, other)
		}
		if !refExists(t, repo.TopLevel, "refs/heads/"+wt.Branch) {
			t.Errorf("branch deleted while checked out in %s", other)
		}
	})
}

// TestRemoveIdempotent: a Remove after the worktree directory was deleted
// by hand, after a crash halfway, and after a completed Remove all succeed
// and leave nothing stale.
func TestRemoveIdempotent(t *testing.T) {
	t.Run("directory deleted by hand", func(t *testing.T) {
		m, repo, wt := newRepoWorktree(t)
		if err := os.RemoveAll(wt.Path); err != nil {
			t.Fatal(err)
		}
		res, err := m.Remove(testCtx(t), wt, RemoveOptions{})
		if err != nil {
			t.Fatalf("Remove after rm -rf: %v", err)
		}
		if !res.BranchDeleted {
			t.Errorf("Remove = %+v, want the unchanged branch deleted", res)
		}
		assertGone(t, m, wt)
		_ = repo
	})
	t.Run("crash after snapshot", func(t *testing.T) {
		m, repo, wt := newRepoWorktree(t)
		testenv.WriteFile(t, filepath.Join(wt.Path, "work.txt"), "work\n")
		ref, commit, err := m.Snapshot(testCtx(t), wt)
		if err != nil {
			t.Fatal(err)
		}
		// The crash happened after git removed the directory, before the
		// admin dir went.
		if err := os.RemoveAll(wt.Path); err != nil {
			t.Fatal(err)
		}
		res, err := m.Remove(testCtx(t), wt, RemoveOptions{})
		if err != nil {
			t.Fatalf("Remove (retry): %v", err)
		}
		if res.SnapshotRef != ref || res.SnapshotCommit != commit || !res.BranchKept {
			t.Errorf("Remove (retry) = %+v, want the earlier snapshot %s reported and the branch kept", res, commit)
		}
		assertGone(t, m, wt)
		_ = repo
	})
	t.Run("twice", func(t *testing.T) {
		m, _, wt := newRepoWorktree(t)
		commitFile(t, wt.Path, "work.txt", "work\n", "agent work")
		first, err := m.Remove(testCtx(t), wt, RemoveOptions{})
		if err != nil {
			t.Fatalf("Remove: %v", err)
		}
		second, err := m.Remove(testCtx(t), wt, RemoveOptions{})
		if err != nil {
			t.Fatalf("Remove (again): %v", err)
		}
		if !second.AlreadyRemoved || !second.BranchKept || second.CommitsBeyondStart != 1 {
			t.Errorf("Remove (again) = %+v, want already removed, branch kept", second)
		}
		if first.AlreadyRemoved {
			t.Errorf("first Remove = %+v, want AlreadyRemoved false", first)
		}
		assertGone(t, m, wt)
	})
	t.Run("admin dir name reused", func(t *testing.T) {
		// After a removal, git may give the same admin dir name to a new
		// worktree; a retried Remove of the old one must not touch it.
		m := newManager(t)
		repo := mustInspect(t, m, testenv.NewRepo(t, testenv.RepoOptions{}))
		old := mustAdd(t, m, repo, newID(t), "")
		if _, err := m.Remove(testCtx(t), old, RemoveOptions{}); err != nil {
			t.Fatal(err)
		}
		cur := mustAdd(t, m, repo, newID(t), "")
		if cur.AdminDir != old.AdminDir {
			t.Fatalf("git did not reuse the admin dir name (%s vs %s); the test needs it", cur.AdminDir, old.AdminDir)
		}
		if _, err := m.Remove(testCtx(t), old, RemoveOptions{Discard: true}); err != nil {
			t.Fatalf("Remove (retry of the old one): %v", err)
		}
		if h, err := m.Health(testCtx(t), cur); err != nil || !h.Registered || !h.GitdirResolves {
			t.Errorf("Health(current) = %+v, %v after removing the old worktree; want intact", h, err)
		}
	})
	t.Run("unregistered directory keeps files", func(t *testing.T) {
		m, _, wt := newRepoWorktree(t)
		testenv.WriteFile(t, filepath.Join(wt.Path, "work.txt"), "work\n")
		if err := os.RemoveAll(wt.AdminDir); err != nil { // e.g. a prune elsewhere
			t.Fatal(err)
		}
		_, err := m.Remove(testCtx(t), wt, RemoveOptions{})
		if !errors.Is(err, ErrUnsavedWork) {
			t.Fatalf("Remove(unregistered dir) = %v, want ErrUnsavedWork", err)
		}
		if got := readFile(t, filepath.Join(wt.Path, "work.txt")); got != "work\n" {
			t.Fatalf("work.txt = %q after refused Remove", got)
		}
		if _, err := m.Remove(testCtx(t), wt, RemoveOptions{Discard: true}); err != nil {
			t.Fatalf("Remove(Discard): %v", err)
		}
		assertGone(t, m, wt)
	})
}

// TestRemoveTamperedPointers: the agent rewrote its .git file to name
// another conversation's admin dir and its admin dir's gitdir to name the
// other worktree. Remove still snapshots and removes its own worktree,
// leaves no stale registration and does not harm the other one.
func TestRemoveTamperedPointers(t *testing.T) {
	m := newManager(t)
	repo := mustInspect(t, m, testenv.NewRepo(t, testenv.RepoOptions{}))
	a := mustAdd(t, m, repo, newID(t), "")
	b := mustAdd(t, m, repo, newID(t), "")
	testenv.WriteFile(t, filepath.Join(a.Path, "work.txt"), "work of a\n")
	testenv.WriteFile(t, filepath.Join(a.Path, ".git"), "gitdir: "+b.AdminDir+"\n")
	testenv.WriteFile(t, filepath.Join(a.AdminDir, "gitdir"), filepath.Join(b.Path, ".git")+"\n")

	res, err := m.Remove(testCtx(t), a, RemoveOptions{})
	if err != nil {
		t.Fatalf("Remove(tampered): %v", err)
	}
	if res.SnapshotRef == "" {
		t.Errorf("Remove(tampered) = %+v, want a snapshot of work.txt", res)
	} else if got := gitIn(t, repo.TopLevel, "show", res.SnapshotRef+":work.txt"); got != "work of a" {
		t.Errorf("snapshot work.txt = %q, want %q", got, "work of a")
	}
	for _, p := range []string{a.AdminDir, a.Path} {
		if exists(t, p) {
			t.Errorf("%s still exists", p)
		}
	}
	regs := worktreeList(t, repo.TopLevel)
	if len(regs) != 2 || regs[1].Path != b.Path || !regs[1].Locked {
		t.Errorf("git worktree list = %+v, want the main worktree and b, locked", regs)
	}
	if h, err := m.Health(testCtx(t), b); err != nil || !h.Registered || !h.GitdirResolves || !h.Locked {
		t.Errorf("Health(b) = %+v, %v; want intact", h, err)
	}
	if _, err := m.Remove(testCtx(t), b, RemoveOptions{}); err != nil {
		t.Fatalf("Remove(b): %v", err)
	}
	assertGone(t, m, b)
}

// TestSnapshotOrphanHead: an agent that switched to an unborn branch
// still gets its files saved, in a commit without parents.
func TestSnapshotOrphanHead(t *testing.T) {
	m, repo, wt := newRepoWorktree(t)
	gitIn(t, wt.Path, "checkout", "-q", "--orphan", "fresh")
	gitIn(t, wt.Path, "rm", "-q", "-rf", "--cached", ".")
	testenv.WriteFile(t, filepath.Join(wt.Path, "only.txt"), "only\n")
	_, commit, err := m.Snapshot(testCtx(t), wt)
	if err != nil || commit == "" {
		t.Fatalf("Snapshot(orphan) = %q, %v", commit, err)
	}
	if got := gitIn(t, repo.TopLevel, "rev-list", "--parents", "-n", "1", commit); got != commit {
		t.Errorf("snapshot parents = %q, want none", got)
	}
	if got := gitIn(t, repo.TopLevel, "show", commit+":only.txt"); got != "only" {
		t.Errorf("snapshot only.txt = %q", got)
	}
}

// TestSnapshotEmptyNestedRepo: a nested repository without a commit
// (`git init sub`) cannot be a gitlink, and outside the sandbox its files
// are not read: the snapshot refuses, naming it, and Remove removes
// nothing (its files would be lost).
func TestSnapshotEmptyNestedRepo(t *testing.T) {
	m, _, wt := newRepoWorktree(t)
	gitIn(t, wt.Path, "init", "-q", "sub")
	testenv.WriteFile(t, filepath.Join(wt.Path, "sub", "inner.txt"), "inner\n")
	testenv.WriteFile(t, filepath.Join(wt.Path, "wip.txt"), "wip\n")
	_, commit, err := m.Snapshot(testCtx(t), wt)
	if !errors.Is(err, ErrUnsavedWork) || !strings.Contains(err.Error(), filepath.Join(wt.Path, "sub")) || !strings.Contains(err.Error(), "--discard") {
		t.Fatalf("Snapshot(empty nested repo) = %q, %v, want ErrUnsavedWork naming %s and --discard", commit, err, filepath.Join(wt.Path, "sub"))
	}
	before := listing(t, wt.Path)
	if _, err := m.Remove(testCtx(t), wt, RemoveOptions{}); !errors.Is(err, ErrUnsavedWork) {
		t.Fatalf("Remove(empty nested repo) = %v, want ErrUnsavedWork", err)
	}
	if after := listing(t, wt.Path); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Errorf("a refused Remove changed the worktree:\nbefore %v\nafter  %v", before, after)
	}
}

// TestRemoveThroughTrash: with a trash dir, the removal moves the
// worktree's directory there in one rename (gone for every reader when
// Remove returns, its work saved first) and deletes it in the background;
// what a killed ohd left in the trash is deleted by the next New, and
// nothing else of the trash's parent is touched.
func TestRemoveThroughTrash(t *testing.T) {
	dir := testenv.TempDir(t)
	trash := filepath.Join(dir, "trash")
	var steps []string
	m, err := New(Options{Root: filepath.Join(dir, "worktrees"), LockDir: filepath.Join(dir, "locks"), TrashDir: trash,
		OnStep: func(s string) { steps = append(steps, s) }})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	repo := mustInspect(t, m, testenv.NewRepo(t, testenv.RepoOptions{}))
	wt := mustAdd(t, m, repo, newID(t), "")
	testenv.WriteFile(t, filepath.Join(wt.Path, "deep", "er", "untracked.txt"), "work\n")
	if err := os.Symlink(filepath.Join(dir, "keep.txt"), filepath.Join(wt.Path, "link")); err != nil {
		t.Fatal(err)
	}
	testenv.WriteFile(t, filepath.Join(dir, "keep.txt"), "not the worktree's\n")

	res, err := m.Remove(testCtx(t), wt, RemoveOptions{})
	if err != nil {
		t.Fatalf("Remove: %v", err)
	}
	assertGone(t, m, wt)
	if got := gitIn(t, repo.TopLevel, "show", res.SnapshotRef+":deep/er/untracked.txt"); got != "work" {
		t.Errorf("snapshot holds %q, want the untracked file", got)
	}
	if !slices.Contains(steps, "trashed") {
		t.Errorf("steps %v: no \"trashed\" (the failpoint of a removal killed with its files in the trash)", steps)
	}
	m.Wait()
	if left, _ := os.ReadDir(trash); len(left) != 0 {
		t.Errorf("trash holds %v after Wait, want nothing", left)
	}
	if got := readFile(t, filepath.Join(dir, "keep.txt")); got != "not the worktree's\n" {
		t.Errorf("the symlink's target = %q: followed by the deletion", got)
	}

	// A removal killed after its rename: the next Manager deletes it.
	left := filepath.Join(trash, wt.ConversationID+".killed")
	testenv.WriteFile(t, filepath.Join(left, "a", "b.txt"), "garbage\n")
	m2, err := New(Options{Root: filepath.Join(dir, "worktrees"), LockDir: filepath.Join(dir, "locks"), TrashDir: trash})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	m2.Wait()
	if exists(t, left) {
		t.Errorf("%s is left after New and Wait", left)
	}
	if !exists(t, trash) {
		t.Errorf("the trash dir itself is gone")
	}

	// A trash on no filesystem of the worktree's is not reached by a
	// rename: the worktree is deleted in place, as without one.
	m3, err := New(Options{Root: filepath.Join(dir, "worktrees"), LockDir: filepath.Join(dir, "locks"), TrashDir: "/dev/shm/ohd-test-trash-" + newID(t)})
	if err != nil {
		t.Skipf("no second filesystem to try: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(m3.trash) })
	wt3 := mustAdd(t, m3, repo, newID(t), "")
	if _, err := m3.Remove(testCtx(t), wt3, RemoveOptions{}); err != nil {
		t.Fatalf("Remove with the trash on another filesystem: %v", err)
	}
	assertGone(t, m3, wt3)
}
