// Package nofollow reads files that someone else (the agent) may write,
// without ever following a symlink out of where the caller looks.
//
// # Where to start
//
// ReadFile reads a small regular file, refusing a symlink as its final
// component and anything larger than a bound (ReadFileInfo also returns
// the file's info); ReadRegular does the same for a file already open.
// ReadBeneath and OpenBeneath read a path below a directory, opening every
// component relative to the one before with O_NOFOLLOW, so a symlink
// anywhere on the way is refused and the read never leaves the directory:
// package worktree reads a conversation's git view, which is the agent's,
// with them.
//
// A file that is not a regular file (a FIFO, a directory, a device) is
// reported as fs.ErrNotExist, so callers treat it as absent; files are
// opened O_NONBLOCK, so a FIFO planted in the place of a file never blocks
// the reader.
package nofollow
