// Package conversation orchestrates a conversation's resources: its record
// in the store, its git worktree, its broker socket and its container.
//
// # Create
//
// Create validates everything first (paths, ids, grant names, the image),
// so bad input changes nothing. It then writes the record in state
// provisioning, before any side effect, and provisions in order:
//
//	worktree  (pkg/worktree: git worktree add on the host)
//	broker    (pkg/broker: socket directory, token, inner key file)
//	container (pkg/runtime: create, start, wait until ready)
//	forward   (optional caller step, e.g. the conversation API's create)
//
// Each completed step is recorded. If a step fails, every completed step is
// undone in reverse order, the record ends in state failed with the step
// named, and the error (a *StepError) says which step failed and why. A
// step that panics is undone the same way (step "internal") before the
// panic goes on. An undo that could not finish (UndoPending), and a
// provisioning record whose create ended without recording its outcome,
// are finished by RunUndoRetries while ohd runs, not only at the next
// start (TestAPICreateFailuresFinishTheRecord drives the API's failures).
//
// # The git view and publishing
//
// A containerized conversation's worktree gets its own git view
// (pkg/worktree): the container never writes the host repository.
// RunPublisher copies each running view's branch to the host's
// refs/heads/openhands/<id> within a second, through the conversation's
// container (ohctl view pack there, a bounded and quarantined import on
// the host), mirrors the other refs the agent made or moved under
// refs/ohd/live/<id>/ (worktree.Mirror), and refreshes the view's
// read-only remote "host" about once a second; Stop publishes once more.
// The commit about to be published is recorded (Publishing) before the
// ref moves, so a kill in between is not taken for a foreign move. A
// failure is recorded in PublishError (ohctl show, doctor), counted by
// reason (ohd_publish_failures_total), logged once while it stays the
// same and retried with a backoff of 2 s doubling to a minute. A conversation made before views (GitLayoutShared)
// is moved to its own view when its container next starts, or at its
// removal. One made without a worktree before in place existed (716a702:
// the folder, .git and all, writable in its container) is moved in place
// with its own view before its container is made again, and its running
// container is stopped at reconcile, not adopted (inplace_upgrade.go). A
// container whose bind mounts are not the conversation's current plan
// (worktree.MountPlan: a submodule checked out since, an earlier version's
// layout) is made anew at its next start instead of restarted.
//
// # In place
//
// A create without a worktree on a git repository, with a container
// runtime (inplace.go), works in the folder itself with its own git view
// over the folder's git dir (worktree.PlanInPlace, AddInPlace): the record
// has InPlace set and Worktree "", it is published and saved like a
// worktree's view, its removal never touches the folder, and any number
// of in-place conversations may share one work tree, each with its own
// view and branch (sharersOf); inplace_maint.go is its restore and doctor
// checks. A create of
// an id whose earlier conversation's work is still kept in the repository
// is refused (recreate.go). The files: request.go checks a create,
// create.go plans and provisions it, manager.go holds the Manager and the
// container's spec.
//
// # Git hosts
//
// gitrelay.go gives a container the git configuration that sends its
// relayed git grants' hosts through the broker relay (GIT_CONFIG_*, from
// the grants at container start), converts git grant options for the
// broker, grants with options (GrantGit: push patterns, --git-relay) and
// validates a git host's scheme and auth (ValidateGitHost).
//
// # Remove
//
// Remove (removal.go) first records the request (Removal) in the record,
// then stops the agent and saves its work before it tears anything down
// (saveWork): in a running container one exec, `ohctl view collect
// --freeze`, stops every process there and saves (worktree.SaveView:
// snapshot, last publish, the view's refs the host lacks); if that fails,
// the engine pauses the container and a sandbox container (same image and
// mounts, no network, no broker directory) saves, as for a stopped one.
// A save that fails resumes the agent, tears nothing down, drops the
// Removal mark and records RemovalFailed (why, and how to get the work
// out). After the save the container is removed, the broker closed, the
// worktree removed, and the record marked deleted with what was kept.
// Each step is idempotent, so a removal interrupted by a crash is finished
// by RunUndoRetries (at once after start-up, then periodically), not by
// Reconcile: ohd listens first. A create that fails or is interrupted is
// undone without a snapshot: it never ran an agent.
//
// # Reconcile
//
// At start-up Reconcile makes the world match the records: creates that
// were interrupted are undone; removals that were interrupted keep what
// they own for RunUndoRetries to finish;
// live conversations get their broker socket back (same directory, same
// token) and adopt their container if it kept running; containers and
// socket directories without a live record are removed. Worktree folders are
// never deleted by reconcile: they may hold work (ohctl prune and doctor
// report them).
//
// # The inner server's state
//
// With a container runtime every conversation has host directories for
// its inner server (Config.InnerRoot, openhands.DirsOf: persistence and
// conversations, owned by the conversation's uid, 0700), bind-mounted at
// their own paths; the container's environment and arguments come from
// pkg/openhands (openhands.Env, openhands.Args), never from here. The
// inner server's cipher key (OH_SECRET_KEY) is made once per conversation,
// sealed in the store (Store.InnerSecretKey) and written, with the inner
// session key, as a 0400 file into the broker directory, which the
// entrypoint wrapper ohctl inner-exec reads; neither is in docker
// inspect. A container that stops, crashes or is removed is started again
// on the next request with the same state. InnerInfo reads that state for
// the conversation API while no container runs. Remove deletes it with
// the conversation. A fork (CreateRequest.ForkOf) starts with the state
// its source's inner server wrote for it, moved into its own before its
// container starts (seedFork, openhands.CopyForkState), and with a copy
// of the source's own credentials sealed under its names
// (store.CopyScoped).
//
// A conversation of the previous release (store: InnerInContainer) kept
// that state in its container's writable layer, under the image's
// WORKDIR/workspace. When its container is next started (upgrade.go),
// ohd stops it, copies the state out through the Engine API's archive
// endpoint into the host directories (package safetar: the archive is
// the agent's; files and directories only, bounded, nothing outside),
// removes it and makes a container of this release's contract, with the
// image ohd is configured with; a copy that fails changes nothing.
//
// # The agent's own uid
//
// A container runs as Config.AgentUID (recorded per conversation,
// AgentUID), never the repository owner, so the user's git refuses every
// git directory the agent makes (package gitboundary; boundary.go). Create
// refuses, before anything is made, what cannot hold that (an agent uid
// that is root or the owner's, host git older than 2.35.2, a tree on a
// filesystem without ACLs). The trees the agent writes are shared with its
// uid before each container start (a worktree by the default ACL of its
// conversation directory, set before git checks out; the view, the
// in-place folder and a plain folder by a walk), and the broker's files
// and the inner state belong to it. Removal, once the container is gone,
// moves the git directories the agent made out of the user's tree into
// <KeptRoot>/<id>/git-dirs (Removal.GitDirsMoved) and, in place and in a
// plain folder, gives every file back to the owner; an interrupted
// removal does it again. A conversation made before agent uids gets one
// when its container is next created.
//
// # Running, idle and stopped
//
// A conversation is running when its container is up and ready, stopped
// when it is not (idle stop, the container died or was removed); its
// worktree, identity and socket stay. Target starts a stopped conversation
// again, sharing one attempt among concurrent callers. Watch follows the
// engine's events so that a container that dies is noticed at once.
package conversation
