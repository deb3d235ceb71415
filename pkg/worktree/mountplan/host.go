package mountplan

import "errors"

// Host is what planning needs that it does not do itself: listing the
// submodules (gitlinks) of a work tree's index, which takes git, run
// hardened as the repository's owner, and giving a directory the plan
// makes (a missing submodule directory, as git's checkout would make it)
// to that owner. Package worktree's Manager provides both.
type Host interface {
	// Gitlinks returns the submodule paths (clean, relative) in the index
	// of the git dir gitDir whose work tree is workTree, running git as
	// uid:gid.
	Gitlinks(workTree, gitDir string, uid, gid int) ([]string, error)
	// Chown gives path to uid:gid (a no-op when ohd is not root).
	Chown(path string, uid, gid int) error
}

// The errors of a plan wrap one of these; package worktree returns them as
// its own sentinels of the same names (worktree.ErrInvalidPath,
// worktree.ErrInvalidWorktree), which callers test with errors.Is.
var (
	// ErrInvalidPath is returned when a plain folder cannot be protected:
	// too many directories or repositories in it, or a .git that is a
	// symlink or a special file.
	ErrInvalidPath = errors.New("invalid path")

	// ErrInvalidWorktree is returned when a plan cannot keep a pointer
	// fixed: a mount source that is not a real, canonical directory, a
	// pointer in no mount of the plan, too many mounts or submodules, a
	// submodule path through something that is not a directory.
	ErrInvalidWorktree = errors.New("invalid worktree record")
)
