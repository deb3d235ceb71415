package worktree

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// TestPlainFolderMounts: in a plain folder, each repository's git dir is
// read-only, its directory and every one above it are mount points (so
// none can be moved away), an unpopulated submodule of one is read-only,
// a bare repository is read-only whole, and folders with no repository
// in them are left alone.
func TestPlainFolderMounts(t *testing.T) {
	m := newManager(t)
	ws := testenv.TempDir(t)
	testenv.WriteFile(t, filepath.Join(ws, "readme.txt"), "plain\n")
	testenv.InitRepo(t, filepath.Join(ws, "a"), "main")
	other := testenv.NewRepo(t, testenv.RepoOptions{})
	hostGit(t, filepath.Join(ws, "a"), "-c", "protocol.file.allow=always", "submodule", "add", "-q", other, "sub")
	hostGit(t, filepath.Join(ws, "a"), "commit", "-qm", "sub")
	hostGit(t, filepath.Join(ws, "a"), "submodule", "deinit", "-q", "-f", "sub")
	testenv.InitRepo(t, filepath.Join(ws, "group", "b"), "main")
	testenv.Git(t, ws, "init", "-q", "--bare", "c.git")
	if err := os.MkdirAll(filepath.Join(ws, "d", "e"), 0o755); err != nil {
		t.Fatal(err)
	}
	mounts, err := m.PlainFolderMounts(ws, os.Getuid(), os.Getgid())
	if err != nil {
		t.Fatalf("PlainFolderMounts: %v", err)
	}
	got := map[string]string{}
	for i, mt := range mounts {
		if mt.Source != mt.Target {
			t.Errorf("mount %+v is not at its own path", mt)
		}
		rel, _ := filepath.Rel(ws, mt.Target)
		if _, dup := got[rel]; dup {
			t.Errorf("%s is mounted twice", rel)
		}
		got[rel] = map[bool]string{false: "rw", true: "ro"}[mt.ReadOnly]
		if i > 0 && within(mounts[i-1].Target, mt.Target) && mounts[i-1].Target != mt.Target {
			t.Errorf("%s comes after %s, which is inside it", mt.Target, mounts[i-1].Target)
		}
	}
	want := map[string]string{".": "rw", "a": "rw", "a/.git": "ro", "a/sub": "ro", "group": "rw", "group/b": "rw", "group/b/.git": "ro", "c.git": "ro"}
	for rel, mode := range want {
		if got[rel] != mode {
			t.Errorf("%s: mounted %q, want %s (all: %v)", rel, got[rel], mode, got)
		}
	}
	for rel := range got {
		if _, ok := want[rel]; !ok {
			t.Errorf("%s is mounted, want it left alone (all: %v)", rel, got)
		}
	}
}

// TestPlainFolderRefusesWhatItCannotProtect: a .git that is a symlink
// (the agent could point it anywhere) is refused, saying what to do.
func TestPlainFolderRefusesWhatItCannotProtect(t *testing.T) {
	m := newManager(t)
	ws := testenv.TempDir(t)
	testenv.InitRepo(t, filepath.Join(ws, "real"), "main")
	if err := os.MkdirAll(filepath.Join(ws, "linked"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(ws, "real", ".git"), filepath.Join(ws, "linked", ".git")); err != nil {
		t.Fatal(err)
	}
	_, err := m.PlainFolderMounts(ws, os.Getuid(), os.Getgid())
	if !errors.Is(err, ErrInvalidPath) {
		t.Fatalf("PlainFolderMounts with a symlinked .git = %v, want ErrInvalidPath", err)
	}
	t.Log(err)
}
