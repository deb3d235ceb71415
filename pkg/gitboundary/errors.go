package gitboundary

import "errors"

// Errors callers test with errors.Is. Each error that wraps one names the
// fix.
var (
	// ErrAgentUID: the agent's uid is root or the repository owner's, so
	// git's ownership check could not tell the agent's files from the
	// user's (IDs.Check).
	ErrAgentUID = errors.New("agent uid not separate from the user")
	// ErrNoACL: the filesystem of a shared tree holds no POSIX ACLs
	// (tmpfs without acl, NFS, some container filesystems), so the tree
	// cannot be writable by both users (Apply, ShareDir, CheckFilesystem).
	ErrNoACL = errors.New("filesystem without POSIX ACLs")
	// ErrOldGit: the host's git is older than 2.35.2 and does not refuse a
	// repository another user owns (CheckGit).
	ErrOldGit = errors.New("host git without the ownership check")
)
