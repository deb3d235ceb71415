// Package porcelain parses what git prints for machines: the NUL-separated
// (-z) output of the commands package worktree runs.
//
// # Where to start
//
// ParseWorktreeList parses `git worktree list --porcelain -z` into
// Registrations (a worktree as the repository records it: path, HEAD,
// branch, lock, prunable). SplitIgnored and UntrackedDirs read `git status
// --porcelain=v1 -z` (the ignored files of --ignored; the nested
// repositories git lists as untracked directories). Gitlinks reads the
// submodule entries of `git ls-tree -r -z` or `git ls-files --stage -z`,
// ChangedGitlinks those of `git diff-tree -r -z`.
//
// Nothing here runs git: the callers run it (hardened, package hardgit)
// and hand the output over. The output may name paths the agent made, so
// every parser takes any input without panicking (FuzzParseWorktreeList).
package porcelain
