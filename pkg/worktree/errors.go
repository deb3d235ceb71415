package worktree

import (
	"errors"

	"github.com/ohd-dev/ohd/pkg/hardgit"
	"github.com/ohd-dev/ohd/pkg/worktree/mountplan"
	"github.com/ohd-dev/ohd/pkg/worktree/snapshot"
)

// Sentinel errors. Every error returned by this package wraps at most one
// of them; callers test with errors.Is. The text around the sentinel says
// what failed, on what, and what to do next.
var (
	// ErrInvalidPath is returned when a workspace path is unusable: empty,
	// relative, missing, not a directory, inside a .git directory, or
	// changed since it was inspected, or a plain folder whose
	// repositories cannot all be protected. It is package mountplan's,
	// whose plain folder plan returns it too.
	ErrInvalidPath = mountplan.ErrInvalidPath

	// ErrInvalidID is returned when a conversation id is not a canonical
	// (lower-case, hyphenated) UUID.
	ErrInvalidID = errors.New("invalid conversation id")

	// ErrInvalidStartPoint is returned when an explicit start point is
	// option-like, contains control characters, or does not name a commit.
	ErrInvalidStartPoint = errors.New("invalid start point")

	// ErrNoCommits is returned by Add when no start point exists because
	// the repository has no commits.
	ErrNoCommits = errors.New("repository has no commits")

	// ErrNotGit is returned by Add when the Repo is not a git work tree.
	ErrNotGit = errors.New("not a git repository")

	// ErrExists is returned by Add when the conversation's directory,
	// branch or worktree registration already exists.
	ErrExists = errors.New("already exists")

	// ErrOwner is returned when git cannot run as the repository's owner:
	// ohd is neither root nor that owner, or the owner cannot reach the
	// worktree root.
	ErrOwner = hardgit.ErrOwner

	// ErrInvalidWorktree is returned when a Worktree value is inconsistent
	// (for example its Path is not <Root>/<id>/<basename>), so acting on it
	// could touch something that is not the conversation's, or when its
	// mount plan could not keep the agent from moving a pointer the user's
	// git follows. It is package mountplan's, whose plans return it too.
	ErrInvalidWorktree = mountplan.ErrInvalidWorktree

	// ErrUnsavedWork is returned by Remove when the worktree directory holds
	// files that cannot be snapshotted (its registration is gone, or a
	// nested repository without a commit); nothing is removed unless
	// RemoveOptions.Discard is set. It is package snapshot's.
	ErrUnsavedWork = snapshot.ErrUnsavedWork

	// ErrGit is wrapped by every failure of a git command (see GitError).
	ErrGit = hardgit.ErrGit
)

// GitError describes a failed git invocation. It wraps ErrGit.
type GitError = hardgit.GitError

// truncate shortens s, quoted in an error message, to n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
