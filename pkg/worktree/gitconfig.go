package worktree

// ContainerGitConfig returns the git settings the container's environment
// must carry (as GIT_CONFIG_COUNT / GIT_CONFIG_KEY_n / GIT_CONFIG_VALUE_n),
// so nothing inside the container prunes or garbage-collects the shared
// repository's worktree metadata: gc.auto=0 (no automatic gc, which would
// run `git worktree prune`), gc.worktreePruneExpire=never (even an explicit
// gc keeps worktree registrations) and maintenance.auto=false (no
// background maintenance after commands). The agent runs as a uid of its
// own while the user owns the repository, so its git would refuse the
// user's tree ("dubious ownership"): safe.directory=* lets it, and git
// honours safe.directory in this command scope (GIT_CONFIG_*), never from
// a repository's own config (package gitboundary). The slice is fresh on
// each call.
func ContainerGitConfig() [][2]string {
	return [][2]string{
		{"safe.directory", "*"},
		{"gc.auto", "0"},
		{"gc.worktreePruneExpire", "never"},
		{"maintenance.auto", "false"},
	}
}
