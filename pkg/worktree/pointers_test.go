package worktree

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ohd-dev/ohd/internal/testenv"
	"github.com/ohd-dev/ohd/pkg/worktree/mountplan"
)

// submoduleRepo returns a repository with three submodules
// (testenv.PointerRepo): sub (checked out, with its own submodule deep not
// checked out), a/b/lib (checked out, two directories down) and vendor/x
// (not checked out: deinit).
func submoduleRepo(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(testenv.TempDir(t), "repo")
	testenv.PointerRepo(t, dir)
	return dir
}

// mountModes returns the mounts under root by path relative to it: "rw"
// or "ro", each at its own path; t fails on a mount elsewhere than its
// source, one twice, or one before a mount it lies in.
func mountModes(t *testing.T, mounts []mountplan.Mount, root string) map[string]string {
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

// runPointerAttacks runs attacks as uid:gid in the work tree top, each
// followed by the user's `git status` there (same uid: the fixed pointers
// must hold without the ownership check), in a mount namespace where the
// mounts are bound onto their own paths (none: the control). It returns
// which attacks' markers appeared.
func runPointerAttacks(t *testing.T, top string, mounts []mountplan.Mount, attacks []testenv.PointerAttack, uid, gid int) map[string]bool {
	t.Helper()
	mark := testenv.TempDir(t)
	if err := os.Chmod(mark, 0o777); err != nil {
		t.Fatal(err)
	}
	var s strings.Builder
	s.WriteString("set -u\n")
	for _, mt := range mounts {
		q := shellQuote(mt.Target)
		s.WriteString("mount --bind " + q + " " + q + " || exit 1\n")
		if mt.ReadOnly {
			s.WriteString("mount -o remount,bind,ro " + q + " || exit 1\n")
		}
	}
	asUser := "setpriv --reuid " + strconv.Itoa(uid) + " --regid " + strconv.Itoa(gid) + " --clear-groups "
	for _, a := range attacks {
		s.WriteString("echo '== " + a.Name + "'\n")
		s.WriteString(asUser + "sh -c " + shellQuote("cd "+shellQuote(top)+" && "+a.Script) + " 2>&1\n")
		s.WriteString(asUser + "git -C " + shellQuote(top) + " status --porcelain >/dev/null 2>&1\n")
	}
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", s.String())
	cmd.Env = append(testenv.GitEnv(), "MARKERS="+mark)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("in the namespace: %v\n%s", err, out)
	}
	t.Logf("attacks:\n%s", out)
	// The user's git on the host, after the namespace is gone.
	host := exec.Command("git", "-C", top, "status", "--porcelain")
	host.Env = append(testenv.GitEnv(), "MARKERS="+mark)
	_ = testenv.AsUser(host, uid, gid).Run()
	fired := map[string]bool{}
	ents, _ := os.ReadDir(mark)
	for _, e := range ents {
		fired[e.Name()] = true
	}
	return fired
}

// TestPinnedPointersHoldInNamespace tries every pointer attack in a mount
// namespace carrying the plan's mounts, as the repository's owner (the
// same uid as the user: this holds without git's ownership check), in
// place and in a worktree: the user's git status runs nothing. The
// control runs the same attacks without the mounts, and each fires.
func TestPinnedPointersHoldInNamespace(t *testing.T) {
	testenv.RequireUnshare(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		testenv.Missing(t, "setpriv(1) not found (install util-linux)")
	}
	uid, gid := testenv.UnprivilegedUID, testenv.UnprivilegedGID
	for _, mode := range []string{"in place", "worktree"} {
		for _, control := range []bool{false, true} {
			name := mode + map[bool]string{false: "", true: ", control"}[control]
			t.Run(name, func(t *testing.T) {
				m := newManager(t)
				dir := submoduleRepo(t)
				testenv.ChownR(t, filepath.Dir(dir), uid, gid)
				var wt Worktree
				var err error
				if mode == "in place" {
					// ../evil must be the agent's to make: the
					// repository's parent is its scratch space.
					wt = addInPlace(t, m, mustInspect(t, m, dir))
				} else {
					wt, err = m.Add(testCtx(t), AddOptions{Repo: mustInspect(t, m, dir), ConversationID: newID(t), View: true})
					if err != nil {
						t.Fatalf("Add: %v", err)
					}
					if err := os.Chown(filepath.Dir(wt.Path), uid, gid); err != nil {
						t.Fatal(err)
					}
				}
				mounts, err := m.MountPlan(wt)
				if err != nil {
					t.Fatalf("MountPlan: %v", err)
				}
				if control {
					mounts = nil
				}
				// The worktree's .git attack makes its repository in
				// ../evil: the conversation's directory, the agent's.
				attacks := testenv.PointerAttacks(mode == "in place", "../evil")
				fired := runPointerAttacks(t, wt.Path, mounts, attacks, uid, gid)
				for _, a := range attacks {
					if control && !fired[a.Name] {
						t.Errorf("control: attack %s did not fire without the mounts: the attack is broken, so its protected run proves nothing", a.Name)
					}
					if !control && fired[a.Name] {
						t.Errorf("attack %s: the user's git status ran the agent's fsmonitor", a.Name)
					}
				}
			})
		}
	}
}
