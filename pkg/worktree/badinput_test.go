package worktree

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// TestInspect covers the answers of Inspect.
func TestInspect(t *testing.T) {
	m := newManager(t)
	repoDir := testenv.NewRepo(t, testenv.RepoOptions{})
	sub := filepath.Join(repoDir, "sub", "dir")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(testenv.TempDir(t), "link")
	if err := os.Symlink(sub, link); err != nil {
		t.Fatal(err)
	}
	plain := testenv.TempDir(t)
	common := filepath.Join(repoDir, ".git")
	uid, gid := os.Geteuid(), os.Getegid()

	tests := []struct {
		path string
		want Repo
	}{
		{repoDir, Repo{Workspace: repoDir, IsGit: true, TopLevel: repoDir, CommonDir: common, GitDir: common, UID: uid, GID: gid}},
		{sub, Repo{Workspace: sub, IsGit: true, TopLevel: repoDir, CommonDir: common, GitDir: common, Prefix: "sub/dir", UID: uid, GID: gid}},
		{link, Repo{Workspace: sub, IsGit: true, TopLevel: repoDir, CommonDir: common, GitDir: common, Prefix: "sub/dir", UID: uid, GID: gid}},
		{plain, Repo{Workspace: plain}},
	}
	for _, tc := range tests {
		got, err := m.Inspect(testCtx(t), tc.path)
		if err != nil {
			t.Errorf("Inspect(%q): %v", tc.path, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("Inspect(%q) mismatch (-want +got):\n%s", tc.path, diff)
		}
	}

	// A linked worktree as workspace: its own git dir, the shared common dir.
	linked := filepath.Join(testenv.TempDir(t), "linked")
	gitIn(t, repoDir, "worktree", "add", "-q", "-b", "other", linked)
	got, err := m.Inspect(testCtx(t), linked)
	if err != nil {
		t.Fatal(err)
	}
	want := Repo{Workspace: linked, IsGit: true, TopLevel: linked, CommonDir: common, GitDir: filepath.Join(common, "worktrees", "linked"), UID: uid, GID: gid}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Inspect(linked worktree) mismatch (-want +got):\n%s", diff)
	}
}

