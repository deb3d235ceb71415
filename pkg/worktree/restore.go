package worktree

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// RestoreOptions say what Restore brings back.
type RestoreOptions struct {
	// CommonDir is the repository's git common dir; Repo its top level.
	CommonDir, Repo string
	// ConversationID is the ended conversation.
	ConversationID string
	// StartCommit is where the conversation's branch started (used when
	// neither the branch nor a kept copy of it exists).
	StartCommit string
	// Into is the new worktree's path (absolute, must not exist); "" means
	// <Repo>.restore-<first 8 characters of the id>, beside the repository.
	Into string
}

// RestoreResult says what Restore made.
type RestoreResult struct {
	// Path is the new worktree; Branch is checked out in it.
	Path, Branch string
	// Snapshot is the snapshot commit whose files were applied as
	// uncommitted changes ("" if there was none).
	Snapshot string
}

// Restore recreates an ended conversation's work on the host, in a new
// worktree of the repository: the conversation's branch (openhands/<id>,
// or its copy kept under refs/ohd/kept/<id>/ when the host branch was
// moved) is checked out there, and the snapshot of its uncommitted work
// (refs/ohd/snapshots/<id>), if any, is applied on top as uncommitted
// changes: modified, added and deleted files as they were when the
// conversation ended. The worktree is an ordinary one of the user's, not
// locked and not ohd's. Git runs hardened as everywhere in this package
// (no filter, hook or other program from configuration), as the
// repository's owner.
func (m *Manager) Restore(ctx context.Context, opts RestoreOptions) (RestoreResult, error) {
	var res RestoreResult
	if err := ValidateID(opts.ConversationID); err != nil {
		return res, fmt.Errorf("worktree restore: %w", err)
	}
	id := opts.ConversationID
	if !filepath.IsAbs(opts.CommonDir) || !filepath.IsAbs(opts.Repo) {
		return res, fmt.Errorf("worktree restore %s: %w: the repository is not known", id, ErrInvalidPath)
	}
	if ok, err := lexists(opts.CommonDir); err != nil || !ok {
		return res, fmt.Errorf("worktree restore %s: %w: the repository's git dir %s no longer exists", id, ErrInvalidPath, opts.CommonDir)
	}
	into := opts.Into
	if into == "" {
		into = opts.Repo + ".restore-" + id[:8]
	}
	if !filepath.IsAbs(into) || filepath.Clean(into) != into || strings.ContainsAny(into, "\x00\n\r") {
		return res, fmt.Errorf("worktree restore %s: %w: --into %q must be a clean absolute path", id, ErrInvalidPath, into)
	}
	if ok, err := lexists(into); err != nil || ok {
		if err == nil {
			err = fmt.Errorf("%w: %s exists: choose another --into", ErrExists, into)
		}
		return res, fmt.Errorf("worktree restore %s: %w", id, err)
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(into))
	if err != nil {
		return res, fmt.Errorf("worktree restore %s: %w: the parent of %s: %v", id, ErrInvalidPath, into, err)
	}
	into = filepath.Join(parent, filepath.Base(into))
	uid, gid, err := owner(opts.CommonDir)
	if err != nil {
		return res, fmt.Errorf("worktree restore %s: %w", id, err)
	}
	if m.euid != 0 && uid != m.euid {
		return res, fmt.Errorf("worktree restore %s: %w", id, ownerError(uid, m.euid))
	}
	ct := commonTarget(opts.CommonDir, uid, gid)
	branch := "refs/heads/" + BranchName(id)
	refs, err := m.readRefsUnder(ctx, ct, branch, KeptRef(id, branch), SnapshotRef(id))
	if err != nil {
		return res, fmt.Errorf("worktree restore %s: %w", id, err)
	}
	res.Snapshot = refs[SnapshotRef(id)]
	var args []string
	switch {
	case refs[branch] != "" && refs[KeptRef(id, branch)] != "" && refs[KeptRef(id, branch)] != refs[branch]:
		// The host branch was moved by someone else and the agent's work
		// was kept: restore the kept history (the snapshot's parent), on
		// a branch of its own beside the moved one.
		res.Branch = BranchName(id) + "-kept"
		args = []string{"worktree", "add", "--no-checkout", "-b", res.Branch, "--no-track", into, refs[KeptRef(id, branch)]}
	case refs[branch] != "":
		res.Branch = BranchName(id)
		args = []string{"worktree", "add", "--no-checkout", into, res.Branch}
	case refs[KeptRef(id, branch)] != "" || isHexID(opts.StartCommit):
		start := refs[KeptRef(id, branch)]
		if start == "" {
			start = opts.StartCommit
		}
		res.Branch = BranchName(id)
		args = []string{"worktree", "add", "--no-checkout", "-b", res.Branch, "--no-track", into, start}
	default:
		return res, fmt.Errorf("worktree restore %s: %w: neither branch %s, nor a kept copy, nor a start commit exists: nothing to restore", id, ErrInvalidWorktree, BranchName(id))
	}
	if res.Snapshot == "" && refs[branch] == "" && refs[KeptRef(id, branch)] == "" {
		return res, fmt.Errorf("worktree restore %s: %w: no work of this conversation is kept in %s", id, ErrInvalidWorktree, opts.Repo)
	}
	unlock, err := m.lockRepo(ctx, opts.CommonDir)
	if err != nil {
		return res, fmt.Errorf("worktree restore %s: %w", id, err)
	}
	if err := os.Mkdir(into, 0o755); err != nil {
		unlock()
		return res, fmt.Errorf("worktree restore %s: %w", id, err)
	}
	if err := m.chown(into, uid, gid); err != nil {
		unlock()
		_ = os.Remove(into)
		return res, fmt.Errorf("worktree restore %s: %w", id, err)
	}
	_, err = m.git(ctx, gitTarget{dir: opts.Repo, gitDir: opts.CommonDir, uid: uid, gid: gid}, runOpts{}, args...)
	if err != nil {
		unlock()
		_ = os.RemoveAll(into)
		return res, fmt.Errorf("worktree restore %s: %w", id, err)
	}
	admin, err := findAdminDir(opts.CommonDir, into)
	unlock()
	if err != nil {
		return res, fmt.Errorf("worktree restore %s: %w", id, err)
	}
	t := gitTarget{dir: into, gitDir: admin, workTree: into, uid: uid, gid: gid}
	memo := &filterMemo{}
	if _, err := m.git(ctx, t, runOpts{filters: memo}, "reset", "--hard", "--no-recurse-submodules", "--quiet"); err != nil {
		return res, fmt.Errorf("worktree restore %s: check out %s in %s: %w", id, res.Branch, into, err)
	}
	if res.Snapshot != "" {
		// Two-tree merge from HEAD to the snapshot updates the index and
		// the files (deleting what the snapshot lacks); resetting the
		// index then leaves the work as uncommitted changes.
		if _, err := m.git(ctx, t, runOpts{filters: memo}, "read-tree", "-m", "-u", "HEAD", res.Snapshot); err != nil {
			return res, fmt.Errorf("worktree restore %s: apply snapshot %s in %s: %w", id, res.Snapshot, into, err)
		}
		if _, err := m.git(ctx, t, runOpts{filters: memo}, "reset", "--quiet", "--no-recurse-submodules"); err != nil {
			return res, fmt.Errorf("worktree restore %s: %w", id, err)
		}
	}
	res.Path = into
	m.log.Info("conversation work restored", "conversation", id, "path", into, "branch", res.Branch, "snapshot", res.Snapshot)
	return res, nil
}
