package worktree

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Find reconstructs conversation id's Worktree in repo from what is on
// disk, for reconciling after a crash between Add and persisting its
// result (or a lost record). The admin dir is the one whose gitdir names
// the worktree path, or, if git was interrupted before writing gitdir, the
// one carrying the conversation's lock reason; if there is none, AdminID
// and AdminDir are empty (Remove accepts that; the other methods do not).
// StartCommit comes from the oldest entry of the branch's reflog; if that
// is gone it is empty, and Remove then keeps the branch. StartPoint is
// not recoverable and stays empty.
//
// When neither the conversation directory, nor an admin dir, nor the
// branch exists, Find returns an error wrapping fs.ErrNotExist: there is
// nothing to remove.
func (m *Manager) Find(ctx context.Context, repo Repo, id string) (Worktree, error) {
	if err := ValidateID(id); err != nil {
		return Worktree{}, fmt.Errorf("worktree find: %w", err)
	}
	if !repo.IsGit || !filepath.IsAbs(repo.TopLevel) || !filepath.IsAbs(repo.CommonDir) {
		return Worktree{}, fmt.Errorf("worktree find %s: %w", id, ErrNotGit)
	}
	uid, gid, err := owner(repo.CommonDir)
	if err != nil {
		return Worktree{}, fmt.Errorf("worktree find %s: %w", id, err)
	}
	wt := Worktree{
		ConversationID: id,
		Repo:           repo.TopLevel,
		CommonDir:      repo.CommonDir,
		Path:           filepath.Join(m.root, id, filepath.Base(repo.TopLevel)),
		Branch:         BranchName(id),
		UID:            uid,
		GID:            gid,
	}
	if v, _ := viewPaths(wt.Path); func() bool { ok, _ := lexists(v); return ok }() {
		wt.View = v
	}
	if admin := findOwnAdminDir(wt); admin != "" {
		wt.AdminDir, wt.AdminID = admin, filepath.Base(admin)
	}
	ct := commonTarget(wt.CommonDir, uid, gid)
	_, hasBranch, err := m.revParse(ctx, ct, "refs/heads/"+wt.Branch)
	if err != nil {
		return Worktree{}, fmt.Errorf("worktree find %s: %w", id, err)
	}
	if hasBranch {
		// Oldest reflog entry: the branch's creation at the start commit.
		out, err := m.git(ctx, ct, runOpts{}, "log", "--walk-reflogs", "--format=%H", "refs/heads/"+wt.Branch, "--")
		if err == nil {
			lines := strings.Fields(out)
			if len(lines) > 0 && isHexID(lines[len(lines)-1]) {
				wt.StartCommit = lines[len(lines)-1]
			}
		}
	}
	convDirExists, err := lexists(filepath.Join(m.root, id))
	if err != nil {
		return Worktree{}, fmt.Errorf("worktree find %s: %w", id, err)
	}
	if wt.AdminDir == "" && !hasBranch && !convDirExists {
		return Worktree{}, fmt.Errorf("worktree find %s: no worktree, admin dir or branch in %s: %w", id, repo.TopLevel, fs.ErrNotExist)
	}
	return wt, nil
}

// findOwnAdminDir returns the admin dir under <CommonDir>/worktrees whose
// gitdir names wt.Path or whose lock carries the conversation's reason,
// or "".
func findOwnAdminDir(wt Worktree) string {
	worktrees := filepath.Join(wt.CommonDir, "worktrees")
	ents, err := os.ReadDir(worktrees)
	if err != nil {
		return ""
	}
	for _, e := range ents {
		admin := filepath.Join(worktrees, e.Name())
		if !e.IsDir() {
			continue
		}
		lock, _ := readLinkFile(filepath.Join(admin, "locked"))
		if adminPointsAt(admin, wt.Path) || strings.TrimSpace(string(lock)) == LockReason(wt.ConversationID) {
			return admin
		}
	}
	return ""
}

// abandonedAdminDirsAt returns what a `git worktree add` of path in
// commonDir killed between creating its admin dir and writing the lock
// into it leaves under <commonDir>/worktrees: a directory named as git
// names one for path (its base name, or the base name and a number) that
// is empty or holds only an empty "locked". No git command sees such a
// directory (it has no gitdir file), `git worktree prune` keeps the second
// kind, and findOwnAdminDir cannot tell it is ours (no gitdir, no reason),
// so without this sweep it would stay for good. Nothing of a live worktree
// looks like that: git writes the lock's content in the same call that
// creates it, and gitdir right after. With lockTexts it also takes a
// directory holding only a "locked" with one of those texts: what an add
// without --lock (a restore's, whose git writes "initializing" first,
// LC_ALL=C) killed before gitdir leaves.
func abandonedAdminDirsAt(commonDir, path string, lockTexts ...string) []string {
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

// removeAbandonedAdmins deletes abandonedAdminDirsAt(wt.CommonDir,
// wt.Path), and what killed
// removeAdmin runs left (sweepTrash). Call it under the repository lock,
// so no add of ohd's own is half way.
func (m *Manager) removeAbandonedAdmins(wt Worktree) {
	m.removeAbandonedAdminsAt(wt.CommonDir, wt.Path, wt.ConversationID)
}

// removeAbandonedAdminsAt is removeAbandonedAdmins for an add of path in
// commonDir by owner (lockTexts as abandonedAdminDirsAt's).
func (m *Manager) removeAbandonedAdminsAt(commonDir, path, owner string, lockTexts ...string) {
	m.sweepTrash(commonDir)
	for _, admin := range abandonedAdminDirsAt(commonDir, path, lockTexts...) {
		_ = os.Remove(filepath.Join(admin, "locked"))
		if err := os.Remove(admin); err != nil {
			m.log.Warn("remove an admin dir a killed git worktree add left", "path", admin, "err", err)
			continue
		}
		m.log.Info("removed an admin dir a killed git worktree add left", "owner", owner, "path", admin)
	}
}
