package gitboundary

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// entry is what the walk knows of one directory entry: its name, its
// directory's file descriptor (every operation is relative to it and never
// follows a symlink) and its lstat.
type entry struct {
	dirfd int
	rel   string // path relative to the walk's root, "." for the root
	name  string
	st    unix.Stat_t
}

func (e entry) isDir() bool     { return e.st.Mode&unix.S_IFMT == unix.S_IFDIR }
func (e entry) isRegular() bool { return e.st.Mode&unix.S_IFMT == unix.S_IFREG }

// procPath names the entry through its directory's descriptor, for the
// calls that take only a path (lgetxattr, lsetxattr): the directory is the
// one the walk opened, whatever was renamed meanwhile, and the l-calls do
// not follow a symlink in the last component.
func (e entry) procPath() string {
	return "/proc/self/fd/" + strconv.Itoa(e.dirfd) + "/" + e.name
}

// visit is called for every entry; for a directory, descend says whether
// to walk into it, and fd (valid only during the call) is the directory
// opened without following a symlink.
type visitor interface {
	// file is called for every entry that is not a directory.
	file(e entry) error
	// dir is called for a directory with its own descriptor; it returns
	// whether to walk into it.
	dir(e entry, fd int) (descend bool, err error)
	// wants reports whether file must see the entry name that is no
	// directory: the walk skips the others without a stat.
	wants(name string) bool
}

// walk visits root (a directory, not followed if a symlink) and everything
// below it, one getdents and one fstatat per entry, never following a
// symlink and never leaving root's filesystem. Directories named .git are
// passed to the visitor, which decides whether to descend.
func walk(root string, v visitor) error {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: root, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return &os.PathError{Op: "stat", Path: root, Err: err}
	}
	parent, err := unix.Open(filepath.Dir(root), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(fd)
		return &os.PathError{Op: "open", Path: filepath.Dir(root), Err: err}
	}
	defer unix.Close(parent)
	e := entry{dirfd: parent, rel: ".", name: filepath.Base(root), st: st}
	return walkDir(root, e, fd, st.Dev, v)
}

// walkDir visits the directory e (open as fd, which it closes) and its
// entries.
func walkDir(root string, e entry, fd int, dev uint64, v visitor) error {
	defer unix.Close(fd)
	descend, err := v.dir(e, fd)
	if err != nil || !descend {
		return err
	}
	// ReadDir closes the *os.File, which would close fd: read through a
	// duplicate.
	dup, err := unix.Dup(fd)
	if err != nil {
		return &os.PathError{Op: "dup", Path: filepath.Join(root, e.rel), Err: err}
	}
	f := os.NewFile(uintptr(dup), filepath.Join(root, e.rel))
	ents, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, de := range ents {
		name := de.Name()
		if !de.IsDir() && !v.wants(name) {
			continue // known from the directory entry's type alone
		}
		c := entry{dirfd: fd, rel: filepath.Join(e.rel, name), name: name}
		if err := unix.Fstatat(fd, name, &c.st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // gone meanwhile
			}
			return &os.PathError{Op: "stat", Path: filepath.Join(root, c.rel), Err: err}
		}
		if !c.isDir() {
			if err := v.file(c); err != nil {
				return err
			}
			continue
		}
		if c.st.Dev != dev {
			continue // a mount point: another filesystem, not this tree's
		}
		cfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
				continue // replaced meanwhile
			}
			return &os.PathError{Op: "open", Path: filepath.Join(root, c.rel), Err: err}
		}
		if err := walkDir(root, c, cfd, dev, v); err != nil {
			return err
		}
	}
	return nil
}

// pathError wraps a failed call on an entry with its path under root.
func pathError(op, root string, e entry, err error) error {
	return fmt.Errorf("%s %s: %w", op, filepath.Join(root, e.rel), err)
}
