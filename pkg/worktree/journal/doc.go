// Package journal keeps the journal of a worktree restore under way, so
// that a restore killed at any point (ohd killed, the machine down) can be
// undone and run again instead of being refused as "already restored".
//
// # Where to start
//
// Journal is what a restore has made so far: the worktree it is making,
// the branch it created (and where), the user's stash entries as they were
// before it rebuilt refs/stash, and the process that ran it. Write records
// it durably (temporary file, fsync, rename, fsync of the directory) in
// ohd's lock dir before each step that changes the repository; Remove
// deletes it when the restore is done; Read returns the journal a killed
// restore left, or nil. Journal.HolderGone says whether the process that
// ran it is gone (ProcessIdentity: its pid and start time, since a pid
// alone may be reused), and only then does ClearStaleRefLocks remove the
// ref locks its killed git left.
//
// Undoing what a journal names runs git and is package worktree's
// (Manager.Restore).
//
// # Caveats
//
// A torn or foreign journal (unparsable, another conversation's id, a
// relative path) is ignored, with a warning: what it names cannot be
// trusted, so the restore goes on as if there were none.
package journal
