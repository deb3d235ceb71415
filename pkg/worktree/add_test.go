package worktree

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/worktree/porcelain"
)

// TestAddRegistersLockedWorktree: after Add the host's own git sees the
// worktree locked with ohd's reason, not prunable, on openhands/<id>, and
// the two gitdir pointers name each other.
func TestAddRegistersLockedWorktree(t *testing.T) {
	m, repo, wt := newRepoWorktree(t)
	id := wt.ConversationID

	want := Worktree{
		ConversationID: id,
		Repo:           repo.TopLevel,
		CommonDir:      filepath.Join(repo.TopLevel, ".git"),
		Path:           filepath.Join(m.Root(), id, "repo"),
		AdminID:        "repo",
		AdminDir:       filepath.Join(repo.TopLevel, ".git", "worktrees", "repo"),
		Branch:         "openhands/" + id,
		StartPoint:     "main",
		StartCommit:    gitIn(t, repo.TopLevel, "rev-parse", "main"),
		UID:            os.Geteuid(),
		GID:            os.Getegid(),
	}
	if diff := cmp.Diff(want, wt); diff != "" {
		t.Errorf("Add() mismatch (-want +got):\n%s", diff)
	}

	var found *porcelain.Registration
	regs := worktreeList(t, repo.TopLevel)
	for i := range regs {
		if regs[i].Path == wt.Path {
			found = &regs[i]
		}
	}
	if found == nil {
		t.Fatalf("git worktree list = %+v, want an entry for %s", regs, wt.Path)
	}
	wantReg := porcelain.Registration{
		Path:       wt.Path,
		Head:       wt.StartCommit,
		Branch:     "refs/heads/openhands/" + id,
		Locked:     true,
		LockReason: "ohd conversation " + id,
	}
	if diff := cmp.Diff(wantReg, *found); diff != "" {
		t.Errorf("git worktree list entry mismatch (-want +got):\n%s", diff)
	}

	if got, want := strings.TrimSpace(readFile(t, filepath.Join(wt.Path, ".git"))), "gitdir: "+wt.AdminDir; got != want {
		t.Errorf("%s/.git = %q, want %q", wt.Path, got, want)
	}
	if got, want := strings.TrimSpace(readFile(t, filepath.Join(wt.AdminDir, "gitdir"))), filepath.Join(wt.Path, ".git"); got != want {
		t.Errorf("%s/gitdir = %q, want %q", wt.AdminDir, got, want)
	}
	if got := readFile(t, filepath.Join(wt.Path, "README.md")); got != "hello\n" {
		t.Errorf("checked-out README.md = %q, want %q", got, "hello\n")
	}
	if got := gitIn(t, wt.Path, "status", "--porcelain", "--branch"); got != "## openhands/"+id {
		t.Errorf("git status in the worktree = %q, want a clean openhands/%s", got, id)
	}

	h, err := m.Health(testCtx(t), wt)
	if err != nil {
		t.Fatalf("Health: %v", err)
	}
	wantH := Health{Registered: true, Locked: true, LockReason: "ohd conversation " + id, GitdirResolves: true, Branch: "openhands/" + id, AdminExists: true}
	if diff := cmp.Diff(wantH, h); diff != "" {
		t.Errorf("Health mismatch (-want +got):\n%s", diff)
	}
	// A prune on the host must not touch it.
	gitIn(t, repo.TopLevel, "worktree", "prune")
	if !exists(t, wt.AdminDir) {
		t.Errorf("git worktree prune removed %s", wt.AdminDir)
	}
}

// TestAddAdminIDNotAssumed: a second worktree of a repository with the
// same basename gets another admin dir name, read from its .git file.
func TestAddAdminIDNotAssumed(t *testing.T) {
	m := newManager(t)
	repo := mustInspect(t, m, testenv.NewRepo(t, testenv.RepoOptions{}))
	a := mustAdd(t, m, repo, newID(t), "")
	b := mustAdd(t, m, repo, newID(t), "")
	if filepath.Base(a.Path) != filepath.Base(b.Path) {
		t.Fatalf("paths %s and %s should share a basename", a.Path, b.Path)
	}
	if a.AdminID == b.AdminID {
		t.Fatalf("both worktrees have AdminID %q", a.AdminID)
	}
	if b.AdminID == filepath.Base(b.Path) {
		t.Errorf("second AdminID = %q, want git's de-duplicated name", b.AdminID)
	}
	if got := strings.TrimSpace(readFile(t, filepath.Join(b.Path, ".git"))); got != "gitdir: "+b.AdminDir {
		t.Errorf("%s/.git = %q, want it to name %s", b.Path, got, b.AdminDir)
	}
}

// TestPlanRefusesARegisteredPath: a registration left for the worktree's
// path (an admin dir whose gitdir names it, its directory gone) makes Plan
// refuse with ErrExists, and changes nothing; the control, the same
// admin dir naming another path, is no obstacle. (checkFree reads the
// admin dirs instead of running git worktree list.)
func TestPlanRefusesARegisteredPath(t *testing.T) {
	m := newManager(t)
	repo := mustInspect(t, m, testenv.NewRepo(t, testenv.RepoOptions{}))
	id := newID(t)
	path := filepath.Join(m.Root(), id, filepath.Base(repo.TopLevel))
	admin := filepath.Join(repo.CommonDir, "worktrees", "left")
	if err := os.MkdirAll(admin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"HEAD": "ref: refs/heads/main\n", "commondir": "../..\n"} {
		if err := os.WriteFile(filepath.Join(admin, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitdir := func(p string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(admin, "gitdir"), []byte(filepath.Join(p, ".git")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitdir(filepath.Join(t.TempDir(), "elsewhere"))
	if _, err := m.Plan(testCtx(t), AddOptions{Repo: repo, Inspected: true, ConversationID: id}); err != nil {
		t.Fatalf("control: Plan with a registration of another path = %v, want nil", err)
	}
	gitdir(path)
	before := listing(t, m.Root(), repo.CommonDir)
	_, err := m.Plan(testCtx(t), AddOptions{Repo: repo, Inspected: true, ConversationID: id})
	if !errors.Is(err, ErrExists) || !strings.Contains(errText(err), "is still registered as a worktree") {
		t.Errorf("Plan with %s registered = %v, want ErrExists saying it is still registered", path, err)
	}
	if after := listing(t, m.Root(), repo.CommonDir); !equalStrings(before, after) {
		t.Errorf("the refused Plan changed the disk (-before +after):\n%s", cmp.Diff(before, after))
	}
}

// TestRepoDiffNamesTheChangedFields: the stale-Repo error says what
// changed, field by field, and nothing else.
func TestRepoDiffNamesTheChangedFields(t *testing.T) {
	a := Repo{Workspace: "/w", IsGit: true, TopLevel: "/w", CommonDir: "/w/.git", GitDir: "/w/.git", UID: 1000, GID: 1000}
	b := a
	b.CommonDir, b.UID = "/elsewhere/.git", 1001
	want := "-CommonDir: /w/.git\n+CommonDir: /elsewhere/.git\n-UID: 1000\n+UID: 1001\n"
	if got := repoDiff(a, b); got != want {
		t.Errorf("repoDiff = %q, want %q", got, want)
	}
	if got := repoDiff(a, a); got != "" {
		t.Errorf("repoDiff of equal Repos = %q, want nothing", got)
	}
}
