package worktree

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ohd-dev/ohd/pkg/worktree/admindir"
	"github.com/ohd-dev/ohd/pkg/worktree/mountplan"
)

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
//	                                            package mountplan)
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
func (m *Manager) MountPlan(wt Worktree) ([]mountplan.Mount, error) {
	if err := m.checkWorktree(wt); err != nil {
		return nil, fmt.Errorf("worktree mount plan: %w", err)
	}
	// With a view the host's registration is not mounted, and
	// <Path>/.git is mounted read-only (the user's git on the host
	// follows it: see package mountplan) but need not point at it: neither may
	// stop the work being saved in a sandbox, nor the container
	// starting, since a removal interrupted after it deleted the
	// registration must still finish. `ohctl doctor` checks the host's
	// side.
	if wt.View == "" && !wt.InPlace && (!admindir.DotGitPointsAt(wt.Path, wt.AdminDir) || !admindir.PointsAt(wt.AdminDir, wt.Path)) {
		return nil, fmt.Errorf("worktree mount plan %s: %w: its .git file and %s/gitdir do not point at each other: check `ohctl doctor`, or remove and recreate the conversation", wt.Path, ErrInvalidWorktree, wt.AdminDir)
	}
	var mounts []mountplan.Mount
	if wt.InPlace {
		return m.inPlaceMounts(wt)
	}
	if wt.View != "" {
		_, alt := viewPaths(wt.Path)
		mounts = []mountplan.Mount{
			{Source: wt.Path, Target: wt.Path},
			{Source: wt.View, Target: wt.CommonDir},
			{Source: filepath.Join(wt.CommonDir, "objects"), Target: alt, ReadOnly: true},
		}
		if hv := hostViewPath(wt); dirExistsNoFollow(hv) {
			mounts = append(mounts, mountplan.Mount{Source: hv, Target: hv, ReadOnly: true})
		}
		hooks := filepath.Join(wt.CommonDir, "hooks")
		if st, err := os.Lstat(hooks); err == nil && st.IsDir() {
			mounts = append(mounts, mountplan.Mount{Source: hooks, Target: hooks, ReadOnly: true})
		}
	} else {
		mounts = []mountplan.Mount{
			{Source: wt.Path, Target: wt.Path},
			{Source: wt.CommonDir, Target: wt.CommonDir, ReadOnly: true},
			{Source: wt.AdminDir, Target: wt.AdminDir},
		}
		for _, name := range []string{"objects", "refs", "logs"} {
			p := filepath.Join(wt.CommonDir, name)
			if err := m.ensureDir(p, wt.UID, wt.GID); err != nil {
				return nil, fmt.Errorf("worktree mount plan %s: %w", wt.Path, err)
			}
			mounts = append(mounts, mountplan.Mount{Source: p, Target: p})
		}
	}
	for _, mt := range mounts {
		if err := mountplan.CheckSource(mt.Source); err != nil {
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
	// and its submodules (package mountplan); the host's admin dir holds the
	// index that git reads.
	ptrs, err := mountplan.WorkTreePointers(mountHost{m}, wt.Path, wt.AdminDir, wt.UID, wt.GID)
	if err != nil {
		return nil, fmt.Errorf("worktree mount plan %s: %w", wt.Path, err)
	}
	if mounts, err = mountplan.Pin(mounts, ptrs); err != nil {
		return nil, fmt.Errorf("worktree mount plan %s: %w", wt.Path, err)
	}
	return mounts, nil
}

// ensureDir makes sure p is a directory, creating it for uid:gid (mode
// 0755) when missing.
func (m *Manager) ensureDir(p string, uid, gid int) error {
	err := os.Mkdir(p, 0o755)
	switch {
	case err == nil:
		return m.chown(p, uid, gid)
	case errors.Is(err, fs.ErrExist):
		return nil // checked by mountplan.CheckSource
	default:
		return fmt.Errorf("create %s: %w", p, err)
	}
}

// dirExistsNoFollow reports whether p is a directory (not a symlink).
func dirExistsNoFollow(p string) bool {
	st, err := os.Lstat(p)
	return err == nil && st.IsDir()
}

// PlainFolderMounts returns the bind mounts of the plain folder ws
// (mountplan.PlainFolder: every repository in it protected from the
// agent), parents before children. uid and gid own what it makes (a
// missing submodule directory).
func (m *Manager) PlainFolderMounts(ws string, uid, gid int) ([]mountplan.Mount, error) {
	return mountplan.PlainFolder(mountHost{m}, ws, uid, gid)
}

// mountHost is the Manager as package mountplan's Host: hardened git for
// the submodules of an index, and chown.
type mountHost struct{ m *Manager }

func (h mountHost) Gitlinks(workTree, gitDir string, uid, gid int) ([]string, error) {
	return h.m.gitlinks(workTree, gitDir, uid, gid)
}

func (h mountHost) Chown(path string, uid, gid int) error { return h.m.chown(path, uid, gid) }
