package worktree

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ohd-dev/ohd/pkg/worktree/admindir"
)

// Mount is a bind mount for the conversation's container. Source always
// equals Target: the container sees every path at its host path.
type Mount struct {
	Source, Target string
	ReadOnly       bool
}

// MountPlan returns the bind mounts that make wt resolve inside a
// container exactly as on the host, parents before children. With a git
// view (wt.View set), the container never writes the host repository:
//
//	<Path>                          read-write  the worktree
//	<CommonDir>      <- <View>      read-write  the conversation's own git dir
//	<CommonDir>/hooks               read-only   the repository's hooks, if any
//	<Root>/<id>/.ohd/objects <- <CommonDir>/objects
//	                                read-only   the real object store, the
//	                                            view's alternate
//	<Path>/.git, submodules         read-only   the pointers the user's git
//	                                            follows, and the directories
//	                                            holding them pinned (see
//	                                            pointers.go)
//
// Without a view (a worktree created before views existed, until its
// container is next started: see SeedView), the layout of old:
//
//	<Path>                          read-write
//	<CommonDir>                     read-only
//	<CommonDir>/logs                read-write
//	<CommonDir>/objects             read-write
//	<CommonDir>/refs                read-write
//	<CommonDir>/worktrees/<AdminID> read-write
//
// Every source exists on the host when MountPlan returns, is a real
// directory (not a symlink) and is canonical. Call it after Add and before
// creating the container, and again before each container (re)start.
func (m *Manager) MountPlan(wt Worktree) ([]Mount, error) {
	if err := m.checkWorktree(wt); err != nil {
		return nil, fmt.Errorf("worktree mount plan: %w", err)
	}
	// With a view the host's registration is not mounted, and
	// <Path>/.git is mounted read-only (the user's git on the host
	// follows it: see pointers.go) but need not point at it: neither may
	// stop the work being saved in a sandbox, nor the container
	// starting, since a removal interrupted after it deleted the
	// registration must still finish. `ohctl doctor` checks the host's
	// side.
	if wt.View == "" && !wt.InPlace && (!admindir.DotGitPointsAt(wt.Path, wt.AdminDir) || !admindir.PointsAt(wt.AdminDir, wt.Path)) {
		return nil, fmt.Errorf("worktree mount plan %s: %w: its .git file and %s/gitdir do not point at each other: check `ohctl doctor`, or remove and recreate the conversation", wt.Path, ErrInvalidWorktree, wt.AdminDir)
	}
	var mounts []Mount
	if wt.InPlace {
		return m.inPlaceMounts(wt)
	}
	if wt.View != "" {
		_, alt := viewPaths(wt.Path)
		mounts = []Mount{
			{Source: wt.Path, Target: wt.Path},
			{Source: wt.View, Target: wt.CommonDir},
			{Source: filepath.Join(wt.CommonDir, "objects"), Target: alt, ReadOnly: true},
		}
		if hv := hostViewPath(wt); dirExistsNoFollow(hv) {
			mounts = append(mounts, Mount{Source: hv, Target: hv, ReadOnly: true})
		}
		hooks := filepath.Join(wt.CommonDir, "hooks")
		if st, err := os.Lstat(hooks); err == nil && st.IsDir() {
			mounts = append(mounts, Mount{Source: hooks, Target: hooks, ReadOnly: true})
		}
	} else {
		mounts = []Mount{
			{Source: wt.Path, Target: wt.Path},
			{Source: wt.CommonDir, Target: wt.CommonDir, ReadOnly: true},
			{Source: wt.AdminDir, Target: wt.AdminDir},
		}
		for _, name := range []string{"objects", "refs", "logs"} {
			p := filepath.Join(wt.CommonDir, name)
			if err := m.ensureDir(p, wt.UID, wt.GID); err != nil {
				return nil, fmt.Errorf("worktree mount plan %s: %w", wt.Path, err)
			}
			mounts = append(mounts, Mount{Source: p, Target: p})
		}
	}
	for _, mt := range mounts {
		if err := checkMountSource(mt.Source); err != nil {
			return nil, fmt.Errorf("worktree mount plan %s: %w", wt.Path, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(wt.CommonDir, "objects", "info", "alternates")); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		// The repository's own alternates are not mounted: git in the
		// container will not find objects stored only there.
		m.log.Warn("repository uses objects/info/alternates; those object stores are not mounted into the container",
			"common_dir", wt.CommonDir)
	}
	// The pointers the user's git on the host follows into the worktree
	// and its submodules (pointers.go); the host's admin dir holds the
	// index that git reads.
	ptrs, err := m.workTreePointers(wt.Path, wt.AdminDir, wt.UID, wt.GID)
	if err != nil {
		return nil, fmt.Errorf("worktree mount plan %s: %w", wt.Path, err)
	}
	if mounts, err = pinPointers(mounts, ptrs); err != nil {
		return nil, fmt.Errorf("worktree mount plan %s: %w", wt.Path, err)
	}
	return mounts, nil
}

// sortMounts orders mounts so that a parent comes before anything below it.
func sortMounts(ms []Mount) {
	sort.SliceStable(ms, func(i, j int) bool {
		di, dj := strings.Count(ms[i].Target, "/"), strings.Count(ms[j].Target, "/")
		if di != dj {
			return di < dj
		}
		return ms[i].Target < ms[j].Target
	})
}

// ensureDir makes sure p is a directory, creating it for uid:gid (mode
// 0755) when missing.
func (m *Manager) ensureDir(p string, uid, gid int) error {
	err := os.Mkdir(p, 0o755)
	switch {
	case err == nil:
		return m.chown(p, uid, gid)
	case errors.Is(err, fs.ErrExist):
		return nil // checked by checkMountSource
	default:
		return fmt.Errorf("create %s: %w", p, err)
	}
}

// checkMountSource requires p to be a real, canonical directory: Docker
// resolves symlinks in a bind source, so a symlink planted in the git dir
// could otherwise mount an arbitrary host directory.
func checkMountSource(p string) error {
	st, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("mount source: %w", err)
	}
	if st.Mode()&fs.ModeSymlink != 0 || !st.IsDir() {
		return fmt.Errorf("%w: mount source %s is not a directory (%s): it must be a real directory", ErrInvalidWorktree, p, st.Mode().Type())
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return fmt.Errorf("mount source: %w", err)
	}
	if real != p {
		return fmt.Errorf("%w: mount source %s resolves to %s: its path must not go through a symlink", ErrInvalidWorktree, p, real)
	}
	return nil
}

// dirExistsNoFollow reports whether p is a directory (not a symlink).
func dirExistsNoFollow(p string) bool {
	st, err := os.Lstat(p)
	return err == nil && st.IsDir()
}
