package worktree

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ohd-dev/ohd/pkg/worktree/admindir"
	"github.com/ohd-dev/ohd/pkg/worktree/journal"
)

// undoRestore removes what the interrupted restore j made: its worktree
// (registration and directory; a directory that is not that worktree is
// left alone unless empty) and the branch it created, if still where it
// was made. refs/stash is not touched here: the retry rebuilds it from the
// user's entries the journal kept.
func (m *Manager) undoRestore(ctx context.Context, commonDir string, j *journal.Journal) error {
	if filepath.Clean(j.CommonDir) != filepath.Clean(commonDir) {
		return nil // another repository's: nothing of it is here
	}
	uid, gid, err := owner(commonDir)
	if err != nil {
		return err
	}
	unlock, err := m.lockRepo(ctx, commonDir)
	if err != nil {
		return err
	}
	defer unlock()
	j.ClearStaleRefLocks(commonDir, m.log)
	// A restore's git worktree add killed before it wrote gitdir leaves an
	// admin dir admindir.Find cannot find (found by TestFaultInjection: an
	// empty worktrees/restored3 that no git lists, for good).
	defer m.removeAbandonedAdminsAt(commonDir, j.Into, "restore", "initializing")
	if ok, _ := lexists(j.Into); ok {
		admin, ferr := admindir.Find(commonDir, j.Into)
		if ferr == nil {
			if err := admindir.Remove(commonDir, admin, "restore-"+filepath.Base(admin), func() { m.onStep("admin-moved") }); err != nil {
				return err
			}
		} else if ents, err := os.ReadDir(j.Into); err != nil || len(ents) > 0 {
			return fmt.Errorf("%w: %s is there but is not the worktree the restore was making: move it away and retry", ErrExists, j.Into)
		}
		if err := os.RemoveAll(j.Into); err != nil {
			return err
		}
	}
	if j.CreatedBranch != "" && isHexID(j.CreatedAt) {
		ct := commonTarget(commonDir, uid, gid)
		ref := "refs/heads/" + j.CreatedBranch
		if have, err := m.readRefsUnder(ctx, ct, ref); err == nil && have[ref] == j.CreatedAt {
			if _, err := m.git(ctx, ct, runOpts{}, "update-ref", "-d", ref, j.CreatedAt); err != nil {
				return err
			}
		}
	}
	m.log.Info("undid an interrupted restore; restoring again", "conversation", j.ID, "path", j.Into)
	return nil
}
