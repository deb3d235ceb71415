// Package repolock serializes mutations of one repository's worktree
// metadata.
//
// # Where to start
//
// Locks.Lock(ctx, commonDir) waits for, and takes, the lock of the
// repository whose canonical git common dir is commonDir, and returns the
// function that releases it. Mutations (worktree add and remove, branch
// deletion, snapshot ref updates) hold it so parallel creates in one
// repository never fail on config.lock or ref locks.
//
// The lock is an in-process lock keyed by the common dir plus an flock(2)
// on a file in Locks.Dir named by a hash of that path (fixed length, and
// revealing nothing about the path), so two ohd processes sharing Dir
// serialize as well. Waiting ends with the context; the flock is polled,
// since its holder is another process.
package repolock
