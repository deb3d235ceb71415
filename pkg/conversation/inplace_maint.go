package conversation

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/ohd-dev/ohd/pkg/control"
	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/store"
	"github.com/ohd-dev/ohd/pkg/worktree"
)

// Restore and doctor for a conversation that worked in place. Its files
// never left the user's folder, so there is no snapshot: what restore can
// bring back are its commits (branch openhands/<id>, or their kept copy)
// in a new worktree; the refs its view had besides are listed. Doctor has
// no worktree registration to check: it checks the folder, the view and
// git inside the container instead.

// inPlaceRestoreNote says where an in-place conversation's files are.
func inPlaceRestoreNote(c store.Conversation) string {
	return "the conversation worked in place: its files are in " + c.Workspace + " as it left them (not in this worktree); " +
		"this worktree holds its commits"
}

// checkInPlaceRestore refuses (ErrInvalid) to restore an in-place
// conversation that kept no commits, with where its work is.
func (m *Manager) checkInPlaceRestore(ctx context.Context, c store.Conversation) error {
	if !dirExists(c.CommonDir) {
		return nil // worktree.Restore names the missing git dir
	}
	tip, err := m.wt.HostBranch(ctx, worktree.Worktree{CommonDir: c.CommonDir, Branch: worktree.BranchName(c.ID), UID: c.UID, GID: c.GID})
	if err != nil {
		return err
	}
	kept, err := m.wt.ListKept(ctx, c.CommonDir, c.ID)
	if err != nil {
		return err
	}
	if tip != "" || kept[worktree.KeptRef(c.ID, "refs/heads/"+worktree.BranchName(c.ID))] != "" {
		return nil
	}
	msg := fmt.Sprintf("conversation %s worked in place and made no commit of its own (branch %s was deleted): its files are in %s as it left them; nothing to restore",
		c.ID, worktree.BranchName(c.ID), c.Workspace)
	if len(kept) > 0 {
		msg += fmt.Sprintf("; %d refs of its git view are kept: git -C %s for-each-ref %s", len(kept), c.Repo, worktree.KeptPrefix(c.ID))
	}
	return fmt.Errorf("%w: %s%s", ErrInvalid, msg, gitDirsKeptNote(c))
}

// checkInPlaceHost is doctor's host check of an in-place conversation:
// the folder, the repository's git dir and the conversation's view are
// there. Only lstat runs on the view (it is the agent's).
func checkInPlaceHost(c store.Conversation) control.DoctorCheck {
	ck := control.DoctorCheck{Conversation: c.ID, Check: "inplace-host", Status: "fail"}
	switch {
	case !dirExists(c.Workspace):
		ck.Detail = "the folder " + c.Workspace + " is gone (moved?): move it back, then run doctor again; `ohctl rm " + c.ID + "` ends the conversation and keeps branch " + c.Branch + " if it has commits"
	case !dirExists(c.CommonDir):
		ck.Detail = "the repository's git dir " + c.CommonDir + " is gone (moved?): move the repository back to " + c.Repo + ", then run doctor again"
	case !dirExists(c.GitView):
		ck.Detail = "the conversation's git view " + c.GitView + " (its git dir in the container, mounted at " + c.CommonDir + ") is gone: git inside no longer works and its commits not yet on branch " +
			c.Branch + " are lost; the files in " + c.Workspace + " are untouched: end the conversation with `ohctl rm --discard " + c.ID + "`"
	default:
		ck.Status = "ok"
		ck.Detail = "works in place in " + c.Workspace + " with its own git view " + c.GitView + " (no worktree: nothing of the folder is registered or locked)"
	}
	return ck
}

// checkInPlaceContainer is doctor's container check of an in-place
// conversation: git status in the folder inside the container works (the
// view is mounted over the git dir) and is on the view's branch.
func (m *Manager) checkInPlaceContainer(ctx context.Context, c store.Conversation) control.DoctorCheck {
	ck := control.DoctorCheck{Conversation: c.ID, Check: "inplace-container", Status: "fail"}
	var stdout, stderr bytes.Buffer
	code, err := m.rt.Exec(ctx, c.ContainerID, m.LimitedCmd(ctx, c, []string{"git", "-C", c.Workspace, "status", "--short", "--branch"}, ""),
		runtime.ExecOptions{Stdout: &stdout, Stderr: &stderr})
	branch := c.ViewBranch
	if branch == "" {
		branch = c.Branch
	}
	first := strings.SplitN(stdout.String(), "\n", 2)[0]
	switch {
	case err != nil:
		ck.Detail = err.Error()
	case code != 0:
		ck.Detail = fmt.Sprintf("git status in %s in the container exited %d: %s", c.Workspace, code, strings.TrimSpace(stderr.String()+stdout.String()))
		if hint := checkInPlaceHost(c); hint.Status != "ok" {
			ck.Detail += "; " + hint.Detail
		}
	case !strings.HasPrefix(first, "## ") || !strings.Contains(first, branch):
		ck.Detail = "git status in the container is not on " + branch + " (the branch the host had checked out when the conversation started): " + first
	default:
		ck.Status, ck.Detail = "ok", "git status in the container: "+first
	}
	return ck
}
