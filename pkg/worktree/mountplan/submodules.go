package mountplan

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/ohd-dev/ohd/pkg/worktree/nofollow"
)

// Bounds of submoduleMounts: nesting depth, and submodules in all.
const (
	maxSubmoduleDepth = 8
	maxSubmodules     = 1000
)

// submoduleMounts returns the mounts that keep the agent from changing
// where the user's git looks for the submodules of the work tree at
// workTree (git dir gitDir, owned by uid:gid). The user's next `git status` (and
// diff, commit) on the host enters every populated submodule, recursively,
// as a child git in it; a populated submodule is one whose directory has
// a .git, and the directory lies in the agent's folder. So:
//
//   - a populated submodule's .git (a file pointing into modules/, or an
//     embedded git dir) is mounted read-only, and the submodules in its
//     own index are protected in turn;
//   - an unpopulated one's directory (empty, as git's checkout leaves it;
//     made as git makes it when missing) is mounted read-only, so the
//     agent cannot populate it with a .git of its own, nor move it away
//     (a mount point cannot be renamed or removed).
//
// A submodule path that is not a directory is refused: nothing there
// could be kept from being replaced by one.
func submoduleMounts(h Host, workTree, gitDir string, uid, gid int) ([]Mount, error) {
	type repo struct {
		workTree, gitDir string
		depth            int
	}
	var mounts []Mount
	count := 0
	for queue := []repo{{workTree, gitDir, 0}}; len(queue) > 0; queue = queue[1:] {
		r := queue[0]
		subs, err := h.Gitlinks(r.workTree, r.gitDir, uid, gid)
		if err != nil {
			return nil, err
		}
		for _, p := range subs {
			if count++; count > maxSubmodules {
				return nil, fmt.Errorf("%w: more than %d submodules: ohd protects each one's git dir, and stops there", ErrInvalidWorktree, maxSubmodules)
			}
			sub := filepath.Join(r.workTree, p)
			dg := filepath.Join(sub, ".git")
			st, err := os.Lstat(dg)
			if err == nil && (st.Mode().IsRegular() || st.IsDir()) && realPathIs(dg) {
				mounts = append(mounts, Mount{Source: dg, Target: dg, ReadOnly: true})
				if gd := submoduleGitDir(sub, dg, st); gd != "" && r.depth+1 < maxSubmoduleDepth {
					queue = append(queue, repo{sub, gd, r.depth + 1})
				}
				continue
			}
			if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
				return nil, fmt.Errorf("submodule %s: %w", sub, err)
			}
			if err := ensureSubmoduleDir(h, r.workTree, p, uid, gid); err != nil {
				return nil, err
			}
			if err := CheckSource(sub); err != nil {
				return nil, err
			}
			mounts = append(mounts, Mount{Source: sub, Target: sub, ReadOnly: true})
		}
	}
	return mounts, nil
}

// realPathIs reports whether p's path has no symlink in it.
func realPathIs(p string) bool {
	real, err := filepath.EvalSymlinks(p)
	return err == nil && real == p
}

// submoduleGitDir returns the git dir of the populated submodule at sub
// whose .git is dg (st its Lstat): dg itself when it is a directory, else
// what its "gitdir:" line names (relative to sub), when that is a real
// directory; "" when it cannot tell.
func submoduleGitDir(sub, dg string, st fs.FileInfo) string {
	if st.IsDir() {
		return dg
	}
	b, err := nofollow.ReadFile(dg, 4096)
	if err != nil {
		return ""
	}
	target, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir:")
	if !ok {
		return ""
	}
	target = strings.TrimSpace(target)
	if !filepath.IsAbs(target) {
		target = filepath.Join(sub, target)
	}
	target = filepath.Clean(target)
	if !dirExists(target) || !realPathIs(target) {
		return ""
	}
	return target
}

// ensureSubmoduleDir makes sure the submodule path rel of the work tree at
// top is a directory, making it and its missing parents (owned by
// uid:gid, as git's checkout would) when they are missing. A component
// that is a symlink or not a directory is refused.
func ensureSubmoduleDir(h Host, top, rel string, uid, gid int) error {
	p := top
	for _, part := range strings.Split(rel, "/") {
		p = filepath.Join(p, part)
		st, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Mkdir(p, 0o755); err != nil {
				return fmt.Errorf("make the submodule directory %s: %w", p, err)
			}
			if err := h.Chown(p, uid, gid); err != nil {
				return err
			}
		case err != nil:
			return fmt.Errorf("submodule %s: %w", p, err)
		case !st.IsDir():
			return fmt.Errorf("%w: the submodule path %s goes through %s, which is not a directory (%s): ohd cannot keep the agent from putting a git dir there; remove it, or run `git submodule update --init %s`, then try again",
				ErrInvalidWorktree, filepath.Join(top, rel), p, st.Mode().Type(), rel)
		}
	}
	return nil
}
