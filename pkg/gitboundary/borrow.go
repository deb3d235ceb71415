package gitboundary

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Borrowed directories. git checks a repository's directories, not its
// files: a directory the user owns and the agent may write can be filled
// with HEAD, objects/ and refs/ as an implicit bare repository, and the
// user's `git log` there opens it (the directory is the user's, so the
// ownership check passes) and runs what its config names. Measured (git
// 2.39, uid 1000 the user, 10001 the agent): with the directory the
// user's, `git log` there ran the agent's gpg.program; with the same
// directory owned by 10001, it refused ("dubious ownership") and ran
// nothing, and the user's git at the repository's root and in the
// directory (which it reaches by discovery from the root's .git) went on
// working. git checks only a repository's work tree and git dir, never a
// directory between them.
//
// So while a conversation lives, every directory of the user's in its tree
// (but a work tree's root: one holding a .git that is not the agent's) is
// lent to the agent's uid: its owner is the agent, the user keeps full
// access through the ACL entry Apply gives them, and its original owner,
// group and mode are kept in a trusted.* extended attribute, which only a
// process with CAP_SYS_ADMIN (ohd as root, never the agent) can read or
// write. Release gives each back exactly; FindGitDirs and Release treat a
// borrowed directory as the user's, so its files are never moved out with
// an agent's repository.
//
// A directory the user makes in the tree while the conversation runs is
// the user's (Linux has no way to make a new directory's owner someone
// else) until the watcher (Watch) or the next Borrow lends it; meanwhile
// the agent cannot write in it, since the default ACLs give it nothing
// (defaultACL; Borrow drops the agent's default entry wherever it finds
// one, such as a worktree's checkout inherited from ShareDir).

// xattrBorrowed holds a borrowed directory's original "uid:gid:mode"
// (decimal uid and gid, octal mode with its special bits);
// xattrBorrowedACL and xattrBorrowedDefault its original access and
// default ACLs, when it had them (the raw system.posix_acl_* values).
const (
	xattrBorrowed        = "trusted.ohd.borrowed"
	xattrBorrowedACL     = "trusted.ohd.borrowed.acl"
	xattrBorrowedDefault = "trusted.ohd.borrowed.default"
)

// borrowing is a borrowed directory's original owner, group and mode.
type borrowing struct {
	uid, gid int
	mode     uint32
}

func (b borrowing) encode() []byte {
	return []byte(fmt.Sprintf("%d:%d:%o", b.uid, b.gid, b.mode))
}

func decodeBorrowing(s string) (borrowing, bool) {
	f := strings.Split(s, ":")
	if len(f) != 3 {
		return borrowing{}, false
	}
	uid, err1 := strconv.Atoi(f[0])
	gid, err2 := strconv.Atoi(f[1])
	mode, err3 := strconv.ParseUint(f[2], 8, 32)
	if err1 != nil || err2 != nil || err3 != nil || uid < 0 || gid < 0 {
		return borrowing{}, false
	}
	return borrowing{uid: uid, gid: gid, mode: uint32(mode) & 0o7777}, true
}

// rawXattr reads the attribute name of fd; ok is false when it has none
// (or it cannot be read: a trusted.* one without CAP_SYS_ADMIN).
func rawXattr(fd int, name string) ([]byte, bool, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Fgetxattr(fd, name, buf)
		switch {
		case errors.Is(err, unix.ERANGE):
			buf = make([]byte, 2*len(buf))
			continue
		case errors.Is(err, unix.ENODATA), errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
			return nil, false, nil
		case err != nil:
			return nil, false, err
		}
		return buf[:n], true, nil
	}
}

// borrowedFd reads the borrowing of the directory open as fd; ok is false
// when it is not borrowed (or the record cannot be read: not root).
func borrowedFd(fd int) (borrowing, bool) {
	v, ok, err := rawXattr(fd, xattrBorrowed)
	if err != nil || !ok {
		return borrowing{}, false
	}
	return decodeBorrowing(string(v))
}

// LentBy returns the owner and group of the directory open as fd as they
// were before Borrow lent it to an agent; ok is false when it is not lent.
func LentBy(fd int) (uid, gid int, ok bool) {
	b, ok := borrowedFd(fd)
	return b.uid, b.gid, ok
}

// OwnerOf returns the owner and group of path (following symlinks, as
// stat does), or, for a directory lent to an agent (Borrow), its own
// owner's: what ohd must take for the user's whatever conversation has it.
func OwnerOf(path string) (uid, gid int, err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, 0, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			b, ok := borrowedFd(fd)
			unix.Close(fd)
			if ok {
				return b.uid, b.gid, nil
			}
		}
	}
	return int(st.Uid), int(st.Gid), nil
}

