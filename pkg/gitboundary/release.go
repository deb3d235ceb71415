package gitboundary

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ohd-dev/ohd/pkg/failpoint"
	"golang.org/x/sys/unix"
)

// ReleaseOptions say how Release ends the sharing of a tree.
type ReleaseOptions struct {
	IDs
	// KeptDir receives the agent's git directories, each under its path
	// relative to the tree (required; made 0700 when something is moved).
	// It must be outside the tree.
	KeptDir string
	// MoveOnly only moves the agent's git directories out: for a tree that
	// is deleted next (a worktree), where owners and ACLs do not matter.
	MoveOnly bool
}

// ReleaseResult says what Release did.
type ReleaseResult struct {
	// Moved are the agent's git directories moved out, relative to the
	// tree, each now at the same relative path under KeptDir (a name
	// taken already gets a suffix .1, .2, ...): those of this run and of
	// every earlier run into the same KeptDir (a run killed midway), read
	// from the journal KeptDir+".journal".
	Moved []string
	// Owned counts the inodes given back to the owner.
	Owned int
	Stats
}

// Release ends the sharing of the tree at root, after the agent has
// stopped: it moves every git directory the agent made (see FindGitDirs:
// a .git of the agent's, an implicit bare repository it made or filled)
// out of the tree into opts.KeptDir, gives every directory lent to the
// agent (Borrow) back as it was, gives every inode the agent owns to
// the owner (uid and gid), and removes the owner's and the agent's ACL
// entries (a default ACL left with no named entry goes; an access ACL
// left minimal is folded into the mode with the group's permission
// masked, so nobody gains one). Nothing is deleted and no symlink is
// followed.
//
// Release is idempotent: a run killed midway (failpoint
// "release/mid-move") is finished by the next; a move is a rename, or
// across filesystems a copy renamed into place before the source goes, and
// a destination that exists is never overwritten. A root that does not
// exist is nothing to release.
func Release(root string, opts ReleaseOptions) (ReleaseResult, error) {
	if err := opts.Check(); err != nil {
		return ReleaseResult{}, err
	}
	if opts.KeptDir == "" || !filepath.IsAbs(opts.KeptDir) {
		return ReleaseResult{}, fmt.Errorf("release %s: KeptDir %q is not an absolute path", root, opts.KeptDir)
	}
	if rel, err := filepath.Rel(root, opts.KeptDir); err == nil && filepath.IsLocal(rel) {
		return ReleaseResult{}, fmt.Errorf("release %s: KeptDir %s is inside the tree", root, opts.KeptDir)
	}
	t0 := time.Now()
	r := &releaser{opts: opts, root: root}
	err := walk(root, r)
	r.res.Duration = time.Since(t0)
	if r.journal != nil {
		if cerr := r.journal.Close(); err == nil {
			err = cerr
		}
	}
	if moved, jerr := readJournal(opts.KeptDir + ".journal"); jerr == nil {
		r.res.Moved = moved
	} else if err == nil {
		err = jerr
	}
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Lstat(root); errors.Is(serr, fs.ErrNotExist) {
			return r.res, nil
		}
	}
	if err != nil {
		return r.res, fmt.Errorf("release %s from the agent: %w", root, err)
	}
	return r.res, nil
}

type releaser struct {
	opts    ReleaseOptions
	root    string
	res     ReleaseResult
	buf     []byte
	journal *os.File
}

func (r *releaser) agent(st *unix.Stat_t) bool { return st.Uid == uint32(r.opts.Agent) }

