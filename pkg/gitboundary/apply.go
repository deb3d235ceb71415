package gitboundary

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// IDs are the two users of a shared tree: the repository's owner (the user,
// whose git must never run what the agent wrote) and the agent (the uid the
// conversation's container runs as).
type IDs struct {
	Owner, OwnerGID int
	Agent, AgentGID int
}

// Check refuses an agent that is the owner or root: either would make
// everything the agent writes the user's (or anybody's) to git's ownership
// check.
func (ids IDs) Check() error {
	switch {
	case ids.Owner < 0 || ids.Agent < 0 || ids.OwnerGID < 0 || ids.AgentGID < 0:
		return fmt.Errorf("%w: negative uid or gid (%d:%d, agent %d:%d)", ErrAgentUID, ids.Owner, ids.OwnerGID, ids.Agent, ids.AgentGID)
	case ids.Agent == 0:
		return fmt.Errorf("%w: the agent's uid is 0 (root): run ohd serve with --agent-uid of an unprivileged uid of its own (default: the system user ohd-agent, else 10001)", ErrAgentUID)
	case ids.Agent == ids.Owner:
		return fmt.Errorf("%w: the agent's uid %d is the repository owner's: git could not tell what the agent wrote from what the user did; run ohd serve with --agent-uid of a uid no user has (default: the system user ohd-agent, else 10001)", ErrAgentUID, ids.Agent)
	}
	return nil
}

// Stats count what a walk did.
type Stats struct {
	Dirs, Files int
	// Changed counts the inodes whose ACL (or, for Release, owner) was
	// written.
	Changed  int
	Duration time.Duration
}

// ShareDir gives the directory dir itself (nothing below it) the shared
// access ACL and a default ACL with both entries: everything made in it
// from then on (by git's checkout of a new worktree) inherits both, so a
// tree created under it needs no walk. The directories made under it keep
// the agent's default entry only until Borrow's pass over them drops it
// (see defaultACL): ShareDir is for a directory the user does not write
// in, and Borrow must run over the tree made under it before the agent
// starts.
func ShareDir(dir string, ids IDs) error {
	if err := ids.Check(); err != nil {
		return err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("share %s: %w", dir, aclError(dir, err))
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("share %s: %w", dir, err)
	}
	a := &applier{ids: ids, agentDefault: true}
	if _, err := a.dir(entry{rel: ".", st: st}, fd); err != nil {
		return fmt.Errorf("share %s: %w", dir, aclError(dir, err))
	}
	return nil
}

// Apply shares the tree at root between owner and agent: every directory
// gets access ACL entries user:<owner>:rwx and user:<agent>:rwx with mask
// rwx and a default ACL with user:<owner>:rwx but no entry of the agent's
// (defaultACL: what the user makes later is not the agent's to write
// until ohd shares it), every regular file access entries rw (rwx when
// its owner may execute it) for both. Symlinks are never
// followed, other filesystems mounted below root are not entered, and no
// directory named .git is touched or entered (a git directory of the
// user's stays the user's alone). Applying twice changes nothing the
// second time.
//
// A filesystem without ACLs fails with ErrNoACL.
func Apply(root string, ids IDs) (Stats, error) {
	if err := ids.Check(); err != nil {
		return Stats{}, err
	}
	t0 := time.Now()
	a := &applier{ids: ids, root: root}
	err := walk(root, a)
	a.stats.Duration = time.Since(t0)
	if err != nil {
		return a.stats, fmt.Errorf("share %s with the agent: %w", root, aclError(root, err))
	}
	return a.stats, nil
}

// ApplyAll is Apply for a tree no git of the user's ever reads (the
// conversation's git view, which ohd's own git also writes in): every
// directory's default ACL gives the agent rwx too, so what any of them
// makes there stays writable by the other.
func ApplyAll(root string, ids IDs) (Stats, error) {
	if err := ids.Check(); err != nil {
		return Stats{}, err
	}
	t0 := time.Now()
	a := &applier{ids: ids, root: root, agentDefault: true}
	err := walk(root, a)
	a.stats.Duration = time.Since(t0)
	if err != nil {
		return a.stats, fmt.Errorf("share %s with the agent: %w", root, aclError(root, err))
	}
	return a.stats, nil
}

type applier struct {
	ids  IDs
	root string
	// agentDefault gives directories the agent's default entry too
	// (ShareDir).
	agentDefault bool
	stats        Stats
	buf          []byte
}

