// Package gitboundary keeps the user's git from ever running what the
// agent wrote, in every directory the agent can write (a worktree, the
// repository's own folder, a plain folder, the conversation's git view),
// during the conversation and after it.
//
// # What holds, and why
//
// git's own boundary is ownership: since 2.35.2 it refuses a repository
// whose work tree, .git or git dir another user owns ("dubious
// ownership"). So the agent runs as a uid of its own (ohd serve
// --agent-uid; IDs.Check refuses root and the repository owner), and
// everything it makes is its own: a .git it plants in the user's docs/, a
// repository it inits anywhere, is refused by the user's git by discovery.
// The agent's own git accepts the user's tree through safe.directory=* in
// its command scope (worktree.ContainerGitConfig).
//
// The trees stay writable by both through POSIX ACLs (Apply, ShareDir):
// every directory gets access entries user:<owner>:rwx and
// user:<agent>:rwx with mask rwx, every file access entries rw for both,
// and every directory a default ACL that gives the owner rwx and the agent
// nothing, nor its group, nor the group and other classes write
// (defaultACL). So what the agent makes is its own (the owner entry) and
// the user's to write (the named default entry), and what the user makes
// is not the agent's to write until ohd shares it. Under a default ACL
// the umask is not applied, so the 0666 files git, editors and most
// programs create stay writable by both. No directory named .git gets an
// entry (the user's git directories stay the user's alone), no symlink is
// followed, no other filesystem entered. A worktree needs no walk of
// files: its conversation directory gets a default ACL with both entries
// before git checks anything out (ShareDir), every file inherits the
// agent's entry, and Borrow's pass over the directories drops the agent's
// default entry from each.
//
// At the end (Release, after the container is stopped and the work
// saved), every git directory the agent made in the tree (a .git that is
// its own: directory, gitdir file or symlink; and every implicit bare
// repository it filled, HEAD, objects/ and refs/ in one directory) is
// moved out into the conversation's kept state, every file the agent made
// is chowned back to the owner, and the agent's ACL entries go. Nothing is
// deleted.
//
// What does not hold by ownership alone, and where it is handled:
//
//   - git skips the ownership check when it recurses into a submodule
//     (it sets GIT_DIR): the pointers it follows there are fixed inside the
//     container (pkg/worktree/mountplan's submodule mounts, issue 26's
//     fixed pointers).
//   - git checks a repository's directories, not its files: a directory
//     the user owns and the agent may write can be filled as an implicit
//     bare repository that the user's `git log` there reads. So Borrow
//     lends every directory of the user's in the tree (but a work tree's
//     root, whose owner the user's git checks) to the agent's uid while
//     the conversation lives, its owner, group, mode and ACLs kept in
//     trusted.* attributes only root reads or writes, and Release gives
//     each back exactly (borrow.go says what was measured).
//   - A directory the user makes in the tree mid-conversation is the
//     user's (Linux cannot make it someone else's), but the agent cannot
//     write in it: it inherits the default ACL, which gives the agent
//     nothing. The watcher (Watch: inotify on every directory, from
//     before the container starts) lends and shares it as it comes, so
//     the agent waits milliseconds; ohd's periodic pass (Borrow, and
//     Apply when the watcher is missing or Degraded) is the backstop. The
//     boundary does not depend on either: until a pass has run, the new
//     inode is not the agent's to write at all.
//   - The agent owns every directory it writes in (lent, or its own), and
//     an owner may set a directory's default ACL and give it its group and
//     the setgid bit. Its group gains nothing (the default ACL gives the
//     group class no write); setting an ACL (measured: an entry of the
//     agent's in a parent's default ACL let it fill the user's next
//     directory there, and the user's git log ran its program) is closed
//     by LimitAgent, the seccomp filter ohd's in-container helper installs
//     before it starts the agent server: no attribute write, no io_uring.
//     What ohd execs in the container as the agent (ohctl exec, doctor's
//     git status) runs under the same filter (ohctl limit): an agent that
//     attached to such a process (ptrace, same uid) could otherwise have
//     it set an attribute.
//
// So safe.bareRepository=explicit is not needed for what ohd's agents
// write; `ohctl doctor` still mentions it (bare repositories from
// elsewhere, such as an earlier ohd's agent that ran as the user), and
// FindGitDirs reports such directories and Release moves them out.
//
// Where the host cannot hold this (git older than 2.35.2, CheckGit; a
// filesystem without ACLs, CheckFilesystem and ErrNoACL), ohd refuses the
// create with the fix named, never silently weaker.
//
// # Where to start
//
// IDs names the two users. Borrow lends the user's directories to the
// agent (OwnerOf sees through it), Apply shares a tree, ShareDir one
// directory, Watch shares what the user makes as it comes, LimitAgent
// limits the agent's processes,
// ReadOnly keeps one pointer (a worktree's .git file) from the agent's
// writes; Release ends the sharing; FindGitDirs lists the agent's git
// directories (doctor); Archive writes the ones Release moved out to a
// tar (ohctl restore). CheckGit and CheckFilesystem are the
// preconditions.
//
// # Cost
//
// One pass, no process per file: getdents and one fstatat per entry, and
// per shared inode a read and (when it differs) a write of its ACL
// attribute, each relative to an open directory. Measured on 10,000 files
// in 100 directories (ext4, two loaded cores, bench_test.go): Apply
// ~350 ms, Release ~310 ms, the move-only walk of a worktree's removal
// ~25 ms (it stats only directories and .git entries), Borrow ~20 ms (the
// same walk, one chown and three attributes per directory, the default
// ACL read again), Watch ~6 ms (one inotify watch per directory, bounded
// at 16384; its Close ~15 ms, at the removal). A worktree's create walks
// only directories (Borrow, Watch).
// The watcher's pass costs what the user made: one fstatat per name an
// event gives, and for a new directory a walk of what is in it.
//
// # Caveats
//
// Under a default ACL the umask is not applied: a file the agent or the
// user creates 0600 in a shared directory is readable as that directory's
// default ACL says (both users; others only as the directory's own other
// bits allowed). Release removes the owner's and the agent's named
// entries and drops a default ACL left with none; an ACL the user had
// before keeps its other entries. ohd must be root (or the owner of every
// inode) to share and release. The files:
// acl.go is the kernel's ACL attribute format, walk.go the one-pass walk
// (getdents and fstatat, every call relative to an open directory),
// apply.go the sharing, borrow.go the lending, watch.go the watcher,
// limit.go the agent's seccomp filter, release.go the end,
// find.go the search, archive.go the restore's tar.
package gitboundary
