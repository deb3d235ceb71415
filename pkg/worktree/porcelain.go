package worktree

import (
	"fmt"
	"path/filepath"
	"strings"
)

// maxLinkFile bounds the size of a .git or gitdir file ohd reads: both hold
// one path.
const maxLinkFile = 64 << 10

// parseDotGit parses the contents of a linked worktree's .git file
// ("gitdir: <path>\n") and returns the git dir it names, made absolute
// relative to dir (the directory holding the file; git >= 2.48 can write
// relative paths).
func parseDotGit(b []byte, dir string) (string, error) {
	s, ok := strings.CutPrefix(string(b), "gitdir: ")
	if !ok {
		return "", fmt.Errorf("parse .git file: does not start with \"gitdir: \"")
	}
	return linkPath(s, dir, ".git file")
}

// parseAdminGitdir parses the contents of <admin-dir>/gitdir ("<path>\n",
// the worktree's .git file), made absolute relative to adminDir.
func parseAdminGitdir(b []byte, adminDir string) (string, error) {
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
