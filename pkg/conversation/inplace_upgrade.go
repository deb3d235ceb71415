package conversation

import (
	"context"
	"errors"
	"fmt"

	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/store"
	"github.com/ohd-dev/ohd/pkg/worktree"
)

// A conversation without a worktree made before in place existed (716a702
// and earlier) has a record like a plain folder's (Worktree "", InPlace
// false), yet its container mounted the repository's folder, .git and
// all, writable: the agent committed to the user's branch and could plant
// a hook or an fsmonitor there. Whether it works in place is therefore
// decided by its workspace, not by the record: a workspace in a git work
// tree of the conversation's own user (inPlaceDue) is moved in place
// (moveInPlace: the old container goes, the conversation gets its own git
// view and today's mounts) before any container of it is made again, and
// a running container of it found at reconcile is stopped (so that the
// next request makes it anew) rather than adopted.

// inPlaceDue says whether c must be moved in place before a container of
// it is made: a container runtime with views (views), a record that is
// neither a worktree's nor in place, and a workspace (repo, from Inspect)
// in a git work tree that belongs to the conversation's user. A git
// repository of another owner is not the user's to protect (and not the
// agent's to get a view of): it stays a plain folder's.
func inPlaceDue(c store.Conversation, repo worktree.Repo, views bool) bool {
	return views && !c.InPlace && c.Worktree == "" && c.State != store.StateDeleted &&
		repo.IsGit && repo.TopLevel != "" && repo.UID == c.UID
}

// legacyInPlace inspects c's workspace and reports whether c must be moved
// in place (inPlaceDue), with the inspection.
func (m *Manager) legacyInPlace(ctx context.Context, c store.Conversation) (worktree.Repo, bool, error) {
	if !m.views() || c.InPlace || c.Worktree != "" {
		return worktree.Repo{}, false, nil
	}
	repo, err := m.wt.Inspect(ctx, c.Workspace)
	if err != nil {
		return repo, false, fmt.Errorf("inspect the workspace %s: %w", c.Workspace, err)
	}
	return repo, inPlaceDue(c, repo, m.views()), nil
}

// moveInPlace gives c, a conversation made before in place (see above),
// its own git view over the folder's git dir, as a create in place makes
// one: its old container (whose mounts include the writable .git) is
// removed first, and the record then says InPlace. The view's HEAD is on
// the branch the host has checked out; what the agent committed there
// directly is the user's already. Other conversations in the same folder
// may share it, as a create in place may.
func (m *Manager) moveInPlace(ctx context.Context, c store.Conversation, repo worktree.Repo) (store.Conversation, error) {
	fail := func(err error) (store.Conversation, error) {
		return c, fmt.Errorf("move conversation %s in place: it was made by an earlier version of ohd, whose container had the repository's .git writable, and cannot start until it has its own git view: %w", c.ID, err)
	}
	defer m.lockIn(m.inPlaceLocks, repo.TopLevel)()
	if c.ContainerID != "" {
		m.retire(c.ContainerID)
		if err := m.rt.Remove(ctx, c.ContainerID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			return fail(fmt.Errorf("remove its container: %w", err))
		}
		var err error
		if c, err = m.st.UpdateConversation(c.ID, func(r *store.Conversation) error {
			r.ContainerID, r.ContainerName, r.HostPort = "", "", 0
			return nil
		}); err != nil {
			return fail(err)
		}
	}
	plan, err := m.wt.PlanInPlace(ctx, repo, c.ID)
	if err != nil {
		return fail(err)
	}
	if _, err := m.wt.AddInPlace(ctx, plan); err != nil {
		return fail(err)
	}
	m.log.Info("conversation of an earlier version moved in place with its own git view", "id", c.ID, "folder", plan.Repo, "view", plan.View)
	return m.st.UpdateConversation(c.ID, func(r *store.Conversation) error {
		recordInPlace(r, plan)
		r.Notes = append(r.Notes, "made by an earlier version of ohd with the repository's .git writable in its container: moved in place with its own git view and made anew")
		return nil
	})
}
