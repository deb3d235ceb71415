package worktree

import (
	"context"
	"fmt"

	"github.com/ohd-dev/ohd/pkg/hardgit"
	"github.com/ohd-dev/ohd/pkg/worktree/admindir"
	"github.com/ohd-dev/ohd/pkg/worktree/snapshot"
)

// Snapshot records the uncommitted state of wt (modified, staged and
// untracked files; not ignored ones) as a commit and points
// refs/ohd/snapshots/<id> at it. It returns ("", "", nil) when nothing is
// uncommitted.
//
// The commit's tree is the working tree as `git add -A` sees it, built in a
// temporary index that starts as a copy of the worktree's index (so staged
// files count and the worktree's own index is never touched). Its first
// parent is the worktree's HEAD (none if HEAD is unborn). When the index
// held staged content (it differs from HEAD), a second parent records
// that index state, as `git stash` does.
//
// Call it with the container stopped: the agent must not change the
// worktree (or the config files it can reach) while ohd reads it.
func (m *Manager) Snapshot(ctx context.Context, wt Worktree) (ref, commit string, err error) {
	if err := m.checkWorktree(wt); err != nil {
		return "", "", fmt.Errorf("worktree snapshot: %w", err)
	}
	if m.euid != 0 && wt.UID != m.euid {
		return "", "", fmt.Errorf("worktree snapshot %s: %w", wt.Path, hardgit.OwnerError(wt.UID, m.euid))
	}
	if !admindir.Owns(wt.AdminDir, wt.Path, LockReason(wt.ConversationID)) {
		return "", "", fmt.Errorf("worktree snapshot %s: %w: %s is not this worktree's registration: nothing can be snapshotted", wt.Path, ErrInvalidWorktree, wt.AdminDir)
	}
	commit, _, _, err = m.snapshots().Commit(ctx, snapshotTree(wt), false)
	if err != nil || commit == "" {
		if err != nil {
			err = fmt.Errorf("worktree snapshot %s: %w", wt.Path, err)
		}
		return "", "", err
	}
	m.onStep("snapshot")
	ref = SnapshotRef(wt.ConversationID)
	unlock, err := m.lockRepo(ctx, wt.CommonDir)
	if err != nil {
		return "", "", fmt.Errorf("worktree snapshot %s: %w", wt.Path, err)
	}
	defer unlock()
	_, err = m.git(ctx, commonTarget(wt.CommonDir, wt.UID, wt.GID), runOpts{},
		"update-ref", "--create-reflog", "-m", "ohd: snapshot of conversation "+wt.ConversationID, ref, commit)
	if err != nil {
		return "", "", fmt.Errorf("worktree snapshot %s: record %s: %w", wt.Path, ref, err)
	}
	m.log.Info("worktree snapshot", "conversation", wt.ConversationID, "ref", ref, "commit", commit)
	return ref, commit, nil
}

// snapshots builds snapshot commits (package snapshot) as this Manager's
// git and owner.
func (m *Manager) snapshots() *snapshot.Builder {
	return &snapshot.Builder{Git: m.runner(), Chown: m.chown}
}

// snapshotTree is what a snapshot of wt reads: its worktree and, for the
// index and HEAD, its own admin dir (never the agent-writable .git file).
func snapshotTree(wt Worktree) snapshot.Tree {
	return snapshot.Tree{ID: wt.ConversationID, Path: wt.Path, GitDir: wt.AdminDir, UID: wt.UID, GID: wt.GID}
}
