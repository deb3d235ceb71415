// Package nsmount binds directories and files onto themselves inside a
// running container's mount namespace, from the host: the pointers the
// user's git follows into a submodule (pkg/worktree/mountplan's pinned
// pointers) that appeared after the container was made (a submodule the
// user added or checked out mid-conversation) are fixed at once, without
// making the container anew.
//
// # Where to start
//
// Bind takes the pid of a process of the container (its init) and the
// mounts: each a host path (Source) to mount at a path of the container
// (Target), read-only or not. A pin is a host path the container sees at
// the same path, bound onto itself (a mount point cannot be renamed or
// removed, EBUSY); a read-only one keeps the agent from writing what it
// holds; a source the container does not see (the repository's
// .git/modules under its git view) is mounted all the same.
//
// # How
//
// A goroutine locks its OS thread (never the process's main thread, which
// the runtime cannot end), takes a detached copy of each source in ohd's
// own namespace (open_tree, made read-only with mount_setattr), gives the
// thread a filesystem context of its own (unshare CLONE_FS: setns into a
// mount namespace refuses a thread that shares it), joins the container's
// mount namespace (setns CLONE_NEWNS) and attaches each copy at its
// target there (move_mount), making a missing mount point as the engine
// does. The thread is never unlocked, so the Go runtime ends it with the
// goroutine and no other goroutine ever runs in that namespace. Linux 5.2
// or later (ErrUnsupported before); the caller must hold CAP_SYS_ADMIN
// (ohd as root).
//
// # Caveats
//
// The engine does not know of these mounts: the container's inspected
// mounts stay those it was made with, so its next start (which compares
// them with the plan) makes it anew, with every pin in its spec.
package nsmount