func (a *applier) dir(e entry, fd int) (bool, error) {
	if e.name == ".git" {
		return false, nil
	}
	a.stats.Dirs++
	want := shared(e.st.Mode, nil, uint32(a.ids.Owner), uint32(a.ids.Agent), permR|permW|permX)
	old, err := a.get(func(b []byte) (int, error) { return unix.Fgetxattr(fd, xattrAccess, b) })
	if err != nil {
		return false, pathError("read the ACL of", a.root, e, err)
	}
	if !covers(old, a.ids, permR|permW|permX) {
		want = shared(e.st.Mode, old, uint32(a.ids.Owner), uint32(a.ids.Agent), permR|permW|permX)
		if err := unix.Fsetxattr(fd, xattrAccess, want.encode(), 0); err != nil {
			return false, pathError("set the ACL of", a.root, e, err)
		}
		a.stats.Changed++
	}
	oldDef, err := a.get(func(b []byte) (int, error) { return unix.Fgetxattr(fd, xattrDefault, b) })
	if err != nil {
		return false, pathError("read the default ACL of", a.root, e, err)
	}
	var def acl
	switch {
	case a.agentDefault && !covers(oldDef, a.ids, permR|permW|permX):
		// New inodes get the owner and other classes of the directory,
		// the group class of its group entry, and both users.
		def = shared(e.st.Mode|0o700, oldDef, uint32(a.ids.Owner), uint32(a.ids.Agent), permR|permW|permX)
	case !a.agentDefault && !(agentFree(oldDef, a.ids) && coversOwner(oldDef, a.ids)):
		def = defaultACL(e.st.Mode, oldDef, a.ids)
	}
	if def != nil {
		if err := unix.Fsetxattr(fd, xattrDefault, def.encode(), 0); err != nil {
			return false, pathError("set the default ACL of", a.root, e, err)
		}
	}
	return true, nil
}

func (a *applier) wants(string) bool { return true }

func (a *applier) file(e entry) error {
	if !e.isRegular() || e.name == ".git" {
		return nil // symlinks carry no ACL; a .git file is the user's pointer
	}
	a.stats.Files++
	perm := uint16(permR | permW)
	if e.st.Mode&0o100 != 0 {
		perm |= permX
	}
	p := e.procPath()
	old, err := a.get(func(b []byte) (int, error) { return unix.Lgetxattr(p, xattrAccess, b) })
	if err != nil {
		return pathError("read the ACL of", a.root, e, err)
	}
	if covers(old, a.ids, perm) {
		return nil
	}
	want := shared(e.st.Mode, old, uint32(a.ids.Owner), uint32(a.ids.Agent), perm)
	if err := unix.Lsetxattr(p, xattrAccess, want.encode(), 0); err != nil {
		return pathError("set the ACL of", a.root, e, err)
	}
	a.stats.Changed++
	return nil
}

// get reads an ACL attribute with read; none is a nil ACL.
func (a *applier) get(read func([]byte) (int, error)) (acl, error) {
	return getACL(&a.buf, read)
}

func getACL(buf *[]byte, read func([]byte) (int, error)) (acl, error) {
	if *buf == nil {
		*buf = make([]byte, 512)
	}
	for {
		n, err := read(*buf)
		switch {
		case errors.Is(err, unix.ENODATA):
			return nil, nil
		case errors.Is(err, unix.ERANGE):
			*buf = make([]byte, 2*len(*buf))
			continue
		case err != nil:
			return nil, err
		}
		return decodeACL((*buf)[:n])
	}
}

// covers reports whether a already grants owner and agent perm through
// named entries and its mask.
func covers(a acl, ids IDs, perm uint16) bool {
	if a == nil {
		return false
	}
	mask, ok := a.get(tagMask, 0)
	if !ok || mask.perm&perm != perm {
		return false
	}
	for _, id := range []int{ids.Owner, ids.Agent} {
		e, ok := a.get(tagUser, uint32(id))
		if !ok || e.perm&perm != perm {
			return false
		}
	}
	return true
}

// coversOwner reports whether a grants the owner rwx through a named entry
// and its mask.
func coversOwner(a acl, ids IDs) bool {
	mask, ok := a.get(tagMask, 0)
	e, ok2 := a.get(tagUser, uint32(ids.Owner))
	return ok && ok2 && mask.perm&7 == 7 && e.perm&7 == 7
}

// aclError names the fix when the filesystem refuses ACLs.
func aclError(path string, err error) error {
	if errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("%w: %s is on a filesystem without POSIX ACLs (%v)", ErrNoACL, path, err)
	}
	return err
}

// ReadOnly leaves the agent only reading (and, a directory, searching)
// the one inode at path (nothing below it; a symlink is not followed and
// has no ACL): for a pointer the user's git follows, such as a worktree's
// .git file, that sits in a shared directory and inherited write access
// for the agent from its default ACL.
func ReadOnly(path string, ids IDs) error {
	if err := ids.Check(); err != nil {
		return err
	}
	st, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("make %s read-only to the agent: %w", path, err)
	}
	if st.Mode()&os.ModeSymlink != 0 {
		return nil
	}
	var buf []byte
	old, err := getACL(&buf, func(b []byte) (int, error) { return unix.Lgetxattr(path, xattrAccess, b) })
	if err != nil {
		return fmt.Errorf("make %s read-only to the agent: %w", path, aclError(path, err))
	}
	mode := uint32(st.Mode().Perm())
	a := shared(mode, old, uint32(ids.Owner), uint32(ids.Agent), uint16(mode>>6)&7)
	for i, e := range a {
		if e.tag == tagUser && e.id == uint32(ids.Agent) {
			a[i].perm &= permR | permX
		}
	}
	if err := unix.Lsetxattr(path, xattrAccess, a.encode(), 0); err != nil {
		return fmt.Errorf("make %s read-only to the agent: %w", path, err)
	}
	return nil
}
