package worktree

import (
	"context"
	"crypto/rand"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/worktree/porcelain"
)

// testCtx is a context that ends with the test.
func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newManager returns a Manager with a fresh root and lock dir.
func newManager(t testing.TB) *Manager {
	t.Helper()
	dir := testenv.TempDir(t)
	m, err := New(Options{Root: filepath.Join(dir, "worktrees"), LockDir: filepath.Join(dir, "locks")})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

// newID returns a random canonical UUID (version 4).
func newID(t testing.TB) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func mustInspect(t testing.TB, m *Manager, dir string) Repo {
	t.Helper()
	r, err := m.Inspect(testCtx(t), dir)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", dir, err)
	}
	if !r.IsGit {
		t.Fatalf("Inspect(%q).IsGit = false, want true", dir)
	}
	return r
}

func mustAdd(t testing.TB, m *Manager, repo Repo, id, start string) Worktree {
	t.Helper()
	wt, err := m.Add(testCtx(t), AddOptions{Repo: repo, ConversationID: id, StartPoint: start})
	if err != nil {
		t.Fatalf("Add(%s, start %q): %v", id, start, err)
	}
	return wt
}

// newRepoWorktree makes a repository, a manager and one worktree.
func newRepoWorktree(t testing.TB) (*Manager, Repo, Worktree) {
	t.Helper()
	m := newManager(t)
	repo := mustInspect(t, m, testenv.NewRepo(t, testenv.RepoOptions{}))
	return m, repo, mustAdd(t, m, repo, newID(t), "")
}

// worktreeList returns the host's view of a repository's worktrees, as
// the user would get it with plain git.
func worktreeList(t testing.TB, dir string) []porcelain.Registration {
	t.Helper()
	out, err := testenv.GitOutput(dir, "-c", "safe.directory=*", "worktree", "list", "--porcelain", "-z")
	if err != nil {
		t.Fatalf("git worktree list: %v", err)
	}
	regs, err := porcelain.ParseWorktreeList([]byte(out))
	if err != nil {
		t.Fatalf("ParseWorktreeList: %v", err)
	}
	return regs
}

// listing describes every file under dirs (path, type, size), to show that
// an operation changed nothing.
func listing(t testing.TB, dirs ...string) []string {
	t.Helper()
	var out []string
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := e.Info()
			if err != nil {
				return err
			}
			size := info.Size()
			if e.IsDir() {
				size = 0
			}
			out = append(out, fmt.Sprintf("%s %s %d", p, info.Mode().Type(), size))
			return nil
		})
		if err != nil {
			t.Fatalf("walk %s: %v", d, err)
		}
	}
	sort.Strings(out)
	return out
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func exists(t testing.TB, p string) bool {
	t.Helper()
	ok, err := lexists(p)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// gitIn runs plain git as root in dir (safe.directory=* so a repository of
// another owner can be read) and returns trimmed stdout.
func gitIn(t testing.TB, dir string, args ...string) string {
	t.Helper()
	return testenv.Git(t, dir, append([]string{"-c", "safe.directory=*"}, args...)...)
}

func refExists(t testing.TB, dir, ref string) bool {
	t.Helper()
	_, err := testenv.GitOutput(dir, "-c", "safe.directory=*", "rev-parse", "--verify", "--quiet", ref)
	return err == nil
}

// commitFile writes file in dir, commits it and returns the commit id.
func commitFile(t testing.TB, dir, file, content, msg string) string {
	t.Helper()
	testenv.WriteFile(t, filepath.Join(dir, file), content)
	gitIn(t, dir, "add", "--", file)
	gitIn(t, dir, "commit", "-q", "-m", msg)
	return gitIn(t, dir, "rev-parse", "HEAD")
}

// mkAdmin makes the directory <worktrees>/<name> with files (name to
// content), as a killed git worktree add or a test's fixture leaves one.
func mkAdmin(t testing.TB, worktrees, name string, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(worktrees, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, content := range files {
		testenv.WriteFile(t, filepath.Join(dir, f), content)
	}
	return dir
}
