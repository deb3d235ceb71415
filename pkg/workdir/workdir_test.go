package workdir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
)

func TestMakeCreatesUnderRoot(t *testing.T) {
	root := testenv.TempDir(t)
	path := filepath.Join(root, "workspace", "project", "0123abcd")
	m, err := Make(path, []string{root})
	if err != nil {
		t.Fatalf("Make: %v", err)
	}
	if st, err := os.Stat(path); err != nil || !st.IsDir() || st.Mode().Perm() != 0o755&^currentUmask() {
		t.Fatalf("Make made %v, %v; want a directory", st, err)
	}
	if got := len(m.Created()); got != 3 {
		t.Errorf("Created() = %v, want 3 directories", m.Created())
	}
	// The owner is the nearest existing ancestor's.
	var rs, ps syscall.Stat_t
	_ = syscall.Stat(root, &rs)
	_ = syscall.Stat(path, &ps)
	if rs.Uid != ps.Uid || rs.Gid != ps.Gid {
		t.Errorf("owner %d:%d, want the root's %d:%d", ps.Uid, ps.Gid, rs.Uid, rs.Gid)
	}
	// Existing: nothing made.
	m2, err := Make(path, []string{root})
	if err != nil || len(m2.Created()) != 0 {
		t.Errorf("Make of an existing path = %v, %v; want nothing made", m2.Created(), err)
	}
	m.Undo()
	if _, err := os.Stat(filepath.Join(root, "workspace")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Undo left %s: %v", filepath.Join(root, "workspace"), err)
	}
}

func currentUmask() os.FileMode {
	old := syscall.Umask(0)
	syscall.Umask(old)
	return os.FileMode(old)
}

func TestMakeRefusesOutsideRoots(t *testing.T) {
	root := testenv.TempDir(t)
	other := testenv.TempDir(t)
	for _, path := range []string{filepath.Join(other, "x"), root, filepath.Join(root+"x", "y")} {
		if _, err := Make(path, []string{root}); !errors.Is(err, ErrOutsideRoots) {
			t.Errorf("Make(%q) = %v, want ErrOutsideRoots", path, err)
		}
	}
	if _, err := Make("/tmp/x", []string{"/"}); !errors.Is(err, ErrOutsideRoots) {
		t.Errorf("Make under root / = %v, want ErrOutsideRoots", err)
	}
	if _, err := Make(root+"/a/../b", []string{root}); err == nil {
		t.Errorf("Make of an unclean path succeeded")
	}
	entries, _ := os.ReadDir(other)
	if len(entries) != 0 {
		t.Errorf("a refused Make created %v", entries)
	}
}

// TestMakeNeverThroughSymlink: a symlink planted below the root (the
// attacker points it at a directory outside) is refused, and nothing is
// created at its target.
func TestMakeNeverThroughSymlink(t *testing.T) {
	root := testenv.TempDir(t)
	outside := testenv.TempDir(t)
	if err := os.Symlink(outside, filepath.Join(root, "workspace")); err != nil {
		t.Fatal(err)
	}
	_, err := Make(filepath.Join(root, "workspace", "project", "x"), []string{root})
	if !errors.Is(err, ErrSymlink) {
		t.Fatalf("Make through a symlink = %v, want ErrSymlink", err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("Make created %v through the symlink", entries)
	}
	// A symlink deeper down, after created directories: they are undone.
	if err := os.MkdirAll(filepath.Join(root, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "real", "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := Make(filepath.Join(root, "real", "link", "x"), []string{root}); !errors.Is(err, ErrSymlink) {
		t.Fatalf("Make through a deeper symlink = %v, want ErrSymlink", err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("Make created %v through the symlink", entries)
	}
}

func TestUndoKeepsWhatIsNoLongerEmpty(t *testing.T) {
	root := testenv.TempDir(t)
	path := filepath.Join(root, "a", "b")
	m, err := Make(path, []string{root})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "work"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	m.Undo()
	if _, err := os.Stat(filepath.Join(path, "work")); err != nil {
		t.Errorf("Undo removed a directory holding files: %v", err)
	}
}

// FuzzMake feeds Make working_dir values as a client sends them: whatever
// it accepts lies strictly inside the root, and nothing is ever made
// outside it.
func FuzzMake(f *testing.F) {
	for _, s := range []string{"workspace/project/abc", "../x", "a/../../b", "/abs", "a//b", "a/./b", "", "a/b/"} {
		f.Add(s)
	}
	base := f.TempDir()
	root := filepath.Join(base, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, rel string) {
		if strings.ContainsRune(rel, 0) {
			return
		}
		m, err := Make(root+"/"+rel, []string{root})
		if err != nil {
			return
		}
		for _, c := range m.Created() {
			if !strings.HasPrefix(c, root+"/") {
				t.Fatalf("Make(%q) created %s outside the root", rel, c)
			}
		}
		m.Undo()
		entries, _ := os.ReadDir(base)
		if len(entries) != 1 {
			t.Fatalf("Make(%q) left %v beside the root", rel, entries)
		}
	})
}
