// Package admindir reads and removes git's records of linked worktrees:
// the admin dirs under <common-dir>/worktrees/ and the two files that
// point a worktree and its admin dir at each other (the worktree's .git,
// "gitdir: <admin dir>", and the admin dir's gitdir, "<worktree>/.git").
//
// # Where to start
//
// Find returns the admin dir of a worktree (git picks its name; it is read,
// never assumed); PointsAt and DotGitPointsAt check each direction of the
// link, SamePath compares the paths as git would after resolving symlinks.
// Owns and FindOwn tell whether an admin dir is a conversation's own (its
// gitdir names the worktree, or its lock carries the conversation's
// reason), so nothing deletes an admin dir git has since given to another
// worktree. RegisteredAt and CheckedOutIn read the admin dirs as `git
// worktree list` and `git branch -d` do. Abandoned lists what a killed `git
// worktree add` leaves (an admin dir no git command sees); Remove deletes
// an admin dir in one rename (SweepTrash removes what a killed Remove
// left). LooksLikeAdmin and LooksLikeGitDir tell a registration and a git
// dir by their shape.
//
// # Caveats
//
// The worktree's .git and, without a git view, its admin dir are written
// by the agent: every link file is read without following a symlink and
// bounded in size (ReadLinkFile, package nofollow), and ParseDotGit and
// ParseGitdir refuse a path with a control character
// (FuzzParseGitdirFile). Nothing here runs git.
package admindir
