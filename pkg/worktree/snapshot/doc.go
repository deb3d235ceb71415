// Package snapshot records the uncommitted state of a work tree (modified,
// staged and untracked files; not ignored ones) as a commit, with hardened
// git, without writing the work tree's own index.
//
// # Where to start
//
// Builder.Commit builds the commit (objects only: the caller writes the
// ref) and returns its id, or "" when nothing is uncommitted. Its tree is
// the working tree as `git add --all` sees it, built in a temporary index
// that starts as a copy of the work tree's index (so staged files count);
// its first parent is HEAD, and when something is staged the index state
// is a second parent, as `git stash` records it. In the sandbox (the
// conversation's container, where reading what the agent wrote is safe) an
// untracked nested repository is saved as its files, not as the gitlink
// git would make of it (nested.go); the same walk counts the ignored files.
//
// Package worktree's Manager.Snapshot (host side, a worktree without a git
// view) and `ohctl view collect` (sandbox side, RunView) both build their
// commit here.
//
// # Caveats
//
// KeepIndexTime: a copy of an index must keep the original's modification
// time, or a file changed in the second of the index's last write would
// look unchanged to git and its change would be lost
// (TestSnapshotSeesARacilyCleanChange). Call Commit with the agent
// stopped: it must not change the work tree, or the configuration git
// reads, meanwhile.
package snapshot
