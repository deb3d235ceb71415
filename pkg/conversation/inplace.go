package conversation

import (
	"fmt"
	"path/filepath"

	"github.com/ohd-dev/ohd/pkg/store"
	"github.com/ohd-dev/ohd/pkg/worktree"
)

// In place (a create without a worktree, on a git repository, with a
// container runtime): the agent works in the folder itself, with its own
// git view over the folder's git dir (see pkg/worktree, inplace.go). The
// record keeps Worktree "" (nothing of the user's folder is ever removed)
// and InPlace true; the view is published and saved like a worktree's.

// recordInPlace fills conv from an in-place plan, before anything exists:
// a crash right after still leaves reconcile enough to undo it.
func recordInPlace(conv *store.Conversation, plan worktree.Worktree) {
	conv.InPlace, conv.ViewBranch = true, plan.ViewBranch
	conv.Repo, conv.CommonDir, conv.AdminID, conv.Branch = plan.Repo, plan.CommonDir, plan.AdminID, plan.Branch
	conv.StartPoint, conv.StartCommit = plan.StartPoint, plan.StartCommit
	conv.GitLayout, conv.GitView, conv.Published = store.GitLayoutView, plan.View, plan.StartCommit
	conv.Notes = append(conv.Notes, fmt.Sprintf("in place: the agent works in %s with its own git view; its commits are published to branch %s, never to the branch checked out on the host", conv.Workspace, plan.Branch))
}

// inPlaceOf is worktreeOf for an in-place record.
func inPlaceOf(c store.Conversation) worktree.Worktree {
	wt := worktree.Worktree{
		ConversationID: c.ID, Repo: c.Repo, CommonDir: c.CommonDir, Path: c.Repo, AdminID: c.AdminID,
		Branch: c.Branch, StartPoint: c.StartPoint, StartCommit: c.StartCommit, UID: c.UID, GID: c.GID,
		View: c.GitView, InPlace: true, ViewBranch: c.ViewBranch,
	}
	if c.AdminID != "" {
		wt.AdminDir = filepath.Join(c.CommonDir, "worktrees", c.AdminID)
	}
	if c.Workspace != c.Repo {
		wt.Workdir = c.Workspace
	}
	return wt
}

// sharersOf returns the other live in-place conversations in the work
// tree top, oldest first. Any number of conversations may work in one
// folder, as on the agent server (Canvas keeps finished conversations and
// never deletes them; the SDK sends no worktree; plan mode makes a child
// on its parent's folder): they share the folder's files, and each has
// its own git view (its own HEAD, index and branch openhands/<id>), its
// own container and broker, and is published and kept at its end like
// any in-place conversation. Their files are one set: each agent sees the
// others' changes as uncommitted changes of its own view, and commits
// what it adds. What is released at a conversation's end that belongs to
// the folder rather than to the conversation must wait for the last of
// them (sharersOf says whether others remain).
func (m *Manager) sharersOf(top, id string) []store.Conversation {
	var out []store.Conversation
	for _, c := range m.st.Conversations() {
		if !c.InPlace || c.Repo != top || c.ID == id {
			continue
		}
		switch c.State {
		case store.StateDeleted:
			continue
		case store.StateFailed:
			if !c.UndoPending {
				continue
			}
		}
		out = append(out, c)
	}
	return out
}
