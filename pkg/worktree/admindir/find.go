package admindir

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Find returns the admin dir of the worktree at path: the one its
// .git file names, if that one's gitdir points back at path; else the first
// under <commonDir>/worktrees whose gitdir points at path.
func Find(commonDir, path string) (string, error) {
	want := filepath.Join(path, ".git")
	worktrees := filepath.Join(commonDir, "worktrees")
	if b, err := ReadLinkFile(want); err == nil {
		if admin, err := ParseDotGit(b, path); err == nil && filepath.Dir(admin) == worktrees && PointsAt(admin, path) {
			return admin, nil
		}
	}
	ents, err := os.ReadDir(worktrees)
	if err != nil {
		return "", fmt.Errorf("find the admin dir of %s: %w", path, err)
	}
	for _, e := range ents {
		admin := filepath.Join(worktrees, e.Name())
		if e.IsDir() && PointsAt(admin, path) {
			return admin, nil
		}
	}
	return "", fmt.Errorf("find the admin dir of %s: no entry in %s points at it", path, worktrees)
}

// RegisteredAt returns the admin dir of commonDir whose gitdir names path,
// or "". It reads the admin dirs, as git worktree list does.
func RegisteredAt(commonDir, path string) string {
	entries, _ := os.ReadDir(filepath.Join(commonDir, "worktrees"))
	for _, e := range entries {
		if admin := filepath.Join(commonDir, "worktrees", e.Name()); PointsAt(admin, path) {
			return admin
		}
	}
	return ""
}

// CheckedOutIn returns the path of a worktree of commonDir (the main one or
// a linked one) that has ref checked out, or "". It reads the HEAD files,
// as git itself does to refuse deleting such a branch.
func CheckedOutIn(commonDir, ref string) string {
	headIs := func(dir string) bool {
		b, err := ReadLinkFile(filepath.Join(dir, "HEAD"))
		return err == nil && strings.TrimSpace(string(b)) == "ref: "+ref
	}
	if headIs(commonDir) {
		if filepath.Base(commonDir) == ".git" {
			return filepath.Dir(commonDir)
		}
		return commonDir
	}
	entries, _ := os.ReadDir(filepath.Join(commonDir, "worktrees"))
	for _, e := range entries {
		admin := filepath.Join(commonDir, "worktrees", e.Name())
		if !headIs(admin) {
			continue
		}
		if b, err := ReadLinkFile(filepath.Join(admin, "gitdir")); err == nil {
			return filepath.Dir(strings.TrimSpace(string(b)))
		}
		return admin
	}
	return ""
}

// Owns reports whether admin is the admin dir of the worktree at path
// that was locked with reason (a conversation's, see worktree.LockReason),
// and so may be used and deleted: its gitdir names path; or it names
// another path whose .git does not point back (the file was rewritten, or
// is missing) while its lock still carries reason. An admin dir git has
// reused for another live worktree (a retried removal after the name was
// recycled) fails both tests.
func Owns(admin, path, reason string) bool {
	st, err := os.Lstat(admin)
	if err != nil || !st.IsDir() {
		return false
	}
	if PointsAt(admin, path) {
		return true
	}
	b, err := ReadLinkFile(filepath.Join(admin, "locked"))
	if err != nil || strings.TrimSpace(string(b)) != reason {
		return false
	}
	if b, err := ReadLinkFile(filepath.Join(admin, "gitdir")); err == nil {
		if p, err := ParseGitdir(b, admin); err == nil && filepath.Base(p) == ".git" && DotGitPointsAt(filepath.Dir(p), admin) {
			return false // a live worktree elsewhere really uses it
		}
	}
	return true
}

// FindOwn returns the admin dir under <commonDir>/worktrees whose gitdir
// names path or whose lock carries reason, or "".
func FindOwn(commonDir, path, reason string) string {
	worktrees := filepath.Join(commonDir, "worktrees")
	ents, err := os.ReadDir(worktrees)
	if err != nil {
		return ""
	}
	for _, e := range ents {
		admin := filepath.Join(worktrees, e.Name())
		if !e.IsDir() {
			continue
		}
		lock, _ := ReadLinkFile(filepath.Join(admin, "locked"))
		if PointsAt(admin, path) || strings.TrimSpace(string(lock)) == reason {
			return admin
		}
	}
	return ""
}

// Abandoned returns what a `git worktree add` of path in commonDir killed
// between creating its admin dir and writing the lock into it leaves under
// <commonDir>/worktrees: a directory named as git names one for path (its
// base name, or the base name and a number) that is empty or holds only an
// empty "locked". No git command sees such a directory (it has no gitdir
// file), `git worktree prune` keeps the second kind, and FindOwn cannot
// tell it is ours (no gitdir, no reason), so without a sweep of what
// Abandoned returns it would stay for good. Nothing of a live worktree
// looks like that: git writes the lock's content in the same call that
// creates it, and gitdir right after. With lockTexts it also takes a
// directory holding only a "locked" with one of those texts: what an add
// without --lock (a restore's, whose git writes "initializing" first,
// LC_ALL=C) killed before gitdir leaves.
func Abandoned(commonDir, path string, lockTexts ...string) []string {
	worktrees := filepath.Join(commonDir, "worktrees")
	ents, err := os.ReadDir(worktrees)
	if err != nil {
		return nil
	}
	base := filepath.Base(path)
	var out []string
	for _, e := range ents {
		name := e.Name()
		suffix, ok := strings.CutPrefix(name, base)
		if !ok || !e.IsDir() || strings.Trim(suffix, "0123456789") != "" {
			continue
		}
		admin := filepath.Join(worktrees, name)
		inside, err := os.ReadDir(admin)
		if err != nil || len(inside) > 1 {
			continue
		}
		if len(inside) == 1 {
			st, err := os.Lstat(filepath.Join(admin, "locked"))
			if inside[0].Name() != "locked" || err != nil || !st.Mode().IsRegular() {
				continue
			}
			if st.Size() != 0 {
				b, err := os.ReadFile(filepath.Join(admin, "locked"))
				if err != nil || !slices.Contains(lockTexts, strings.TrimSpace(string(b))) {
					continue
				}
			}
		}
		out = append(out, admin)
	}
	return out
}

// LooksLikeAdmin reports whether dir still holds a registration (git
// needs its HEAD and commondir files).
func LooksLikeAdmin(dir string) bool {
	for _, name := range []string{"HEAD", "commondir"} {
		if st, err := os.Lstat(filepath.Join(dir, name)); err != nil || !st.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// LooksLikeGitDir reports whether dir has the shape of a git common dir.
func LooksLikeGitDir(dir string) bool {
	head, err := os.Lstat(filepath.Join(dir, "HEAD"))
	if err != nil || !head.Mode().IsRegular() {
		return false
	}
	for _, name := range []string{"objects", "refs"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || !st.IsDir() {
			return false
		}
	}
	return true
}
