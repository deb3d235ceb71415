package mountplan

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Mount is a bind mount for the conversation's container. Source always
// equals Target: the container sees every path at its host path.
type Mount struct {
	Source, Target string
	ReadOnly       bool
}

// Sort orders mounts so that a parent comes before anything below it.
func Sort(ms []Mount) {
	sort.SliceStable(ms, func(i, j int) bool {
		di, dj := strings.Count(ms[i].Target, "/"), strings.Count(ms[j].Target, "/")
		if di != dj {
			return di < dj
		}
		return ms[i].Target < ms[j].Target
	})
}

// CheckSource requires p to be a real, canonical directory: Docker
// resolves symlinks in a bind source, so a symlink planted in the git dir
// could otherwise mount an arbitrary host directory.
func CheckSource(p string) error {
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

// dirExists reports whether p is a directory (not a symlink).
func dirExists(p string) bool {
	st, err := os.Lstat(p)
	return err == nil && st.IsDir()
}
