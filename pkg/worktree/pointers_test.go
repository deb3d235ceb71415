package worktree

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// submoduleRepo returns a repository with three submodules: sub (checked
// out, with its own submodule deep not checked out), a/b/lib (checked out,
// two directories down) and vendor/x (not checked out: deinit).
func submoduleRepo(t *testing.T) string {
	t.Helper()
	deep := testenv.NewRepo(t, testenv.RepoOptions{})
	inner := testenv.NewRepo(t, testenv.RepoOptions{})
	hostGit(t, inner, "-c", "protocol.file.allow=always", "submodule", "add", "-q", deep, "deep")
	hostGit(t, inner, "commit", "-qm", "deep")
	dir := testenv.NewRepo(t, testenv.RepoOptions{})
	for _, p := range []string{"sub", "a/b/lib", "vendor/x"} {
		hostGit(t, dir, "-c", "protocol.file.allow=always", "submodule", "add", "-q", inner, p)
	}
	hostGit(t, dir, "commit", "-qm", "submodules")
	hostGit(t, dir, "submodule", "deinit", "-q", "-f", "vendor/x")
	return dir
}

// mountModes returns the mounts under root by path relative to it: "rw"
// or "ro", each at its own path; t fails on a mount elsewhere than its
// source, one twice, or one before a mount it lies in.
func mountModes(t *testing.T, mounts []Mount, root string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for i, mt := range mounts {
		for _, before := range mounts[:i] {
			if within(before.Target, mt.Target) && before.Target != mt.Target {
				t.Errorf("mount %s comes after %s, which is inside it", mt.Target, before.Target)
			}
		}
		if !within(mt.Target, root) {
			continue
		}
		if mt.Source != mt.Target {
			continue // the view and its alternate
		}
		rel, _ := filepath.Rel(root, mt.Target)
		if _, dup := got[rel]; dup {
			t.Errorf("%s is mounted twice", rel)
		}
		got[rel] = map[bool]string{false: "rw", true: "ro"}[mt.ReadOnly]
	}
	return got
}

func checkModes(t *testing.T, got, want map[string]string) {
	t.Helper()
	for rel, mode := range want {
		if got[rel] != mode {
			t.Errorf("%s: mounted %q, want %q (all: %v)", rel, got[rel], mode, got)
		}
	}
	for rel, mode := range got {
		if _, ok := want[rel]; !ok {
			t.Errorf("%s is mounted %s, want it left alone (all: %v)", rel, mode, got)
		}
	}
}

// TestMountPlanPinsEveryPointer: in every mode, each .git the user's git
// follows into a submodule is read-only, each unpopulated submodule's
// directory is read-only, and the directory holding each of them and
// every directory above it up to the work tree's mount is bound onto
// itself (a mount point cannot be renamed); in a read-only part of the
// plan nothing is pinned (a pin there would make it writable).
func TestMountPlanPinsEveryPointer(t *testing.T) {
	t.Run("in place", func(t *testing.T) {
		m := newManager(t)
		dir := submoduleRepo(t)
		wt := addInPlace(t, m, mustInspect(t, m, dir))
		mounts, err := m.MountPlan(wt)
		if err != nil {
			t.Fatalf("MountPlan: %v", err)
		}
		checkModes(t, mountModes(t, mounts, dir), map[string]string{
			".": "rw", ".git/hooks": "ro", ".git/modules": "ro",
			"sub": "rw", "sub/.git": "ro", "sub/deep": "ro",
			"a": "rw", "a/b": "rw", "a/b/lib": "rw", "a/b/lib/.git": "ro", "a/b/lib/deep": "ro",
			"vendor": "rw", "vendor/x": "ro",
		})
	})
	t.Run("in place, a subdirectory", func(t *testing.T) {
		m := newManager(t)
		dir := submoduleRepo(t)
		wt := addInPlace(t, m, mustInspect(t, m, filepath.Join(dir, "a")))
		mounts, err := m.MountPlan(wt)
		if err != nil {
			t.Fatalf("MountPlan: %v", err)
		}
		checkModes(t, mountModes(t, mounts, dir), map[string]string{
			".": "ro", "a": "rw", ".git/hooks": "ro", ".git/modules": "ro",
			"sub/.git": "ro", "sub/deep": "ro", // sub itself is in the read-only part
			"a/b": "rw", "a/b/lib": "rw", "a/b/lib/.git": "ro", "a/b/lib/deep": "ro",
			"vendor/x": "ro",
		})
	})
	t.Run("worktree", func(t *testing.T) {
		m := newManager(t)
		repo := mustInspect(t, m, submoduleRepo(t))
		wt, err := m.Add(testCtx(t), AddOptions{Repo: repo, ConversationID: newID(t), View: true})
		if err != nil {
			t.Fatalf("Add: %v", err)
		}
		mounts, err := m.MountPlan(wt)
		if err != nil {
			t.Fatalf("MountPlan: %v", err)
		}
		// git worktree add populates no submodule.
		checkModes(t, mountModes(t, mounts, wt.Path), map[string]string{
			".": "rw", ".git": "ro", "sub": "ro", "a": "rw", "a/b": "rw", "a/b/lib": "ro", "vendor": "rw", "vendor/x": "ro",
		})
	})
	t.Run("plain folder", func(t *testing.T) {
		m := newManager(t)
		ws := testenv.TempDir(t)
		if err := os.Rename(submoduleRepo(t), filepath.Join(ws, "r")); err != nil {
			t.Fatal(err)
		}
		hostGit(t, filepath.Join(ws, "r"), "submodule", "--quiet", "absorbgitdirs") // paths fixed after the move
		mounts, err := m.PlainFolderMounts(ws, os.Getuid(), os.Getgid())
		if err != nil {
			t.Fatalf("PlainFolderMounts: %v", err)
		}
		checkModes(t, mountModes(t, mounts, ws), map[string]string{
			".": "rw", "r": "rw", "r/.git": "ro",
			"r/sub": "rw", "r/sub/.git": "ro", "r/sub/deep": "ro",
			"r/a": "rw", "r/a/b": "rw", "r/a/b/lib": "rw", "r/a/b/lib/.git": "ro", "r/a/b/lib/deep": "ro",
			"r/vendor": "rw", "r/vendor/x": "ro",
		})
	})
}

// TestPinPointersBound: a plan that would need more than maxMounts mounts
// is refused, saying why, rather than leaving a pointer unfixed.
func TestPinPointersBound(t *testing.T) {
	root := testenv.TempDir(t)
	var ptrs []Mount
	for i := 0; i < maxMounts/2+1; i++ {
		d := filepath.Join(root, "d"+strconv.Itoa(i), "sub")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		ptrs = append(ptrs, Mount{Source: d, Target: d, ReadOnly: true})
	}
	_, err := pinPointers([]Mount{{Source: root, Target: root}}, ptrs)
	if !errors.Is(err, ErrInvalidWorktree) || !strings.Contains(err.Error(), "more than "+strconv.Itoa(maxMounts)) {
		t.Errorf("pinPointers(%d pointers in as many directories) = %v, want a refusal naming the bound", len(ptrs), err)
	}
	got, err := pinPointers([]Mount{{Source: root, Target: root}}, ptrs[:10])
	if err != nil || len(got) != 21 {
		t.Errorf("pinPointers(10 pointers) = %d mounts, %v; want 21", len(got), err)
	}
}
