package conversation

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/ohd-dev/ohd/pkg/worktree"
)

// Re-creating an id whose earlier conversation left work in the
// repository. The agent server creates a deleted conversation's id again
// (its conversation is gone); ohd does too, except where the earlier one's
// work is still kept under the names the new one would take: its branch
// openhands/<id> (kept because it had commits, in a worktree or in place),
// its snapshot refs/ohd/snapshots/<id>, the refs kept under
// refs/ohd/kept/<id>/. The new conversation would start on, publish to
// and, when it ends, overwrite those names, so the create is refused
// (ErrConflict, 409) with the way to get the work out and free the names.
// Nothing is renamed behind the user's back.

// keptWorkFree refuses (ErrConflict) to create conversation id in repo
// while the repository keeps work under id's names.
func (m *Manager) keptWorkFree(ctx context.Context, repo worktree.Repo, id string) error {
	if !repo.IsGit || repo.CommonDir == "" {
		return nil
	}
	kept, err := m.wt.ListKept(ctx, repo.CommonDir, id)
	if err != nil {
		return fmt.Errorf("conversation %s: read the refs kept in %s: %w", id, repo.TopLevel, err)
	}
	branch := worktree.BranchName(id)
	tip, err := m.wt.HostBranch(ctx, worktree.Worktree{CommonDir: repo.CommonDir, Branch: branch, UID: repo.UID, GID: repo.GID})
	if err != nil {
		return fmt.Errorf("conversation %s: %w", id, err)
	}
	if tip == "" && len(kept) == 0 {
		return nil
	}
	var what []string
	if tip != "" {
		what = append(what, "branch "+branch)
	}
	names := make([]string, 0, len(kept))
	for name := range kept {
		names = append(names, name)
	}
	slices.Sort(names)
	if slices.Contains(names, worktree.SnapshotRef(id)) {
		what = append(what, "its uncommitted work as "+worktree.SnapshotRef(id))
	}
	if n := len(names) - btoi(slices.Contains(names, worktree.SnapshotRef(id))); n > 0 {
		what = append(what, fmt.Sprintf("%d refs under %s", n, worktree.KeptPrefix(id)))
	}
	git := "git -C " + repo.TopLevel
	return fmt.Errorf("%w: conversation %s's earlier work is kept in %s (%s), and a new conversation with this id would start on and later overwrite those names: "+
		"get the work out first (`ohctl restore %s` checks it out in a new worktree; `%s branch -m %s <name>` keeps the commits under a name of yours), "+
		"then free the names (`%s for-each-ref --format='delete %%(refname)' refs/heads/%s %s %s | %s update-ref --stdin`), or create the conversation with another id",
		ErrConflict, id, repo.TopLevel, strings.Join(what, ", "), id, git, branch, git, branch, worktree.SnapshotRef(id), worktree.KeptPrefix(id), git)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
