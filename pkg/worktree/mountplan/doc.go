// Package mountplan plans the bind mounts of a conversation's container
// that keep the agent from moving what the user's git on the host follows:
// the pointers into a repository's submodules, fixed in every mode
// (worktree, in place, plain folder).
//
// # Where to start
//
// Mount is one bind mount; Source always equals Target (the container sees
// every path at its host path). WorkTreePointers lists the read-only
// pointer mounts of a work tree (its .git file, and each submodule's .git,
// recursively, or the directory of one not checked out); Pin adds, bound
// onto itself, every directory holding one of them up to the mount that
// holds the work tree (a mount point cannot be renamed or removed), and
// sorts parents before children (Sort). PlainFolder is the whole plan of
// a plain folder: each repository found in it protected that way.
// CheckSource requires a mount source to be a real, canonical directory
// (Docker resolves symlinks in a bind source).
//
// Planning reads the file system itself and asks a Host (package
// worktree's Manager) for what takes git, the gitlinks of an index, and
// for chown. The attacks these mounts stop are tried in
// TestPinnedPointersHoldInNamespace (package worktree) and
// TestBackendPointerAttacksFailInContainer (integration).
//
// # Caveats
//
// A plan is bounded (mounts, submodules, directories walked, repositories):
// beyond a bound it is refused, with ErrInvalidWorktree or ErrInvalidPath,
// rather than leaving a pointer unfixed. A container keeps the mounts it
// was made with: a submodule checked out later is pinned in it live
// (pkg/conversation, through package nsmount), or the container is made
// anew.
package mountplan