func (r *releaser) dir(e entry, fd int) (bool, error) {
	if e.name == ".git" && e.rel != "." {
		if r.agent(&e.st) {
			return false, r.move(e.dirfd, e.name, e.rel)
		}
		return false, nil // the user's git directory: never shared, nothing to undo
	}
	if b, ok := borrowedFd(fd); ok {
		// A directory of the user's lent to the agent (Borrow): it is
		// the user's again, owner, mode and ACLs, before anything in it
		// is judged the agent's.
		if err := giveBack(fd, b); err != nil {
			return false, pathError("give back", r.root, e, err)
		}
		r.res.Owned++
		e.st.Uid, e.st.Gid = uint32(b.uid), uint32(b.gid)
	}
	if kind, agent, ok := bareRepo(fd, e, uint32(r.opts.Agent)); ok && agent {
		switch {
		case kind == KindBare && e.rel != ".":
			return false, r.move(e.dirfd, e.name, e.rel)
		default:
			// The agent filled a directory of the user's: its parts go,
			// the directory and the user's files in it stay.
			for _, part := range bareParts {
				var st unix.Stat_t
				if unix.Fstatat(fd, part, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || !r.agent(&st) {
					continue
				}
				if err := r.move(fd, part, filepath.Join(e.rel, part)); err != nil {
					return false, err
				}
			}
		}
	}
	if r.opts.MoveOnly {
		return true, nil
	}
	r.res.Dirs++
	if r.agent(&e.st) {
		if err := unix.Fchown(fd, r.opts.Owner, r.opts.OwnerGID); err != nil {
			return false, pathError("chown", r.root, e, err)
		}
		r.res.Owned++
	}
	for _, name := range []string{xattrAccess, xattrDefault} {
		changed, err := r.strip(e, name,
			func(b []byte) (int, error) { return unix.Fgetxattr(fd, name, b) },
			func(b []byte) error { return unix.Fsetxattr(fd, name, b, 0) },
			func() error { return unix.Fremovexattr(fd, name) })
		if err != nil {
			return false, err
		}
		if changed {
			r.res.Changed++
		}
	}
	return true, nil
}

func (r *releaser) wants(name string) bool { return !r.opts.MoveOnly || name == ".git" }

func (r *releaser) file(e entry) error {
	if e.name == ".git" && r.agent(&e.st) {
		return r.move(e.dirfd, e.name, e.rel)
	}
	if r.opts.MoveOnly {
		return nil
	}
	r.res.Files++
	if r.agent(&e.st) {
		if err := unix.Fchownat(e.dirfd, e.name, r.opts.Owner, r.opts.OwnerGID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return pathError("chown", r.root, e, err)
		}
		r.res.Owned++
	}
	if !e.isRegular() {
		return nil
	}
	p := e.procPath()
	changed, err := r.strip(e, xattrAccess,
		func(b []byte) (int, error) { return unix.Lgetxattr(p, xattrAccess, b) },
		func(b []byte) error { return unix.Lsetxattr(p, xattrAccess, b, 0) },
		func() error { return unix.Lremovexattr(p, xattrAccess) })
	if changed {
		r.res.Changed++
	}
	return err
}

// strip removes the owner's and the agent's entries from one ACL
// attribute.
func (r *releaser) strip(e entry, name string, get func([]byte) (int, error), set func([]byte) error, remove func() error) (bool, error) {
	old, err := getACL(&r.buf, get)
	if err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			return false, nil // no ACLs here: nothing was shared
		}
		return false, pathError("read the ACL of", r.root, e, err)
	}
	a, changed := old.without(uint32(r.opts.Owner), uint32(r.opts.Agent))
	if !changed {
		return false, nil
	}
	if name == xattrDefault && a.minimal() {
		err = remove()
	} else {
		// A minimal access ACL is folded into the mode by the kernel.
		err = set(a.encode())
	}
	if err != nil {
		return false, pathError("set the ACL of", r.root, e, err)
	}
	return true, nil
}

// move moves the entry name of the directory dirfd (rel in the tree) to
// the same relative path under KeptDir, never over something there.
func (r *releaser) move(dirfd int, name, rel string) error {
	if !filepath.IsLocal(rel) {
		return fmt.Errorf("move %s out: not a path inside the tree", rel)
	}
	dst := filepath.Join(r.opts.KeptDir, rel)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fmt.Errorf("move %s out: %w", filepath.Join(r.root, rel), err)
	}
	dst = freeName(dst)
	// The journal names the move before it happens, so what a killed run
	// moved is reported by the next.
	if err := r.note(rel); err != nil {
		return fmt.Errorf("move %s out: %w", filepath.Join(r.root, rel), err)
	}
	err := unix.Renameat(dirfd, name, unix.AT_FDCWD, dst)
	if errors.Is(err, unix.EXDEV) {
		err = copyOut(dirfd, name, dst)
	}
	if err != nil {
		return fmt.Errorf("move %s out to %s: %w", filepath.Join(r.root, rel), dst, err)
	}
	failpoint.Hit("release/mid-move")
	return nil
}

// note appends rel to the journal, synced.
func (r *releaser) note(rel string) error {
	if r.journal == nil {
		f, err := os.OpenFile(r.opts.KeptDir+".journal", os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		r.journal = f
	}
	if _, err := r.journal.WriteString(strconv.Quote(rel) + "\n"); err != nil {
		return err
	}
	return r.journal.Sync()
}

// readJournal returns the paths a journal names, each once, in order; no
// journal is none. A torn last line (a kill mid-write) is skipped.
func readJournal(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	seen := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		rel, err := strconv.Unquote(line)
		if err != nil || seen[rel] {
			continue
		}
		seen[rel] = true
		out = append(out, rel)
	}
	return out, nil
}

// freeName returns p, or p.1, p.2, ... whichever does not exist.
func freeName(p string) string {
	for i := 0; ; i++ {
		c := p
		if i > 0 {
			c = p + "." + strconv.Itoa(i)
		}
		if _, err := os.Lstat(c); errors.Is(err, fs.ErrNotExist) {
			return c
		}
	}
}

// copyOut copies the entry name of dirfd to dst (through dst.partial,
// renamed into place when complete), then removes the source. Symlinks are
// copied as symlinks, never followed.
func copyOut(dirfd int, name, dst string) error {
	src := "/proc/self/fd/" + strconv.Itoa(dirfd) + "/" + name
	tmp := dst + ".partial"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(tmp, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.Mkdir(to, info.Mode().Perm()|0o700)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.Type().IsRegular():
			return copyFile(p, to, info.Mode().Perm())
		}
		return nil // sockets, fifos, devices: nothing git keeps
	})
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	return os.RemoveAll(src)
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm|0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