// Borrow lends every directory of the owner's in the tree at root to the
// agent's uid (see above), but a work tree's root (a directory holding a
// .git that is not the agent's: the user's git there checks that
// directory's owner) and what is below a .git directory. Directories of
// other users are left as they are (the user's git refuses them anyway).
// It runs before Apply, so what it records is the directory as the user
// had it. Borrowing twice changes nothing the second time; Release gives
// every borrowed directory back. It stats directories and .git entries
// only.
//
// A filesystem that holds no trusted.* attribute fails with ErrNoACL.
func Borrow(root string, ids IDs) (Stats, error) {
	if err := ids.Check(); err != nil {
		return Stats{}, err
	}
	t0 := time.Now()
	b := &borrower{ids: ids, root: root}
	err := walk(root, b)
	b.stats.Duration = time.Since(t0)
	if err != nil {
		return b.stats, fmt.Errorf("lend the directories of %s to the agent: %w", root, aclError(root, err))
	}
	return b.stats, nil
}

type borrower struct {
	ids   IDs
	root  string
	stats Stats
}

func (b *borrower) wants(string) bool { return false }
func (b *borrower) file(entry) error  { return nil }

func (b *borrower) dir(e entry, fd int) (bool, error) {
	if e.name == ".git" && e.rel != "." {
		return false, nil
	}
	b.stats.Dirs++
	if err := b.lend(e, fd); err != nil {
		return false, err
	}
	// Every directory of the tree (lent, the agent's, a work tree's
	// root) loses the agent's default entry, if it has one (a worktree's
	// checkout inherits it from ShareDir): what the user makes in it is
	// not the agent's to write until ohd shares it (defaultACL). After
	// the record of a lent directory, which keeps what the user had.
	if err := dropAgentDefault(fd, b.ids); err != nil {
		return false, pathError("set the default ACL of", b.root, e, err)
	}
	return true, nil
}

// dropAgentDefault takes the agent's entry out of the default ACL of the
// directory open as fd, and write from its other class (withoutAgent).
func dropAgentDefault(fd int, ids IDs) error {
	var buf []byte
	def, err := getACL(&buf, func(p []byte) (int, error) { return unix.Fgetxattr(fd, xattrDefault, p) })
	if err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			return nil
		}
		return err
	}
	if def, changed := withoutAgent(def, ids); changed {
		return unix.Fsetxattr(fd, xattrDefault, def.encode(), 0)
	}
	return nil
}

// lend lends the directory e (open as fd) to the agent, when it is the
// owner's and no work tree's root.
func (b *borrower) lend(e entry, fd int) error {
	if e.st.Uid != uint32(b.ids.Owner) {
		return nil
	}
	var g unix.Stat_t
	if err := unix.Fstatat(fd, ".git", &g, unix.AT_SYMLINK_NOFOLLOW); err == nil && g.Uid != uint32(b.ids.Agent) {
		return nil // a work tree's root: the user's git checks its owner
	}
	if _, ok := borrowedFd(fd); !ok {
		// The ACLs first, the record that says the directory is borrowed
		// last: a record is only ever complete.
		for _, a := range [][2]string{{xattrAccess, xattrBorrowedACL}, {xattrDefault, xattrBorrowedDefault}} {
			v, ok, err := rawXattr(fd, a[0])
			if err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
				return pathError("read the ACL of", b.root, e, err)
			}
			if ok {
				if err := unix.Fsetxattr(fd, a[1], v, 0); err != nil {
					return pathError("record the ACL of", b.root, e, err)
				}
			} else if err := unix.Fremovexattr(fd, a[1]); err != nil && !errors.Is(err, unix.ENODATA) {
				return pathError("record the ACL of", b.root, e, err)
			}
		}
		orig := borrowing{uid: int(e.st.Uid), gid: int(e.st.Gid), mode: e.st.Mode & 0o7777}
		if err := unix.Fsetxattr(fd, xattrBorrowed, orig.encode(), 0); err != nil {
			return pathError("record the owner of", b.root, e, err)
		}
	}
	if err := unix.Fchown(fd, b.ids.Agent, -1); err != nil {
		return pathError("lend", b.root, e, err)
	}
	b.stats.Changed++
	return nil
}

// giveBack returns the borrowed directory open as fd to its owner, group,
// mode and ACLs as they were when it was borrowed, and drops the record
// (last, so a run killed midway is finished by the next).
func giveBack(fd int, b borrowing) error {
	if err := unix.Fchown(fd, b.uid, b.gid); err != nil {
		return err
	}
	for _, a := range [][2]string{{xattrAccess, xattrBorrowedACL}, {xattrDefault, xattrBorrowedDefault}} {
		v, ok, err := rawXattr(fd, a[1])
		if err != nil {
			return err
		}
		if ok {
			err = unix.Fsetxattr(fd, a[0], v, 0)
		} else {
			err = unix.Fremovexattr(fd, a[0])
		}
		if err != nil && !errors.Is(err, unix.ENODATA) && !errors.Is(err, unix.EOPNOTSUPP) {
			return err
		}
	}
	// The mode last: its group bits are the mask of the ACL just set (as
	// they were), its special bits (setgid, sticky) what no ACL holds.
	if err := unix.Fchmod(fd, b.mode); err != nil {
		return err
	}
	for _, name := range []string{xattrBorrowedACL, xattrBorrowedDefault, xattrBorrowed} {
		if err := unix.Fremovexattr(fd, name); err != nil && !errors.Is(err, unix.ENODATA) {
			return err
		}
	}
	return nil
}