// TestBadInputChangesNothing: every invalid request fails with a clear,
// classified error and leaves the worktree root and the repository's git
// dir exactly as they were.
func TestBadInputChangesNothing(t *testing.T) {
	m := newManager(t)
	repoDir := testenv.NewRepo(t, testenv.RepoOptions{})
	file := filepath.Join(repoDir, "README.md")
	repo := mustInspect(t, m, repoDir)
	taken := mustAdd(t, m, repo, newID(t), "")
	branchID := newID(t)
	gitIn(t, repoDir, "branch", "openhands/"+branchID)
	stale := repo
	stale.TopLevel = filepath.Dir(repoDir)
	notGit := Repo{Workspace: testenv.TempDir(t)}

	before := listing(t, m.Root(), repo.CommonDir)

	inspectTests := []struct {
		path    string
		want    error
		wantMsg string
	}{
		{"", ErrInvalidPath, "empty path"},
		{"relative/repo", ErrInvalidPath, "relative: pass an absolute path"},
		{filepath.Join(repoDir, "missing"), fs.ErrNotExist, "check the path"},
		{file, ErrInvalidPath, "not a directory"},
		{repo.CommonDir, ErrInvalidPath, "not a work tree"},
		{repoDir + "\n", ErrInvalidPath, "control character"},
	}
	for _, tc := range inspectTests {
		_, err := m.Inspect(testCtx(t), tc.path)
		if !errors.Is(err, tc.want) || !strings.Contains(errText(err), tc.wantMsg) {
			t.Errorf("Inspect(%q) = %v, want %v mentioning %q", tc.path, err, tc.want, tc.wantMsg)
		}
	}

	addTests := []struct {
		name    string
		opts    AddOptions
		want    error
		wantMsg string
	}{
		{"empty id", AddOptions{Repo: repo}, ErrInvalidID, "want a lower-case UUID"},
		{"not a uuid", AddOptions{Repo: repo, ConversationID: "conversation-1"}, ErrInvalidID, ""},
		{"upper-case uuid", AddOptions{Repo: repo, ConversationID: strings.ToUpper(newID(t))}, ErrInvalidID, ""},
		{"path traversal", AddOptions{Repo: repo, ConversationID: "../../../../../../../../../etc/passwd"}, ErrInvalidID, ""},
		{"uuid with newline", AddOptions{Repo: repo, ConversationID: newID(t)[:35] + "\n"}, ErrInvalidID, ""},
		{"unknown start point", AddOptions{Repo: repo, ConversationID: newID(t), StartPoint: "foo"}, ErrInvalidStartPoint,
			`"foo" is not a commit in ` + repoDir + ": pass an existing branch, tag or commit to --start-point"},
		{"bad revision syntax", AddOptions{Repo: repo, ConversationID: newID(t), StartPoint: "main~~x"}, ErrInvalidStartPoint, "is not a commit"},
		{"a tree is not a commit", AddOptions{Repo: repo, ConversationID: newID(t), StartPoint: "main^{tree}"}, ErrInvalidStartPoint, "is not a commit"},
		{"option-like start point", AddOptions{Repo: repo, ConversationID: newID(t), StartPoint: "-x"}, ErrInvalidStartPoint, "looks like an option"},
		{"option-like long", AddOptions{Repo: repo, ConversationID: newID(t), StartPoint: "--orphan"}, ErrInvalidStartPoint, "looks like an option"},
		{"NUL in start point", AddOptions{Repo: repo, ConversationID: newID(t), StartPoint: "main\x00x"}, ErrInvalidStartPoint, "control character"},
		{"newline in start point", AddOptions{Repo: repo, ConversationID: newID(t), StartPoint: "main\nx"}, ErrInvalidStartPoint, "control character"},
		{"not a git repository", AddOptions{Repo: notGit, ConversationID: newID(t)}, ErrNotGit, "start the conversation without a worktree"},
		{"repo not inspected", AddOptions{ConversationID: newID(t)}, ErrInvalidPath, "call Inspect first"},
		{"stale repo", AddOptions{Repo: stale, ConversationID: newID(t)}, ErrInvalidPath, "changed since it was inspected"},
		{"conversation exists", AddOptions{Repo: repo, ConversationID: taken.ConversationID}, ErrExists, "remove the conversation first"},
		{"branch exists", AddOptions{Repo: repo, ConversationID: branchID}, ErrExists, "branch openhands/" + branchID + " exists"},
	}
	for _, tc := range addTests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.Add(testCtx(t), tc.opts)
			if !errors.Is(err, tc.want) || !strings.Contains(errText(err), tc.wantMsg) {
				t.Errorf("Add(%s) = %v, want %v mentioning %q", tc.name, err, tc.want, tc.wantMsg)
			}
		})
	}
	if after := listing(t, m.Root(), repo.CommonDir); !equalStrings(before, after) {
		t.Errorf("bad input changed the disk (-before +after):\n%s", cmp.Diff(before, after))
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestAddFailsMidway: when the checkout fails after `git worktree add`
// succeeded, Add leaves no directory, admin dir, branch or lock behind.
func TestAddFailsMidway(t *testing.T) {
	m := newManager(t)
	repoDir := testenv.NewRepo(t, testenv.RepoOptions{})
	commitFile(t, repoDir, "big.txt", "a blob that will go missing\n", "second")
	blob := gitIn(t, repoDir, "rev-parse", "HEAD:big.txt")
	if err := os.Remove(filepath.Join(repoDir, ".git", "objects", blob[:2], blob[2:])); err != nil {
		t.Fatal(err)
	}
	repo := mustInspect(t, m, repoDir)
	before := listing(t, m.Root(), repo.CommonDir)

	id := newID(t)
	_, err := m.Add(testCtx(t), AddOptions{Repo: repo, ConversationID: id})
	if !errors.Is(err, ErrGit) || !strings.Contains(err.Error(), "check out main") {
		t.Fatalf("Add with a missing blob = %v, want a git error while checking out", err)
	}
	if after := listing(t, m.Root(), repo.CommonDir); !equalStrings(before, after) {
		t.Errorf("failed Add left changes (-before +after):\n%s", cmp.Diff(before, after))
	}
	if refExists(t, repoDir, "refs/heads/openhands/"+id) {
		t.Errorf("failed Add left branch openhands/%s", id)
	}
	if regs := worktreeList(t, repoDir); len(regs) != 1 {
		t.Errorf("failed Add left registrations: %+v", regs)
	}
}

// TestUndoAddInterrupted: git stopped right after creating the admin dir
// (only its lock, carrying our reason, is written): the undo finds it by
// that reason and leaves other admin dirs alone.
func TestUndoAddInterrupted(t *testing.T) {
	m := newManager(t)
	repo := mustInspect(t, m, testenv.NewRepo(t, testenv.RepoOptions{}))
	id := newID(t)
	wt := Worktree{ConversationID: id, Repo: repo.TopLevel, CommonDir: repo.CommonDir,
		Path: filepath.Join(m.Root(), id, "repo"), Branch: BranchName(id), UID: repo.UID, GID: repo.GID}
	half := filepath.Join(repo.CommonDir, "worktrees", "repo")
	other := filepath.Join(repo.CommonDir, "worktrees", "repo1")
	testenv.WriteFile(t, filepath.Join(half, "locked"), LockReason(id))
	testenv.WriteFile(t, filepath.Join(other, "locked"), LockReason(newID(t)))
	m.undoAdd(testCtx(t), wt, true)
	if exists(t, half) {
		t.Errorf("undoAdd left the half-created admin dir %s", half)
	}
	if !exists(t, other) {
		t.Errorf("undoAdd removed %s, another conversation's", other)
	}
}
