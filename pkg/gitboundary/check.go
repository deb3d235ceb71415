package gitboundary

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ohd-dev/ohd/pkg/hardgit"
)

// MinGit is the first git release that refuses a repository whose
// directories another user owns (safe.directory, CVE-2022-24765).
var MinGit = [3]int{2, 35, 2}

// GitVersion runs `git version` (PATH's git, with a deadline) and returns
// its numbers.
func GitVersion(ctx context.Context) ([3]int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", "version").Output()
	if err != nil {
		return [3]int{}, "", fmt.Errorf("git version: %w", err)
	}
	s := strings.TrimSpace(string(out))
	v, ok := parseGitVersion(s)
	if !ok {
		return [3]int{}, s, fmt.Errorf("git version: cannot read %q", s)
	}
	return v, s, nil
}

// parseGitVersion reads "git version 2.39.5" (and vendor suffixes such as
// "2.39.5.windows.1" or "2.37.1 (Apple Git-137.1)").
func parseGitVersion(s string) ([3]int, bool) {
	f := strings.Fields(s)
	if len(f) < 3 || f[0] != "git" || f[1] != "version" {
		return [3]int{}, false
	}
	var v [3]int
	parts := strings.SplitN(f[2], ".", 4)
	if len(parts) < 2 {
		return v, false
	}
	for i := 0; i < 3 && i < len(parts); i++ {
		digits := parts[i]
		if j := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }); j >= 0 {
			digits = digits[:j]
		}
		n, err := strconv.Atoi(digits)
		if err != nil {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

// CheckGit returns ErrOldGit when the host's git is older than MinGit.
func CheckGit(ctx context.Context) (string, error) {
	v, s, err := GitVersion(ctx)
	if err != nil {
		return s, err
	}
	if hardgit.VersionLess(v, MinGit) {
		return s, fmt.Errorf("%w: the host's %s does not refuse a repository another user owns, so a .git the agent plants would run as the user: install git 2.35.2 or later on the host", ErrOldGit, s)
	}
	return s, nil
}

// CheckFilesystem returns ErrNoACL when the filesystem of dir holds no
// POSIX ACLs (for a dir not made yet, of its nearest existing parent). It
// reads an attribute and changes nothing.
func CheckFilesystem(dir string) error {
	_, err := unix.Lgetxattr(dir, xattrAccess, make([]byte, 256))
	for p := dir; errors.Is(err, unix.ENOENT) && p != filepath.Dir(p); {
		p = filepath.Dir(p)
		_, err = unix.Lgetxattr(p, xattrAccess, make([]byte, 256))
	}
	switch {
	case err == nil, errors.Is(err, unix.ENODATA), errors.Is(err, unix.ERANGE):
	case errors.Is(err, unix.EOPNOTSUPP):
		return fmt.Errorf("%w: %s is on a filesystem without POSIX ACLs, which the agent's separate uid needs to share it with you: move it to a filesystem with ACLs (ext4, xfs, btrfs; tmpfs mounted with acl)", ErrNoACL, dir)
	default:
		return fmt.Errorf("check ACL support of %s: %w", dir, err)
	}
	// Borrow records a lent directory's owner in a trusted.* attribute.
	p := dir
	_, err = unix.Lgetxattr(p, xattrBorrowed, make([]byte, 64))
	for errors.Is(err, unix.ENOENT) && p != filepath.Dir(p) {
		p = filepath.Dir(p)
		_, err = unix.Lgetxattr(p, xattrBorrowed, make([]byte, 64))
	}
	if errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("%w: %s is on a filesystem without trusted extended attributes, where ohd records the owner of each of your directories it lends to the agent: move it to a filesystem that has them (ext4, xfs, btrfs, tmpfs)", ErrNoACL, dir)
	}
	return nil
}
