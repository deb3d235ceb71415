package workdir

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/ohd-dev/ohd/pkg/gitboundary"
	"golang.org/x/sys/unix"
)

// Errors of Make, tested with errors.Is.
var (
	// ErrOutsideRoots: the path is not inside any allowed root.
	ErrOutsideRoots = errors.New("outside the allowed workspace roots")
	// ErrSymlink: a component below the root is a symlink or not a
	// directory.
	ErrSymlink = errors.New("a component is a symbolic link or not a directory")
)

// Made records the directories Make created, outermost first.
type Made struct {
	root string
	rel  []string // components from root to the first created directory's parent
	made []string // created components, outermost first
}

// Created returns the created directories (absolute), outermost first.
func (m *Made) Created() []string {
	if m == nil {
		return nil
	}
	var out []string
	p := filepath.Join(append([]string{m.root}, m.rel...)...)
	for _, c := range m.made {
		p = filepath.Join(p, c)
		out = append(out, p)
	}
	return out
}

// Inside returns the root among roots that strictly contains path, or "".
func Inside(path string, roots []string) string {
	for _, r := range roots {
		r = filepath.Clean(r)
		if r == "/" {
			continue // "/" as a root would allow anything
		}
		if strings.HasPrefix(path, r+"/") {
			return r
		}
	}
	return ""
}

// Make creates the missing directories of path, which must lie strictly
// inside one of roots; see the package comment. An existing path is not
// an error (nothing is made). The error names the flag that adds roots.
func Make(path string, roots []string) (*Made, error) {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return nil, fmt.Errorf("make working directory %q: not an absolute, clean path", path)
	}
	root := Inside(path, roots)
	if root == "" {
		allowed := "none"
		if len(roots) > 0 {
			allowed = strings.Join(roots, ", ")
		}
		return nil, fmt.Errorf("working_dir %s does not exist, and it is %w (%s): ohd creates a missing working_dir only under the upstream's home or a directory given with ohd serve --workspace-root DIR; create the directory first, or add a root", path, ErrOutsideRoots, allowed)
	}
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("make working directory %s: open root %s: %w", path, root, err)
	}
	defer func() { unix.Close(fd) }()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("make working directory %s: %w", path, err)
	}
	uid, gid := ownerOf(fd, &st)
	m := &Made{root: root}
	comps := strings.Split(strings.TrimPrefix(path, root+"/"), "/")
	for i, c := range comps {
		created := false
		next, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			if err := unix.Mkdirat(fd, c, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				m.Undo()
				return nil, fmt.Errorf("make working directory %s: mkdir %s: %w", path, filepath.Join(append([]string{root}, comps[:i+1]...)...), err)
			} else if err == nil {
				if len(m.made) == 0 {
					m.rel = append([]string(nil), comps[:i]...)
				}
				m.made = append(m.made, c)
				created = true
				if err := unix.Fchownat(fd, c, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
					m.Undo()
					return nil, fmt.Errorf("make working directory %s: give %s to %d:%d (the owner of its parent): %w", path, c, uid, gid, err)
				}
			}
			next, err = unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		}
		if err != nil {
			m.Undo()
			if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
				return nil, fmt.Errorf("make working directory %s: %s: %w: ohd never creates through a symlink; give the real path", path, filepath.Join(append([]string{root}, comps[:i+1]...)...), ErrSymlink)
			}
			return nil, fmt.Errorf("make working directory %s: open %s: %w", path, c, err)
		}
		if !created {
			// An existing directory: its owner is the nearest existing
			// ancestor's of what comes next.
			if err := unix.Fstat(next, &st); err == nil {
				uid, gid = ownerOf(next, &st)
			}
		}
		unix.Close(fd)
		fd = next
	}
	return m, nil
}

// Undo removes the directories Make created, innermost first, each only
// if still empty, walking again from the root without following links.
// It is safe on a nil Made.
func (m *Made) Undo() {
	if m == nil || len(m.made) == 0 {
		return
	}
	for n := len(m.made); n > 0; n-- {
		comps := append(append([]string(nil), m.rel...), m.made[:n-1]...)
		fd, err := unix.Open(m.root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return
		}
		ok := true
		for _, c := range comps {
			next, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			unix.Close(fd)
			if err != nil {
				ok = false
				break
			}
			fd = next
		}
		if !ok {
			return
		}
		err = unix.Unlinkat(fd, m.made[n-1], unix.AT_REMOVEDIR)
		unix.Close(fd)
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return // not empty any more: keep it and its parents
		}
	}
	m.made = nil
}

// ownerOf is the owner of the directory open as fd (stat st): for one a
// live conversation's agent has borrowed (gitboundary.Borrow), the
// user's it was, so nothing ohd makes there becomes the agent's.
func ownerOf(fd int, st *unix.Stat_t) (int, int) {
	if uid, gid, ok := gitboundary.LentBy(fd); ok {
		return uid, gid
	}
	return int(st.Uid), int(st.Gid)
}
