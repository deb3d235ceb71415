package gitboundary

import (
	"time"

	"golang.org/x/sys/unix"
)

// Kinds of git directory FindGitDirs reports.
const (
	KindGitDir     = "git directory"                  // a .git directory
	KindGitFile    = "gitdir file"                    // a .git file ("gitdir: <path>")
	KindGitSymlink = "git symlink"                    // a .git symlink
	KindBare       = "implicit bare repository"       // HEAD, objects/ and refs/ in one directory
	KindBareParts  = "implicit bare repository parts" // the agent's HEAD, objects/, refs/ in a directory of the user's
)

// bareParts are the entries that make a directory a repository to git's
// discovery (HEAD, objects/, refs/) and the ones that configure or extend
// it; Release moves the agent's ones out of a directory of the user's.
var bareParts = []string{"HEAD", "objects", "refs", "config", "packed-refs", "commondir", "hooks", "info", "logs", "index", "worktrees", "gitdir", "description"}

// Found is one git directory in a tree.
type Found struct {
	// Rel is its path relative to the tree's root.
	Rel  string
	Kind string
	// UID owns it (for KindBareParts, the directory holding the parts).
	UID int
	// AgentMade says the agent's uid owns it, or (a bare repository) one of
	// its HEAD, objects/, refs/ or config.
	AgentMade bool
}

// FindGitDirs lists the git directories in the tree at root that the user's
// git could open by discovery, besides the root's own .git: every .git
// (directory, gitdir file or symlink) and every implicit bare repository.
// It enters no .git directory and follows no symlink. ids.Agent tells which
// are the agent's; the others are the user's (or, made by an ohd before
// the agent had a uid of its own, indistinguishable from the user's).
func FindGitDirs(root string, ids IDs) ([]Found, time.Duration, error) {
	t0 := time.Now()
	f := &finder{agent: uint32(ids.Agent)}
	err := walk(root, f)
	return f.found, time.Since(t0), err
}

type finder struct {
	agent uint32
	found []Found
}

func (f *finder) wants(name string) bool { return name == ".git" }

func (f *finder) file(e entry) error {
	if e.name != ".git" {
		return nil
	}
	kind := KindGitFile
	if e.st.Mode&unix.S_IFMT == unix.S_IFLNK {
		kind = KindGitSymlink
	}
	f.found = append(f.found, Found{Rel: e.rel, Kind: kind, UID: int(e.st.Uid), AgentMade: e.st.Uid == f.agent})
	return nil
}

func (f *finder) dir(e entry, fd int) (bool, error) {
	if e.name == ".git" {
		// The root's own .git is the repository's, unless the agent
		// made it (a plain folder's).
		if e.rel != ".git" || e.st.Uid == f.agent {
			f.found = append(f.found, Found{Rel: e.rel, Kind: KindGitDir, UID: int(e.st.Uid), AgentMade: e.st.Uid == f.agent})
		}
		return false, nil
	}
	if b, ok := borrowedFd(fd); ok {
		e.st.Uid = uint32(b.uid) // lent to the agent, the user's (Borrow)
	}
	if kind, agent, ok := bareRepo(fd, e, f.agent); ok {
		f.found = append(f.found, Found{Rel: e.rel, Kind: kind, UID: int(e.st.Uid), AgentMade: agent})
	}
	return true, nil
}

// bareRepo reports whether the directory open as fd is an implicit bare
// repository (HEAD, objects/ and refs/), whether the agent made it (it or
// one of HEAD, objects, refs, config is the agent's), and its kind: the
// whole directory the agent's, or its parts in a directory of the user's.
func bareRepo(fd int, e entry, agent uint32) (kind string, agentMade, ok bool) {
	var head, objects, refs, config unix.Stat_t
	if unix.Fstatat(fd, "HEAD", &head, unix.AT_SYMLINK_NOFOLLOW) != nil ||
		unix.Fstatat(fd, "objects", &objects, unix.AT_SYMLINK_NOFOLLOW) != nil || objects.Mode&unix.S_IFMT != unix.S_IFDIR ||
		unix.Fstatat(fd, "refs", &refs, unix.AT_SYMLINK_NOFOLLOW) != nil || refs.Mode&unix.S_IFMT != unix.S_IFDIR {
		return "", false, false
	}
	agentMade = e.st.Uid == agent || head.Uid == agent || objects.Uid == agent || refs.Uid == agent
	if unix.Fstatat(fd, "config", &config, unix.AT_SYMLINK_NOFOLLOW) == nil && config.Uid == agent {
		agentMade = true
	}
	kind = KindBare
	if agentMade && e.st.Uid != agent {
		kind = KindBareParts
	}
	return kind, agentMade, true
}
