package worktree

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ohd-dev/ohd/pkg/worktree/admindir"
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
	if admin := admindir.FindOwn(wt.CommonDir, wt.Path, LockReason(wt.ConversationID)); admin != "" {
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

// removeAbandonedAdmins deletes admindir.Abandoned(wt.CommonDir,
// wt.Path), and what killed admindir.Remove runs left
// (admindir.SweepTrash). Call it under the repository lock, so no add of
// ohd's own is half way.
func (m *Manager) removeAbandonedAdmins(wt Worktree) {
	m.removeAbandonedAdminsAt(wt.CommonDir, wt.Path, wt.ConversationID)
}

// removeAbandonedAdminsAt is removeAbandonedAdmins for an add of path in
// commonDir by owner (lockTexts as admindir.Abandoned's).
func (m *Manager) removeAbandonedAdminsAt(commonDir, path, owner string, lockTexts ...string) {
	admindir.SweepTrash(commonDir, m.log)
	for _, admin := range admindir.Abandoned(commonDir, path, lockTexts...) {
		_ = os.Remove(filepath.Join(admin, "locked"))
		if err := os.Remove(admin); err != nil {
			m.log.Warn("remove an admin dir a killed git worktree add left", "path", admin, "err", err)
			continue
		}
		m.log.Info("removed an admin dir a killed git worktree add left", "owner", owner, "path", admin)
	}
}
