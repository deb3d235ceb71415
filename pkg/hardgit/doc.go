// Package hardgit runs git on the host so that nothing a repository's
// configuration, attributes or hooks name is ever executed.
//
// # Where to start
//
// Runner.Run runs one git command at a Target (its directory, --git-dir,
// --work-tree and owner) and returns its standard output or a *GitError
// (wrapping ErrGit). Look finds git in a fixed search path; ParseVersion,
// VersionLess and MinVersion check it. Package worktree runs every git
// command of its own through a Runner.
//
// # Hardened git
//
// Git executes programs named in configuration and attributes, and the
// agent writes its worktree (and, without a git view, parts of the shared
// git dir). Host-side git must never run any of them. Every git command a
// Runner runs:
//
//   - is executed directly (no shell), with its own process group and a
//     timeout (Runner.Timeout) after which the group is killed, and (on
//     Linux) a parent-death signal, so no git child outlives a killed ohd;
//   - runs as the target's owner when ohd is root (that uid and gid, no
//     supplementary groups); otherwise ohd must be that owner (ErrOwner);
//   - gets a fixed environment and nothing inherited: PATH fixed, HOME and
//     XDG_CONFIG_HOME a nonexistent directory, GIT_CONFIG_NOSYSTEM=1,
//     GIT_CONFIG_GLOBAL=/dev/null, GIT_ATTR_NOSYSTEM=1,
//     GIT_TERMINAL_PROMPT=0, GIT_NO_REPLACE_OBJECTS=1 (refs/replace is
//     agent-writable), an empty GIT_ALLOW_PROTOCOL (no transport, whatever
//     protocol.<name>.allow says) and GIT_NO_LAZY_FETCH=1, so a partial
//     clone's missing object (objects/ is agent-writable) never makes git
//     contact its promisor remote or run an ext:: command; LC_ALL=C; a
//     fixed identity "ohd <ohd@localhost>";
//   - names its git dir and work tree explicitly (--git-dir, --work-tree)
//     so neither discovery nor core.worktree nor the agent-writable .git
//     file decides what it operates on;
//   - passes -c overrides that disable every program git 2.39 could run
//     from configuration for the commands used here: core.fsmonitor,
//     core.hooksPath=/dev/null (all hooks, including post-checkout and
//     reference-transaction), diff.external, core.sshCommand, core.askPass,
//     credential.helper, core.editor and sequence.editor (":" = none),
//     core.pager, gpg programs and commit/tag signing, submodule recursion
//     and status.submoduleSummary (no git children in submodules),
//     gc.auto/maintenance.auto, and protocol.allow=never, which forbids
//     every transport and with it any fetch, lazy fetch or ssh;
//   - disables every filter driver the repository's configuration defines.
//     Driver names are not known in advance, so before each command
//     `git config -z --get-regexp ^filter\.` (which runs nothing) lists
//     them in exactly the same context as the command (same --git-dir,
//     --work-tree and directory), so include.path, includeIf (gitdir:,
//     onbranch:, hasconfig:) and config.worktree resolve as they will for
//     the command; each driver then gets clean, smudge and process set to
//     empty (git 2.39 runs no filter for an empty command) and
//     required=false. The settings travel in GIT_CONFIG_COUNT/KEY/VALUE,
//     which, unlike -c, can name a driver containing "=".
//
// TestRunnerRunsNothingTheRepositoryNames and
// TestEmptyFilterOverrideDisablesFilter try it here, each with a control
// in which plain git runs the programs; package worktree's TestHardenedGit
// (agent-written includes and config.worktree) and TestNoLazyFetch try it
// through its operations.
//
// Consequences: filters such as Git LFS are not applied on the host, so an
// LFS repository's worktree starts with pointer files; a partial clone
// whose blobs are missing cannot be checked out. Configuration is
// enumerated right before each command (Opts.Filters memoizes it for one
// operation); callers must not let an agent change the configuration
// while such an operation runs.
package hardgit
