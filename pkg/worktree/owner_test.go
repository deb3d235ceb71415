package worktree

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// ownerOf returns the uid owning p (not following a final symlink).
func ownerOf(t testing.TB, p string) int {
	t.Helper()
	st, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return int(st.Sys().(*syscall.Stat_t).Uid)
}

// assertOwnedBy checks every file under each dir belongs to uid.
func assertOwnedBy(t *testing.T, uid int, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(p string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if got := ownerOf(t, p); got != uid {
				t.Errorf("%s is owned by uid %d, want %d", p, got, uid)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// gitAsUser runs plain git as uid:gid in dir and returns its combined output.
func gitAsUser(t *testing.T, uid, gid int, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := testenv.AsUser(exec.Command("git", args...), uid, gid)
	cmd.Dir, cmd.Env = dir, testenv.GitEnv()
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// TestOwnership: with ohd as root and the repository owned by uid 1000,
// everything Add, Snapshot and Remove create belongs to 1000, and git run
// by that user in the worktree sees no dubious ownership.
func TestOwnership(t *testing.T) {
	testenv.RequireRoot(t)
	uid, gid := testenv.UnprivilegedUID, testenv.UnprivilegedGID
	m := newManager(t)
	repoDir := testenv.NewRepo(t, testenv.RepoOptions{Owner: &testenv.Owner{UID: uid, GID: gid}})
	repo := mustInspect(t, m, repoDir)
	if repo.UID != uid || repo.GID != gid {
		t.Fatalf("Inspect owner = %d:%d, want %d:%d", repo.UID, repo.GID, uid, gid)
	}
	wt := mustAdd(t, m, repo, newID(t), "")
	if wt.UID != uid || wt.GID != gid {
		t.Errorf("Worktree owner = %d:%d, want %d:%d", wt.UID, wt.GID, uid, gid)
	}
	convDir := filepath.Join(m.Root(), wt.ConversationID)
	assertOwnedBy(t, uid, convDir, repo.CommonDir)
	if st, err := os.Stat(convDir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("%s mode = %v, %v; want 0700", convDir, st.Mode(), err)
	}
	for _, p := range []string{filepath.Join(repo.CommonDir, "refs", "heads", "openhands", wt.ConversationID), filepath.Join(wt.AdminDir, "index")} {
		if !exists(t, p) {
			t.Errorf("%s does not exist (the ownership walk proves nothing about it)", p)
		}
	}

	out, err := gitAsUser(t, uid, gid, wt.Path, "status", "--porcelain", "--branch")
	if err != nil || out != "## "+wt.Branch {
		t.Errorf("git status as uid %d = %q, %v; want a clean %s", uid, out, err, wt.Branch)
	}
	if out, err := gitAsUser(t, uid, gid, repoDir, "worktree", "list", "--porcelain"); err != nil || strings.Contains(out, "prunable") {
		t.Errorf("git worktree list as uid %d = %q, %v; want the worktree not prunable", uid, out, err)
	}

	// The agent (as the user) works; ohd snapshots as the user.
	if out, err := gitAsUser(t, uid, gid, wt.Path, "commit", "-q", "--allow-empty", "-m", "agent"); err != nil {
		t.Fatalf("git commit as uid %d: %v: %s", uid, err, out)
	}
	testenv.WriteFile(t, filepath.Join(wt.Path, "new.txt"), "new\n")
	testenv.ChownR(t, filepath.Join(wt.Path, "new.txt"), uid, gid)
	ref, commit, err := m.Snapshot(testCtx(t), wt)
	if err != nil || commit == "" {
		t.Fatalf("Snapshot = %q, %q, %v", ref, commit, err)
	}
	if p := filepath.Join(repo.CommonDir, "objects", commit[:2], commit[2:]); ownerOf(t, p) != uid {
		t.Errorf("snapshot object %s owned by %d, want %d", p, ownerOf(t, p), uid)
	}
	assertOwnedBy(t, uid, convDir, repo.CommonDir)

	// A root-owned directory in the worktree (someone used sudo there):
	// git, running as the owner, cannot delete it; Remove must still.
	testenv.WriteFile(t, filepath.Join(wt.Path, "by-root", "file"), "root's\n")
	if err := os.Chmod(filepath.Join(wt.Path, "by-root"), 0o755); err != nil {
		t.Fatal(err)
	}
	res, err := m.Remove(testCtx(t), wt, RemoveOptions{})
	if err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if got := gitIn(t, repoDir, "show", res.SnapshotRef+":by-root/file"); got != "root's" {
		t.Errorf("snapshot by-root/file = %q, want it saved", got)
	}
	assertOwnedBy(t, uid, repo.CommonDir)
	assertGone(t, m, wt)
}

// TestOwnerMismatchNotRoot: an ohd that is not root refuses a repository
// of another user before changing anything.
func TestOwnerMismatchNotRoot(t *testing.T) {
	m := newManager(t)
	repo := mustInspect(t, m, testenv.NewRepo(t, testenv.RepoOptions{}))
	before := listing(t, m.Root(), repo.CommonDir)
	m.euid = repo.UID + 4242 // as if ohd ran as another, unprivileged user
	_, err := m.Add(testCtx(t), AddOptions{Repo: repo, ConversationID: newID(t)})
	if !errors.Is(err, ErrOwner) || !strings.Contains(err.Error(), "run ohd as root or as the repository's owner") {
		t.Fatalf("Add(other owner's repo) = %v, want ErrOwner with advice", err)
	}
	if after := listing(t, m.Root(), repo.CommonDir); !equalStrings(before, after) {
		t.Errorf("refused Add changed the disk:\n%s", cmp.Diff(before, after))
	}
}

// TestRootNotTraversable: a worktree root the owner cannot reach is
// reported before anything is created.
func TestRootNotTraversable(t *testing.T) {
	testenv.RequireRoot(t)
	uid, gid := testenv.UnprivilegedUID, testenv.UnprivilegedGID
	private := filepath.Join(testenv.TempDir(t), "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	m, err := New(Options{Root: filepath.Join(private, "worktrees"), LockDir: filepath.Join(testenv.TempDir(t), "locks")})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(m.Root()); err != nil || st.Mode().Perm() != 0o711 {
		t.Errorf("New created root with mode %v, %v; want 0711", st.Mode(), err)
	}
	repo := mustInspect(t, m, testenv.NewRepo(t, testenv.RepoOptions{Owner: &testenv.Owner{UID: uid, GID: gid}}))
	_, err = m.Add(testCtx(t), AddOptions{Repo: repo, ConversationID: newID(t)})
	if !errors.Is(err, ErrOwner) || !strings.Contains(err.Error(), "chmod 0711 "+private) {
		t.Fatalf("Add under a 0700 root = %v, want ErrOwner naming %s", err, private)
	}
	if ents, _ := os.ReadDir(m.Root()); len(ents) != 0 {
		t.Errorf("refused Add left %v in the root", ents)
	}
}
