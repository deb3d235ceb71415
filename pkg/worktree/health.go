package worktree

import (
	"context"
	"fmt"
	"strings"

	"github.com/ohd-dev/ohd/pkg/hardgit"
	"github.com/ohd-dev/ohd/pkg/worktree/admindir"
	"github.com/ohd-dev/ohd/pkg/worktree/porcelain"
)

// Health is the state of one worktree as the host repository sees it, for
// `ohctl doctor`. A live conversation should be Registered, Locked, not
// Prunable, with GitdirResolves true.
type Health struct {
	// Registered is true when `git worktree list` has an entry for Path.
	Registered bool
	// Locked and LockReason come from that entry.
	Locked     bool
	LockReason string
	// Prunable is true when a `git worktree prune` on the host would
	// delete the entry; PrunableReason is git's explanation.
	Prunable       bool
	PrunableReason string
	// GitdirResolves is true when <Path>/.git names AdminDir and
	// <AdminDir>/gitdir names <Path>/.git, both existing.
	GitdirResolves bool
	// Branch is the branch checked out in the worktree (short name, e.g.
	// "openhands/<id>"), empty when detached or unregistered.
	Branch string
	// AdminExists is true when the host's registration directory,
	// AdminDir, still holds one (its HEAD and commondir files). Repair
	// needs it: it re-points a registration, it does not re-create one.
	AdminExists bool
}

// Health reports how the host repository sees wt.
func (m *Manager) Health(ctx context.Context, wt Worktree) (Health, error) {
	if err := m.checkWorktree(wt); err != nil {
		return Health{}, fmt.Errorf("worktree health: %w", err)
	}
	uid, gid, err := owner(wt.CommonDir)
	if err != nil {
		return Health{}, fmt.Errorf("worktree health %s: repository git dir: %w", wt.Path, err)
	}
	unlock, err := m.lockRepo(ctx, wt.CommonDir) // see checkFree
	if err != nil {
		return Health{}, fmt.Errorf("worktree health %s: %w", wt.Path, err)
	}
	regs, err := m.registrations(ctx, wt.CommonDir, uid, gid)
	unlock()
	if err != nil {
		return Health{}, fmt.Errorf("worktree health %s: %w", wt.Path, err)
	}
	var h Health
	for _, r := range regs {
		if !admindir.SamePath(r.Path, wt.Path) {
			continue
		}
		h.Registered = true
		h.Locked, h.LockReason = r.Locked, r.LockReason
		h.Prunable, h.PrunableReason = r.Prunable, r.PrunableReason
		h.Branch = strings.TrimPrefix(r.Branch, "refs/heads/")
		break
	}
	h.GitdirResolves = admindir.DotGitPointsAt(wt.Path, wt.AdminDir) && admindir.PointsAt(wt.AdminDir, wt.Path)
	h.AdminExists = admindir.LooksLikeAdmin(wt.AdminDir)
	return h, nil
}

// registrations lists the worktrees registered in the repository of
// commonDir, from `git worktree list --porcelain -z` run as its owner
// uid:gid. For Health: an entry whose Prunable is true has a gitdir that
// does not resolve on the host (for example one created inside a
// container).
func (m *Manager) registrations(ctx context.Context, commonDir string, uid, gid int) ([]porcelain.Registration, error) {
	if m.euid != 0 && uid != m.euid {
		return nil, hardgit.OwnerError(uid, m.euid)
	}
	out, err := m.git(ctx, commonTarget(commonDir, uid, gid), runOpts{}, "worktree", "list", "--porcelain", "-z")
	if err != nil {
		return nil, err
	}
	return porcelain.ParseWorktreeList([]byte(out))
}
