package admindir

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ohd-dev/ohd/pkg/worktree/nofollow"
)

// maxLinkFile bounds the size of a .git or gitdir file ohd reads: both hold
// one path.
const maxLinkFile = 64 << 10

// ParseDotGit parses the contents of a linked worktree's .git file
// ("gitdir: <path>\n") and returns the git dir it names, made absolute
// relative to dir (the directory holding the file; git >= 2.48 can write
// relative paths).
func ParseDotGit(b []byte, dir string) (string, error) {
	s, ok := strings.CutPrefix(string(b), "gitdir: ")
	if !ok {
		return "", fmt.Errorf("parse .git file: does not start with \"gitdir: \"")
	}
	return linkPath(s, dir, ".git file")
}

// ParseGitdir parses the contents of <admin-dir>/gitdir ("<path>\n",
// the worktree's .git file), made absolute relative to adminDir.
func ParseGitdir(b []byte, adminDir string) (string, error) {
	return linkPath(string(b), adminDir, "gitdir file")
}

func linkPath(s, dir, what string) (string, error) {
	s = strings.TrimSuffix(s, "\n")
	s = strings.TrimSuffix(s, "\r")
	switch {
	case s == "":
		return "", fmt.Errorf("parse %s: empty path", what)
	case strings.ContainsAny(s, "\x00\n\r"):
		return "", fmt.Errorf("parse %s: path contains a control character", what)
	case len(s) > maxLinkFile:
		return "", fmt.Errorf("parse %s: path too long", what)
	}
	if !filepath.IsAbs(s) {
		if dir == "" || !filepath.IsAbs(dir) {
			return "", fmt.Errorf("parse %s: relative path %q and no absolute base", what, truncate(s, 64))
		}
		s = filepath.Join(dir, s)
		if strings.ContainsAny(s, "\x00\n\r") {
			return "", fmt.Errorf("parse %s: base directory contains a control character", what)
		}
	}
	return filepath.Clean(s), nil
}

// ReadLinkFile reads a small file (a .git or gitdir file) without
// following a final symlink: the agent can write both, and ohd may be
// root.
func ReadLinkFile(path string) ([]byte, error) { return nofollow.ReadFile(path, maxLinkFile) }

// PointsAt reports whether <admin>/gitdir names <path>/.git.
func PointsAt(admin, path string) bool {
	b, err := ReadLinkFile(filepath.Join(admin, "gitdir"))
	if err != nil {
		return false
	}
	p, err := ParseGitdir(b, admin)
	return err == nil && SamePath(p, filepath.Join(path, ".git"))
}

// SamePath compares two absolute paths, resolving symlinks where they exist.
func SamePath(a, b string) bool {
	if a == b {
		return true
	}
	ra, err1 := filepath.EvalSymlinks(a)
	rb, err2 := filepath.EvalSymlinks(b)
	if err1 != nil || err2 != nil {
		// The paths may not exist (a removed worktree); compare their
		// resolved parents.
		ra, err1 = evalParent(a)
		rb, err2 = evalParent(b)
		if err1 != nil || err2 != nil {
			return false
		}
	}
	return ra == rb
}

func evalParent(p string) (string, error) {
	d, err := filepath.EvalSymlinks(filepath.Dir(p))
	if err != nil {
		return "", err
	}
	return filepath.Join(d, filepath.Base(p)), nil
}

// DotGitPointsAt reports whether <path>/.git names admin (and admin exists).
func DotGitPointsAt(path, admin string) bool {
	b, err := ReadLinkFile(filepath.Join(path, ".git"))
	if err != nil {
		return false
	}
	p, err := ParseDotGit(b, path)
	if err != nil || !SamePath(p, admin) {
		return false
	}
	st, err := os.Stat(admin)
	return err == nil && st.IsDir()
}

// truncate shortens s, quoted in an error message, to n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
