package mountplan

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// Fixed pointers. git's own boundary against a repository someone else
// made is ownership (safe.directory), but when the user's git recurses
// into a submodule (status, diff, a git-aware prompt) it sets GIT_DIR for
// the child and skips that check. So everything the user's git on the
// host follows on its way into a submodule is fixed for the container's
// whole life, in every mode (worktree, in place, plain folder):
//
//   - the work tree's .git (a linked worktree's or a separate git dir's
//     file), each populated submodule's .git (recursively): read-only;
//   - each unpopulated submodule's directory (a gitlink in the index whose
//     directory has no .git; made, as git's checkout makes it, when it is
//     missing): read-only, so no `git init` there;
//   - the directory holding each of those, and every directory above it up
//     to the mount that holds the work tree: bound onto itself, read-write.
//     A mount point cannot be renamed or removed (EBUSY), so the agent can
//     neither `mv sub subX` and make a `sub` of its own, nor move a parent
//     away with the pinned directories in it (a mount moves along with a
//     parent that is not one itself).
//
// Directories in a read-only part of the plan (in place for a
// subdirectory, the rest of the work tree) need no pin: nothing there can
// be renamed. The cost for the agent: it cannot remove or rename a pinned
// directory (a checkout that deletes one fails there), and a rename from
// one pinned directory into another is a copy (EXDEV), as across any two
// mounts. TestPinnedPointersHoldInNamespace (package worktree) and
// TestBackendPointerAttacksFailInContainer (integration) try the attacks.

// maxMounts bounds the bind mounts of one conversation's plan: each costs
// the engine a mount at every container start. Beyond it the plan is
// refused (a pointer left unfixed would be the agent's to move).
const maxMounts = 1024

// Pin returns plan with every directory holding one of the pointer
// mounts ptrs (read-only mounts of a .git, an unpopulated
// submodule's directory, a bare repository), and every directory above
// each up to the mount of plan that holds it, bound onto itself; ptrs are
// in the result too. Each pinned directory must be a real, canonical
// directory.
func Pin(plan, ptrs []Mount) ([]Mount, error) {
	targets := map[string]bool{} // mount points so far: read-only?
	for _, mt := range plan {
		targets[mt.Target] = mt.ReadOnly
	}
	for _, mt := range ptrs {
		if _, ok := targets[mt.Target]; !ok {
			targets[mt.Target] = mt.ReadOnly
		}
	}
	out := append([]Mount{}, plan...)
	for _, mt := range ptrs {
		if _, dup := findMount(out, mt.Target); !dup {
			out = append(out, mt)
		}
	}
	pins := map[string]bool{}
	for _, mt := range ptrs {
		var chain []string
		p := filepath.Dir(mt.Target)
		for {
			if ro, ok := targets[p]; ok {
				if ro {
					chain = nil // nothing in a read-only mount can be renamed
				}
				break
			}
			if p == "/" || p == "." {
				return nil, fmt.Errorf("%w: %s is in no mount of the plan", ErrInvalidWorktree, mt.Target)
			}
			chain = append(chain, p)
			p = filepath.Dir(p)
		}
		for _, d := range chain {
			pins[d] = true
			targets[d] = false
		}
	}
	dirs := make([]string, 0, len(pins))
	for d := range pins {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		if err := CheckSource(d); err != nil {
			return nil, err
		}
		out = append(out, Mount{Source: d, Target: d})
	}
	if len(out) > maxMounts {
		return nil, fmt.Errorf("%w: the container would need %d mounts (more than %d) to keep the agent from moving the repositories and submodules the user's git enters: choose a smaller folder, or a repository with fewer submodules", ErrInvalidWorktree, len(out), maxMounts)
	}
	Sort(out)
	return out, nil
}

// findMount returns the index of the mount at target in ms.
func findMount(ms []Mount, target string) (int, bool) {
	for i, mt := range ms {
		if mt.Target == target {
			return i, true
		}
	}
	return -1, false
}

// WorkTreePointers returns the read-only pointer mounts of the work tree
// at workTree whose git dir (for its index) is gitDir: its .git when that
// is a file (a linked worktree's, a separate git dir's), and its
// submodules' (submoduleMounts). A .git that is a directory is the git
// dir itself, mounted by the caller; one missing is left (a worktree whose
// removal was interrupted still starts, to finish it).
func WorkTreePointers(h Host, workTree, gitDir string, uid, gid int) ([]Mount, error) {
	var ptrs []Mount
	dotGit := filepath.Join(workTree, ".git")
	st, err := os.Lstat(dotGit)
	switch {
	case err == nil && st.Mode().IsRegular():
		ptrs = append(ptrs, Mount{Source: dotGit, Target: dotGit, ReadOnly: true})
	case err == nil && st.IsDir():
	case err == nil:
		return nil, fmt.Errorf("%w: %s is neither a git dir nor a .git file (%s)", ErrInvalidWorktree, dotGit, st.Mode().Type())
	case !os.IsNotExist(err):
		return nil, fmt.Errorf("%s: %w", dotGit, err)
	}
	if !dirExists(gitDir) {
		return ptrs, nil // a registration removed by an interrupted removal: no index the user's git reads
	}
	subs, err := submoduleMounts(h, workTree, gitDir, uid, gid)
	if err != nil {
		return nil, err
	}
	return append(ptrs, subs...), nil
}
