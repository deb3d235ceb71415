package snapshot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/hardgit"
)

// linkedTree returns a builder and a fresh linked worktree of a new
// repository, as package worktree makes one (the snapshot reads its admin
// dir, never its .git file).
func linkedTree(t *testing.T) (*Builder, Tree) {
	t.Helper()
	git, err := hardgit.Look()
	if err != nil {
		testenv.Missing(t, "git: %v", err)
	}
	repo := testenv.NewRepo(t, testenv.RepoOptions{})
	path := filepath.Join(testenv.TempDir(t), "wt")
	testenv.Git(t, repo, "worktree", "add", "-q", "-b", "work", path)
	b := &Builder{Git: hardgit.Runner{Path: git, Timeout: time.Minute, EUID: os.Geteuid()}}
	return b, Tree{ID: "123e4567-e89b-12d3-a456-426614174000", Path: path,
		GitDir: filepath.Join(repo, ".git", "worktrees", "wt"), UID: os.Getuid(), GID: os.Getgid()}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestCommitRecordsUncommittedWork: a clean tree has no snapshot; a
// modified, a staged and an untracked file are in the snapshot's tree,
// the staged state is its second parent, and the worktree's own index is
// not written.
func TestCommitRecordsUncommittedWork(t *testing.T) {
	b, wt := linkedTree(t)
	if commit, _, _, err := b.Commit(testCtx(t), wt, false); commit != "" || err != nil {
		t.Fatalf("Commit(clean tree) = %q, %v; want no snapshot", commit, err)
	}
	testenv.WriteFile(t, filepath.Join(wt.Path, "README.md"), "changed\n")
	testenv.WriteFile(t, filepath.Join(wt.Path, "staged.txt"), "staged\n")
	testenv.Git(t, wt.Path, "add", "staged.txt")
	testenv.WriteFile(t, filepath.Join(wt.Path, "new.txt"), "untracked\n")
	index := filepath.Join(wt.GitDir, "index")
	before, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	commit, nested, ignored, err := b.Commit(testCtx(t), wt, false)
	if err != nil || !hardgit.IsObjectID(commit) {
		t.Fatalf("Commit = %q, %v; want a commit", commit, err)
	}
	if nested != nil || ignored != nil {
		t.Errorf("Commit outside the sandbox: nested %q, ignored %q; want none", nested, ignored)
	}
	files := strings.Fields(testenv.Git(t, wt.Path, "ls-tree", "-r", "--name-only", commit))
	if diff := cmp.Diff([]string{"README.md", "new.txt", "staged.txt"}, files); diff != "" {
		t.Errorf("snapshot tree mismatch (-want +got):\n%s", diff)
	}
	if got := testenv.Git(t, wt.Path, "show", commit+":README.md"); got != "changed" {
		t.Errorf("snapshot's README.md = %q, want the change", got)
	}
	if got := testenv.Git(t, wt.Path, "rev-parse", commit+"^1"); got != testenv.Git(t, wt.Path, "rev-parse", "HEAD") {
		t.Errorf("snapshot's first parent %s is not HEAD", got)
	}
	staged := strings.Fields(testenv.Git(t, wt.Path, "ls-tree", "-r", "--name-only", commit+"^2"))
	if diff := cmp.Diff([]string{"README.md", "staged.txt"}, staged); diff != "" {
		t.Errorf("snapshot's index parent mismatch (-want +got):\n%s", diff)
	}
	if after, err := os.ReadFile(index); err != nil || string(after) != string(before) {
		t.Errorf("the worktree's index changed (%v)", err)
	}
}

// TestCommitNestedRepository: a nested repository without a commit cannot
// be saved outside the sandbox (ErrUnsavedWork, naming it); in the sandbox
// it is saved as its files.
func TestCommitNestedRepository(t *testing.T) {
	b, wt := linkedTree(t)
	sub := filepath.Join(wt.Path, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.Git(t, sub, "init", "-q")
	testenv.WriteFile(t, filepath.Join(sub, "inner.txt"), "inner\n")
	if _, _, _, err := b.Commit(testCtx(t), wt, false); !errors.Is(err, ErrUnsavedWork) || !strings.Contains(err.Error(), sub) {
		t.Fatalf("Commit(nested repository, outside the sandbox) = %v, want ErrUnsavedWork naming %s", err, sub)
	}
	commit, nested, _, err := b.Commit(testCtx(t), wt, true)
	if err != nil || commit == "" {
		t.Fatalf("Commit(nested repository, in the sandbox) = %q, %v", commit, err)
	}
	if diff := cmp.Diff([]string{"sub"}, nested); diff != "" {
		t.Errorf("nested mismatch (-want +got):\n%s", diff)
	}
	if got := testenv.Git(t, wt.Path, "show", commit+":sub/inner.txt"); got != "inner" {
		t.Errorf("snapshot's sub/inner.txt = %q, want the nested repository's file", got)
	}
}
