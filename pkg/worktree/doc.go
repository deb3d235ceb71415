// Package worktree creates, snapshots and removes the host-side git
// worktrees of ohd conversations.
//
// # Where to start
//
// New returns a Manager for a worktree root. Inspect tells whether a
// workspace directory is in a git work tree; Add creates the
// conversation's worktree (with AddOptions.View, its own git view);
// MountPlan lists the bind mounts its container needs; ViewBranch and
// Publish keep the host's branch equal to the view's; Health serves
// `ohctl doctor`, StaleRegistrations the registrations left behind; Remove
// (SaveView, or Snapshot without a view) ends it; Restore brings an ended conversation's work back; Find
// rebuilds a Worktree from disk when its record was lost (a crash between
// Add and saving the result). RunView is the sandbox side (`ohctl view`,
// run inside the conversation's container). ContainerGitConfig is the git
// configuration the container's environment must carry.
//
// PlanInPlace and AddInPlace give a conversation that works in the
// repository's own folder ("in place", inplace.go) the same git view,
// mounted over the folder's git dir; Publish, SaveView and Remove take
// such a Worktree (Worktree.InPlace) as well and never touch the folder.
// PlainFolderMounts is the mounts of a workspace that is no git work tree
// at all: the repositories in it stay the user's.
//
// The files: add.go, remove.go, snapshot.go, restore.go (restore_undo.go
// undoes an interrupted one) are the lifecycle; inplace.go is in place;
// view.go (seeding), hostview.go (the read-only remote "host"), publish.go
// (ref moves), mirror.go (the live mirror), package gitimport (the
// bounded, quarantined import) and sandbox.go (the in-container side) are
// the git view; runner.go runs git through package hardgit (hardened git);
// mounts.go the container's mounts; held.go the commits held back because
// they would make the user's git enter a repository the agent made
// (refs/ohd/held/<id>/, ErrHeld); health.go and repair.go serve `ohctl
// doctor`.
//
// What needs no Manager lives in packages of its own below this one, none
// of which imports it back:
//
//   - admindir: git's records of linked worktrees, the admin dirs under
//     <common-dir>/worktrees/ and the .git and gitdir files linking each to
//     its worktree (found, owned, swept, removed in one rename);
//   - mountplan: the mounts that fix the pointers every mode protects (what
//     the user's git follows into a submodule without its ownership check:
//     .git files, submodule directories and every directory above them),
//     and a plain folder's whole plan; it asks the Manager (its Host) for
//     an index's gitlinks and for chown;
//   - snapshot: the commit of a worktree's uncommitted state, built in a
//     temporary index (nested repositories saved as files in the sandbox);
//   - journal: the journal of a Restore under way, which a killed restore
//     leaves for the next one to undo;
//   - porcelain: parsers of git's -z output (worktree list, status, ls-tree,
//     ls-files, diff-tree);
//   - nofollow: reading the files the agent can write without following a
//     symlink out of where ohd looks.
//
// ErrInvalidPath, ErrInvalidWorktree (mountplan's) and ErrUnsavedWork
// (snapshot's) are declared in the subpackage that returns them too (it
// cannot import this one); this package's are the same values, so
// errors.Is against them holds whichever package returned the error.
//
// # One path, two namespaces
//
// Git records absolute paths in both directions: the worktree's .git file
// names <common-dir>/worktrees/<admin-id>, and that admin dir's gitdir file
// names <worktree>/.git. If the worktree is created inside a container at a
// container-only path, the host sees a registration that points nowhere
// ("prunable gitdir file points to non-existent location"), and a prune on
// the host deletes a live conversation. So:
//
//   - every `git worktree add` runs on the host, at
//     <Root>/<conversation-id>/<basename of the repository>;
//   - the container gets the worktree and the git common dir bind-mounted
//     at exactly their host paths (MountPlan: Source == Target), so both
//     pointers resolve in both namespaces for the conversation's whole life;
//   - paths are canonical (symlinks resolved, e.g. macOS /var ->
//     /private/var), and the admin dir's name is read from <worktree>/.git,
//     never assumed;
//   - the worktree is added with `--lock --reason "ohd conversation <id>"`,
//     so no prune (host, container, gc) removes it while it lives, and the
//     container's git runs with gc.auto=0 and gc.worktreePruneExpire=never
//     (ContainerGitConfig).
//
// # The git view: the container never writes the host repository
//
// The agent is untrusted. Sharing the repository's live git dir with it
// lets it delete the user's history (objects/), move any branch, delete
// other conversations' work, plant refs/replace, and plant programs that
// host-side git would run. So a containerized conversation gets its own
// git view, <Root>/<id>/.ohd/git, mounted in the container at the common
// dir's path, so every path stays what it is on the host:
//
//   - its own config (a copy of the repository's, plus the branch's
//     upstream), HEAD, packed-refs (every ref but refs/ohd/ and other
//     conversations' branches), logs/, info/, shallow, and its own admin
//     dir worktrees/<admin-id>/ (HEAD, index, gitdir, commondir, locked);
//   - its own object store, whose alternate is <Root>/<id>/.ohd/objects:
//     on the host a symlink to <CommonDir>/objects, in the container the
//     real store mounted read-only at that path. Seeding costs O(refs),
//     no object is copied;
//   - hooks/ is the repository's, mounted read-only.
//
// Everything git does works inside (branch and tag deletion, stash,
// rebase, cherry-pick, revert, local config, remotes, gc, maintenance,
// pack-refs, worktree add) and changes nothing the host sees. The host's
// own registration (<CommonDir>/worktrees/<admin-id>) is never mounted, so
// `git worktree list` on the host shows the live worktree, locked, valid.
//
// Publishing. ViewBranch reads the view's refs/heads/openhands/<id> (a
// file read that opens every path component relative to the view with
// O_NOFOLLOW: nothing outside the view is ever read). Publish brings that
// commit to the host: inside the sandbox, `git pack-objects --revs --local`
// packs what the view holds itself; on the host the pack is imported as a
// received push is (package gitimport): bounded (package packcheck refuses it from
// its entry and delta headers when it declares too many objects or too
// large a result, before git reads it), quarantined (`git index-pack
// --strict` or `unpack-objects --strict` into objects/incoming-ohd-*, the
// real store its alternate), checked (every tip complete, no tree deeper
// than Options.MaxTreeDepth, a branch names a commit) and only then
// migrated into the real store; a refused import leaves nothing there
// (RefusalReason says why). The branch then moves with its expected old
// value. A branch moved by someone else is left alone and the commit is
// kept under refs/ohd/kept/<id>/heads/openhands/<id> instead.
//
// Host-side git treats the worktree and the view as hostile: whatever must
// read what the agent wrote (the snapshot, the view's refs, its objects)
// runs in a Sandbox: the conversation's own container, or a container of
// the same image and mounts with no network and no broker directory,
// where git may run whatever the agent configured without reaching
// anything the agent could not already reach. The host only imports
// validated objects and moves refs it owns.
//
// In place (see inplace.go), the folder itself is the work tree: the view
// is mounted at the common dir's path, which for a main work tree is the
// folder's .git, its HEAD on the branch the host has checked out
// (Worktree.ViewBranch), and Publish brings that branch's commits to the
// host's openhands/<id>, never to the checked-out branch.
//
// Worktrees without a view (local-runtime conversations, whose agent runs
// on the host as the user, and containerized ones made before views, until
// SeedView moves them) share the repository's git dir; for them host-side
// git runs hardened (below).
//
// The branch is openhands/<id>, created with --no-track (no write to the
// shared config), from the first of: the explicit start point,
// refs/remotes/origin/HEAD, main, master, HEAD. Nothing is fetched.
//
// # Ownership
//
// Host-side git runs as the owner of the git common dir: when ohd is root,
// each git child gets the owner's uid and gid (and no supplementary
// groups), so the worktree, its admin dir, the branch ref and snapshot
// objects belong to the user, and the container (which runs as the same
// uid:gid) sees no "dubious ownership". When ohd is not root it must be
// that owner (ErrOwner otherwise). <Root>/<id> is created 0700 and given to
// the owner; Root and any parents New creates are 0711, so the owner can
// reach the worktree on the host without listing other conversations.
//
// # Hardened git
//
// Git executes programs named in configuration and attributes, and the
// agent writes its worktree (and, without a view, parts of the shared git
// dir). Host-side git must never run any of them: every git command this
// package runs goes through package hardgit (runner.go), which runs it
// directly with a fixed environment, an explicit --git-dir and
// --work-tree, -c overrides that turn off every program git could run
// from configuration, every filter driver the configuration defines
// disabled, and a timeout (Options.Timeout); see that package's comment.
//
// For the same reason `git worktree add` runs with --no-checkout and the
// files are checked out by a second git run in the new worktree's own
// context: git would otherwise check out in a child process whose config
// context (the new admin dir, the new branch) differs from the parent's.
//
// Consequences: filters such as Git LFS are not applied on the host, so an
// LFS repository's worktree starts with pointer files (run `git lfs
// checkout` in the container); a partial clone whose blobs are missing
// cannot be checked out. Configuration is enumerated right before each
// command; callers must not let an agent run concurrently with Snapshot or
// Remove (stop the container first).
//
// # Serialization
//
// Mutations of one repository's worktree metadata (worktree add and
// remove, branch deletion, snapshot ref updates) are serialized by
// package repolock: an in-process lock keyed by the canonical common dir
// plus an flock(2) on a file in Options.LockDir named by a hash of that
// path, so parallel creates in one repository never fail on config.lock or
// ref locks, and two ohd processes sharing LockDir serialize as well.
//
// # Snapshot and removal policy
//
// Ending a conversation loses no work. With a git view, Remove first saves
// the view through the sandbox (SaveView): the uncommitted state becomes a
// snapshot commit there, the branch gets its last publish, and the view's
// branches, tags and stash that the agent made or moved (they differ from
// the view's seed and from the host's ref of the same name), or whose
// commits no host ref but the live mirror reaches, are kept under
// refs/ohd/kept/<id>/<ref without refs/> (at most 1000), and the live
// mirror is dropped (mirror.go: while the conversation runs, every ref the
// agent makes or moves is mirrored under refs/ohd/live/<id>/ through the
// same import, so the host's gc never prunes what the view borrows); ignored
// files are counted (RemoveResult.IgnoredFiles) and not kept. Without a
// view, Remove calls Snapshot, which records the uncommitted state
// (modified, staged and untracked files; not ignored ones; package
// snapshot) as a commit under refs/ohd/snapshots/<id>. It builds the
// tree in a temporary index that starts as a copy of the worktree's index
// (staged content counts; the worktree's own index is never written); the
// commit's parent is the worktree's HEAD, plus the staged index state as a
// second parent when that differs from both HEAD and the working tree.
// Nothing uncommitted: no snapshot.
//
// Remove then unlocks and removes the worktree (if the directory is already
// gone, the admin dir is deleted after checking that its gitdir still points
// at this worktree, so an admin dir git has since reused is not touched),
// and deletes the branch only if it has no commits beyond StartCommit, no
// snapshot exists, and no other worktree has it checked out; otherwise the
// branch is kept and RemoveResult.Message says why. RemoveOptions.Discard
// skips the snapshot and deletes the branch, the snapshot ref and the
// kept refs; RemoveOptions.Undo (a create that never ran) takes no
// snapshot of what may be a half-made checkout. Remove is idempotent, so
// an interrupted removal can simply be retried; a snapshot saved by the
// interrupted attempt still keeps the branch. Restore recreates the work:
// the branch checked out in a new worktree, the snapshot applied as
// uncommitted changes.
//
// # Bad input changes nothing
//
// Add validates the id, the start point (not option-like, no control
// characters, a commit that exists), the repository (inspected again and
// compared with the Repo given), the owner's access to the root, and that
// neither the conversation directory, nor the branch, nor a registration
// exists, all before its first change. If git fails midway, Add removes
// the directory, the admin dir and the branch it created.
package worktree
