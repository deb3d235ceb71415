package conversation

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ohd-dev/ohd/pkg/broker"
	"github.com/ohd-dev/ohd/pkg/control"
	"github.com/ohd-dev/ohd/pkg/gitboundary"
	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/store"
	"github.com/ohd-dev/ohd/pkg/worktree"
)

// PruneOptions say what Prune removes.
type PruneOptions struct {
	// DryRun reports and changes nothing.
	DryRun bool
	// OlderThan limits removal to conversations inactive this long.
	OlderThan time.Duration
	// WorktreeRoot is scanned for folders no conversation owns (reported,
	// never deleted). "" skips the scan.
	WorktreeRoot string
}

// Prune removes what is no longer in use: stopped and failed
// conversations (their work is snapshotted and their branches kept as
// Remove does), records of deleted conversations, and containers and
// socket directories that no live conversation owns. It never deletes a
// worktree folder, branch or snapshot on its own: those are reported as
// "keep" so the user can decide.
func (m *Manager) Prune(ctx context.Context, opts PruneOptions) (control.PruneReport, error) {
	rep := control.PruneReport{DryRun: opts.DryRun, Items: []control.PruneItem{}}
	add := func(it control.PruneItem, do func() error) {
		if !opts.DryRun && do != nil {
			if err := do(); err != nil {
				it.Error = err.Error()
			} else {
				it.Done = true
			}
		}
		rep.Items = append(rep.Items, it)
	}
	cutoff := time.Now().Add(-opts.OlderThan)
	live := map[string]bool{}
	for _, c := range m.st.Conversations() {
		old := !c.LastActiveAt.After(cutoff)
		switch c.State {
		case store.StateRunning, store.StateProvisioning:
			live[c.ID] = true
		case store.StateStopped:
			if !old {
				live[c.ID] = true
				continue
			}
			id := c.ID
			live[id] = true // its container and socket go with its removal
			add(control.PruneItem{Kind: "conversation", ID: id, Path: c.Worktree, Action: "remove", Detail: "stopped, inactive since " + c.LastActiveAt.Format(time.RFC3339)}, func() error {
				r, err := m.Remove(ctx, id, RemoveOptions{})
				if err == nil && r.Removal != nil && (r.Removal.BranchKept || r.Removal.SnapshotRef != "") {
					rep.Items = append(rep.Items, keepItem(r))
				}
				return err
			})
		case store.StateFailed, store.StateDeleted:
			if !old {
				continue
			}
			if c.Removal != nil && (c.Removal.BranchKept || c.Removal.SnapshotRef != "" || len(c.Removal.Kept) > 0) {
				rep.Items = append(rep.Items, keepItem(c))
				if m.workKept(ctx, c) {
					// The record is how `ohctl ls --all`, show and restore
					// find the work: it stays while the work does.
					continue
				}
			}
			id := c.ID
			add(control.PruneItem{Kind: "record", ID: id, Action: "purge", Detail: string(c.State)}, func() error {
				return m.st.DeleteConversation(id)
			})
		}
	}
	if m.rt.Kind() != "local" {
		list, err := m.rt.List(ctx, m.st.ServerID())
		if err != nil {
			return rep, err
		}
		for _, ct := range list {
			if !live[ct.ConversationID] {
				cid := ct.ID
				add(control.PruneItem{Kind: "container", ID: ct.ConversationID, Path: ct.Name, Action: "remove", Detail: "no live conversation"}, func() error {
					return m.rt.Remove(ctx, cid)
				})
			}
		}
	}
	dirs, _ := os.ReadDir(filepath.Join(m.cfg.RuntimeDir, "conversations"))
	for _, e := range dirs {
		if !live[e.Name()] {
			p := filepath.Join(m.cfg.RuntimeDir, "conversations", e.Name())
			add(control.PruneItem{Kind: "socket-dir", ID: e.Name(), Path: p, Action: "remove", Detail: "no live conversation"}, func() error {
				return os.RemoveAll(p)
			})
		}
	}
	if opts.WorktreeRoot != "" {
		owned := map[string]bool{}
		for _, c := range m.st.Conversations() {
			if c.State.Live() || (c.Removal != nil && !c.Removal.Done) {
				owned[c.ID] = true
			}
		}
		entries, _ := os.ReadDir(opts.WorktreeRoot)
		for _, e := range entries {
			if e.IsDir() && !owned[e.Name()] {
				rep.Items = append(rep.Items, control.PruneItem{
					Kind: "worktree-dir", ID: e.Name(), Path: filepath.Join(opts.WorktreeRoot, e.Name()), Action: "keep",
					Detail: "no live conversation owns this folder; ohd never deletes it: inspect it and delete it yourself",
				})
			}
		}
	}
	return rep, nil
}

// Restore recreates the work of an ended conversation (state deleted or
// failed, its removal done) in a new worktree of its repository: its
// branch checked out, its snapshot applied as uncommitted changes (see
// worktree.Restore). into "" picks <repository>.restore-<id prefix>.
func (m *Manager) Restore(ctx context.Context, id, into string) (control.RestoreResult, error) {
	if !store.ValidID(id) {
		return control.RestoreResult{}, fmt.Errorf("%w: conversation id %q is not a UUID", ErrInvalid, id)
	}
	c, err := m.st.Conversation(id)
	if err != nil {
		return control.RestoreResult{}, fmt.Errorf("conversation %s: %w (a record purged by prune can still be restored with git: see the README)", id, ErrNotFound)
	}
	if c.State.Live() {
		return control.RestoreResult{}, fmt.Errorf("%w: conversation %s is %s: its work is in %s; remove it first (ohctl rm %s), then restore", ErrConflict, id, c.State, c.WorkingDir, id)
	}
	if c.CommonDir == "" {
		return control.RestoreResult{}, fmt.Errorf("%w: conversation %s had no worktree: nothing to restore%s", ErrInvalid, id, gitDirsKeptNote(c))
	}
	if into != "" && !filepath.IsAbs(into) {
		return control.RestoreResult{}, fmt.Errorf("%w: --into %q is not an absolute path", ErrInvalid, into)
	}
	if c.InPlace {
		if err := m.checkInPlaceRestore(ctx, c); err != nil {
			return control.RestoreResult{}, err
		}
	}
	res, err := m.wt.Restore(ctx, worktree.RestoreOptions{CommonDir: c.CommonDir, Repo: c.Repo, ConversationID: id, StartCommit: c.StartCommit, Into: into})
	if err != nil {
		if errors.Is(err, worktree.ErrExists) || errors.Is(err, worktree.ErrInvalidPath) || errors.Is(err, worktree.ErrInvalidWorktree) {
			return control.RestoreResult{}, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		return control.RestoreResult{}, err
	}
	out := control.RestoreResult{ID: id, Path: res.Path, Branch: res.Branch, Already: res.Already, Snapshot: res.Snapshot, Staged: res.Staged, Branches: res.Branches, Stash: res.Stash, StashEntries: res.StashEntries, Tags: res.Tags}
	if c.InPlace {
		out.Note = inPlaceRestoreNote(c)
	}
	m.restoreGitDirs(c, res.Path, &out)
	if kept, err := m.wt.ListKept(ctx, c.CommonDir, id); err == nil {
		for name := range kept {
			if strings.HasPrefix(name, worktree.KeptPrefix(id)) {
				out.Kept = append(out.Kept, name)
			}
		}
		slices.Sort(out.Kept)
	}
	return out, nil
}

// checkWorktreeHost checks how the host repository sees a conversation's
// worktree and, with repair, points the two pointers at each other again.
// Each hint matches the state it describes: what is gone is named with its
// path, and only what --repair can do is offered as a repair (it re-points
// and locks a registration; it re-creates nothing). With a git view the
// host's registration, <CommonDir>/worktrees/<AdminID>, is not the
// container's admin dir (that one is in the view, checked by
// worktree-container).
func (m *Manager) checkWorktreeHost(ctx context.Context, c store.Conversation, repair bool) control.DoctorCheck {
	wt := worktreeOf(c)
	ck := control.DoctorCheck{Conversation: c.ID, Check: "worktree-host"}
	// Nothing can be re-pointed at a repository or a folder that is gone.
	switch {
	case c.CommonDir != "" && !dirExists(c.CommonDir):
		ck.Status = "fail"
		ck.Detail = "the repository's git dir " + c.CommonDir + " is gone (moved?): move the repository back to " + c.Workspace + ", then run doctor again"
		return ck
	case !dirExists(c.Worktree):
		ck.Status = "fail"
		ck.Detail = "the worktree folder " + c.Worktree + " is gone: nothing on the host can bring its files back; `ohctl rm " + c.ID + "` ends the conversation and keeps branch " + c.Branch + " if it has commits"
		return ck
	}
	var h worktree.Health
	var herr error
	problem := func() (string, string) {
		h, herr = m.wt.Health(ctx, wt)
		switch {
		case herr != nil:
			return "fail", herr.Error()
		case !h.AdminExists:
			return "fail", "the host repository's registration " + wt.AdminDir + " is gone (deleted by hand?)"
		case !h.Registered:
			return "fail", "the host repository has no valid registration for " + c.Worktree
		case h.Prunable:
			return "fail", "the host repository reports the worktree prunable: " + h.PrunableReason
		case !h.GitdirResolves:
			return "fail", "the worktree's .git file and the host's registration " + wt.AdminDir + " do not point at each other"
		case !h.Locked:
			return "warn", "the worktree is not locked: a git worktree prune could remove it"
		}
		return "ok", "registered, locked, not prunable; gitdir resolves on the host"
	}
	ck.Status, ck.Detail = problem()
	switch {
	case ck.Status == "ok", herr != nil:
		return ck
	case !h.AdminExists:
		ck.Detail += ": --repair cannot re-create a registration; "
		if c.GitView != "" {
			// The container's admin dir is the view's: its git works on,
			// and the removal saves the work through it.
			ck.Detail += "git in the container is not affected (its admin dir is the view's, " + filepath.Join(c.GitView, "worktrees", c.AdminID) + "), and `ohctl rm " + c.ID + "` ends the conversation with its work saved (uncommitted files as a snapshot, the branch kept if it has commits)"
		} else {
			ck.Detail += "without it (git in the container uses it too) the worktree's uncommitted work cannot be snapshotted: " + discardAction(c)
		}
		return ck
	case h.Registered && !h.Prunable && h.GitdirResolves:
		ck.Repair = "lock the registration " + wt.AdminDir + " (write its locked file)"
	default:
		ck.Repair = "rewrite " + filepath.Join(c.Worktree, ".git") + " to name " + wt.AdminDir + " and " + filepath.Join(wt.AdminDir, "gitdir") + " to name " + filepath.Join(c.Worktree, ".git")
		if !h.Locked {
			ck.Repair += ", and lock the registration"
		}
	}
	if repair {
		if err := m.wt.Repair(ctx, wt); err != nil {
			ck.Detail += "; repair failed: " + err.Error()
			return ck
		}
		ck.Repaired = true
		ck.Status, ck.Detail = problem()
	}
	return ck
}

// workKept reports whether an ended conversation's work is still in its
// repository: its branch, its snapshot or a ref kept from its view (an
// error reading them counts as kept).
func (m *Manager) workKept(ctx context.Context, c store.Conversation) bool {
	if c.CommonDir == "" || !dirExists(c.CommonDir) {
		return false
	}
	refs, err := m.wt.ListKept(ctx, c.CommonDir, c.ID)
	if err != nil || len(refs) > 0 {
		return true
	}
	oid, err := m.wt.HostBranch(ctx, worktree.Worktree{CommonDir: c.CommonDir, Branch: worktree.BranchName(c.ID), UID: c.UID, GID: c.GID})
	return err != nil || (oid != "" && oid != c.StartCommit)
}

func keepItem(c store.Conversation) control.PruneItem {
	detail := c.Removal.Message
	if detail == "" {
		detail = fmt.Sprintf("branch %s kept; snapshot %s", c.Branch, c.Removal.SnapshotRef)
	}
	return control.PruneItem{Kind: "branch", ID: c.ID, Path: c.Repo, Action: "keep", Detail: detail}
}

// Doctor checks live conversations (or the one with id): the host
// repository does not report the worktree prunable, the worktree resolves
// inside the container, the container is hardened, and the broker
// answers. Without an id it also looks, in every repository ohd knows,
// for registrations whose worktree does not exist on the host (what a
// worktree created inside a container by another tool leaves behind).
// With repair it fixes what can be fixed from the host and says what it
// did.
func (m *Manager) Doctor(ctx context.Context, id string, repair bool) (control.DoctorReport, error) {
	rep := control.DoctorReport{Checks: []control.DoctorCheck{}}
	all := m.st.Conversations()
	convs := all
	if id != "" {
		c, err := m.Get(id)
		if err != nil {
			return rep, err
		}
		convs = []store.Conversation{c}
	}
	for _, c := range convs {
		if !c.State.Live() || c.State == store.StateProvisioning {
			continue
		}
		rep.Checks = append(rep.Checks, m.checkConversation(ctx, c, repair)...)
	}
	if id == "" {
		rep.Checks = append(rep.Checks, m.checkRepositories(ctx, all, repair)...)
		rep.Checks = append(rep.Checks, m.checkHostBoundary(ctx)...)
		rep.Checks = append(rep.Checks, m.checkEngine(nil)...)
	} else {
		rep.Checks = append(rep.Checks, m.checkEngine(&convs[0])...)
	}
	return rep, nil
}

// checkRepositories reports (and with repair removes) stale registrations
// in the repositories of every conversation ohd has had.
func (m *Manager) checkRepositories(ctx context.Context, convs []store.Conversation, repair bool) []control.DoctorCheck {
	var out []control.DoctorCheck
	live := map[string]bool{}
	var repos []string
	owners := map[string][2]int{}
	for _, c := range convs {
		if c.CommonDir == "" {
			continue
		}
		if c.State.Live() && c.AdminID != "" {
			live[filepath.Join(c.CommonDir, "worktrees", c.AdminID)] = true
		}
		if _, ok := owners[c.CommonDir]; !ok {
			owners[c.CommonDir] = [2]int{c.UID, c.GID}
			repos = append(repos, c.CommonDir)
		}
	}
	for _, common := range repos {
		out = append(out, m.checkRepository(ctx, common, owners[common][0], owners[common][1], live, repair)...)
	}
	return out
}

// DoctorRepo examines a repository ohd may not manage (ohctl doctor
// --repo): every registration whose worktree does not exist on the host
// (what the agent server's docker runtime leaves behind: worktrees made
// inside a container, under container-only paths), with its branch and
// how many commits that branch holds that no other ref has. With repair
// it removes those registrations (never a branch) and says what it did.
// Registrations of ohd's own live conversations are left to their checks.
func (m *Manager) DoctorRepo(ctx context.Context, path string, repair bool) (control.DoctorReport, error) {
	rep := control.DoctorReport{Checks: []control.DoctorCheck{}}
	repo, err := m.wt.Inspect(ctx, path)
	if err != nil {
		return rep, fmt.Errorf("%w: doctor --repo %s: %v", ErrInvalid, path, err)
	}
	if !repo.IsGit {
		return rep, fmt.Errorf("%w: doctor --repo %s: not inside a git repository: pass the path of one", ErrInvalid, path)
	}
	live := map[string]bool{}
	for _, c := range m.st.Conversations() {
		if c.CommonDir == repo.CommonDir && c.State.Live() && c.AdminID != "" {
			live[filepath.Join(c.CommonDir, "worktrees", c.AdminID)] = true
		}
	}
	rep.Checks = append(rep.Checks, m.checkRepository(ctx, repo.CommonDir, repo.UID, repo.GID, live, repair)...)
	if len(rep.Checks) == 0 {
		rep.Checks = append(rep.Checks, control.DoctorCheck{Check: "stale-worktree", Status: "ok",
			Detail: repo.CommonDir + ": every worktree registration points at a path that exists on the host"})
	}
	if repo.TopLevel != "" {
		rep.Checks = append(rep.Checks, m.checkRepoGitDirs(repo.TopLevel, repo.UID, repo.GID)...)
	}
	return rep, nil
}

// checkRepository reports (and with repair removes) the stale
// registrations of one repository, skipping those in live.
func (m *Manager) checkRepository(ctx context.Context, common string, uid, gid int, live map[string]bool, repair bool) []control.DoctorCheck {
	var out []control.DoctorCheck
	{
		stale, err := m.wt.StaleRegistrations(ctx, common)
		if err != nil {
			return append(out, control.DoctorCheck{Check: "stale-worktree", Status: "warn", Detail: err.Error()})
		}
		for _, s := range stale {
			if live[s.AdminDir] {
				continue // a conversation of ours: its own check repairs it
			}
			branch := s.Branch
			if branch == "" {
				branch = "(detached)"
			}
			own := ""
			if s.Branch != "" {
				switch n, err := m.wt.UniqueCommits(ctx, common, s.Branch, uid, gid); {
				case err != nil:
					own = "; its commits could not be counted: " + err.Error()
				case n == 0:
					own = "; the branch has no commit that another ref does not have"
				default:
					own = fmt.Sprintf("; the branch has %d commit(s) no other ref has: keep it (git log %s)", n, s.Branch)
				}
			}
			ck := control.DoctorCheck{
				Check: "stale-worktree", Status: "warn",
				Detail: fmt.Sprintf("%s: registration %s (branch %s) points at a path that does not exist on the host; git reports it prunable (made inside a container by another tool?)%s", common, s.Path, branch, own),
				Repair: fmt.Sprintf("remove the registration %s; branch %s and its commits stay", s.AdminDir, branch),
			}
			if s.Locked {
				ck.Repair = ""
				ck.Detail += fmt.Sprintf("; it is locked (%q): if nothing uses it, run `git -C %s worktree unlock %s`, then doctor --repair", s.LockReason, common, s.Path)
			}
			if repair && !s.Locked {
				if err := m.wt.RemoveStale(ctx, common, s); err != nil {
					ck.Detail += "; repair failed: " + err.Error()
				} else {
					ck.Status, ck.Repaired = "ok", true
					ck.Detail += fmt.Sprintf("; removed the registration %s, kept branch %s", s.AdminDir, branch)
				}
			}
			out = append(out, ck)
		}
	}
	return out
}

func (m *Manager) checkConversation(ctx context.Context, c store.Conversation, repair bool) []control.DoctorCheck {
	var out []control.DoctorCheck
	check := func(name, status, detail string) {
		out = append(out, control.DoctorCheck{Conversation: c.ID, Check: name, Status: status, Detail: detail})
	}
	if pr, ok := m.rt.(runtime.PolicyReporter); ok && c.Egress == store.EgressBroker {
		if enforced, why := pr.PolicyEnforcement(ctx); enforced {
			check("egress-policy", "ok", "the pod may send nothing (deny-all egress NetworkPolicy): "+why)
		} else {
			check("egress-policy", "warn", why)
		}
	}
	if c.InPlace {
		out = append(out, checkInPlaceHost(c))
	} else if c.Worktree != "" && c.AdminID != "" {
		out = append(out, m.checkWorktreeHost(ctx, c, repair))
	}
	if c.GitLayout == store.GitLayoutView && c.Worktree != "" {
		for _, l := range m.wt.StaleLocks(worktreeOf(c)) {
			check("publish-lock", "warn", l+" exists: publishing waits for it; ohd removes it at its next publish if an earlier ohd left it (older than this ohd), otherwise remove it when no git runs in the repository")
		}
	}
	switch {
	case c.PublishError != "":
		check("publish", "fail", c.PublishError+": the host branch stays at "+shortID(c.Published)+" until a publish succeeds")
	case c.PublishConflict != "":
		check("publish", "warn", c.PublishConflict)
	case c.GitLayout == store.GitLayoutView:
		check("publish", "ok", "the host's "+c.Branch+" is ohd's ("+shortID(c.Published)+"); the container never writes the repository")
	case c.GitLayout == store.GitLayoutShared:
		check("publish", "warn", "the container shares the repository's git dir (made before git views); it moves to its own view when its container next starts")
	}
	if c.Runtime != "local" && c.State == store.StateRunning && c.ContainerID != "" {
		if c.InPlace {
			out = append(out, m.checkInPlaceContainer(ctx, c))
		}
		if c.Worktree != "" {
			var stdout, stderr bytes.Buffer
			code, err := m.rt.Exec(ctx, c.ContainerID, m.LimitedCmd(ctx, c, []string{"git", "-C", c.Worktree, "status", "--short", "--branch"}, ""),
				runtime.ExecOptions{Stdout: &stdout, Stderr: &stderr})
			want := "## " + c.Branch
			switch {
			case err != nil:
				check("worktree-container", "fail", err.Error())
			case code != 0 || !strings.HasPrefix(stdout.String(), want):
				check("worktree-container", "fail", fmt.Sprintf("git status in the container exited %d: %s", code, strings.TrimSpace(stderr.String()+stdout.String()))+containerGitHint(c))
			default:
				check("worktree-container", "ok", "git status in the container: "+strings.SplitN(stdout.String(), "\n", 2)[0])
			}
		}
		out = append(out, m.checkPointers(ctx, c))
		uid, gid := agentOf(c)
		problems, err := m.rt.Hardening(ctx, c.ContainerID, uid, gid)
		switch {
		case err != nil:
			check("container-hardening", "fail", err.Error())
		case len(problems) > 0:
			check("container-hardening", "fail", strings.Join(problems, "; "))
		default:
			check("container-hardening", "ok", fmt.Sprintf("user %d:%d (the agent's own, not the repository owner's %d), all capabilities dropped, no-new-privileges, limits, port on 127.0.0.1 only", uid, gid, c.UID))
		}
	}
	if c.Runtime != "local" {
		out = append(out, m.checkGitDirs(c))
	}
	dir := m.brokerDir(c.ID)
	cl := broker.NewClient(filepath.Join(dir, "broker.sock"), filepath.Join(dir, "token"))
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := cl.Whoami(cctx)
	cancel()
	if err != nil {
		check("broker", "fail", err.Error())
	} else {
		check("broker", "ok", "answers on "+filepath.Join(dir, "broker.sock"))
	}
	return out
}

// containerGitHint says, for a conversation whose git fails in its
// container, which of the paths that git needs is gone on the host and
// what to do; "" when all are there (the failure is then in their
// contents, or the worktree-host check names what is gone).
func containerGitHint(c store.Conversation) string {
	if c.CommonDir != "" && !dirExists(c.CommonDir) {
		return ""
	}
	gone := viewGone(c)
	if gone == "" {
		return ""
	}
	return "; " + gone + ": nothing on the host can rebuild what the agent kept there, and the work can no longer be saved through it: " + discardAction(c)
}

// viewGone describes what of conv's git view is missing on the host, ""
// if nothing is (or it has none, or its worktree folder is gone: then
// nothing is saved through the view anyway). Only lstat runs: the view is
// the agent's to write, so nothing in it is followed or read.
func viewGone(c store.Conversation) string {
	if c.GitView == "" || c.AdminID == "" || !dirExists(c.Worktree) {
		return ""
	}
	admin := filepath.Join(c.GitView, "worktrees", c.AdminID)
	switch {
	case !dirExists(c.GitView):
		return "the conversation's git view " + c.GitView + " (its git dir in the container, mounted at " + c.CommonDir + ") is gone"
	case !dirExists(admin):
		return "the container's admin dir " + admin + " (at " + filepath.Join(c.CommonDir, "worktrees", c.AdminID) + " in the container; on the host that path is the host's own registration, a different directory) is gone"
	}
	return ""
}

// discardAction is the way out for a conversation whose uncommitted work
// cannot be saved any more: what is committed stays on a branch of the
// user's naming, the rest is theirs to copy, and --discard ends it.
func discardAction(c store.Conversation) string {
	return "keep the commits of branch " + c.Branch + " with `git -C " + c.Repo + " branch <name> " + c.Branch + "`, " +
		"copy what else you need from " + c.Worktree + ", then end the conversation with `ohctl rm --discard " + c.ID + "`"
}

// registrationGone reports whether conv's worktree has lost the host's
// registration (<CommonDir>/worktrees/<AdminID> without its HEAD) while
// its folder is still there.
func registrationGone(c store.Conversation) bool {
	if c.AdminID == "" || c.CommonDir == "" || !dirExists(c.CommonDir) || !dirExists(c.Worktree) {
		return false
	}
	st, err := os.Lstat(filepath.Join(c.CommonDir, "worktrees", c.AdminID, "HEAD"))
	return err != nil || !st.Mode().IsRegular()
}

// restoreGitDirs brings the git directories conv's agent made in the
// user's tree (moved out at its removal) back as files next to the
// restored worktree at path: a tar, which no git opens, never a live git
// directory in a tree the user's git runs in. Where it cannot be written
// (too large, no room), out says where they are kept.
func (m *Manager) restoreGitDirs(c store.Conversation, path string, out *control.RestoreResult) {
	if c.Removal == nil || c.Removal.GitDirsKept == "" {
		return
	}
	kept := c.Removal.GitDirsKept
	dst := path + ".agent-git-dirs.tar"
	moved, err := gitboundary.Archive(kept, dst, c.UID, c.GID)
	if len(moved) == 0 && err == nil {
		return
	}
	out.GitDirs, out.GitDirsKept = moved, kept
	if err != nil {
		if len(out.GitDirs) == 0 {
			out.GitDirs = c.Removal.GitDirsMoved
		}
		out.GitDirsNote = fmt.Sprintf("the git directories the agent made are not archived (%v): they stay in %s (readable by root only); never copy them into a tree your git runs in", err, kept)
		m.log.Warn("could not archive the agent's git directories for a restore", "id", c.ID, "kept", kept, "err", err)
		return
	}
	out.GitDirsArchive = dst
}

// gitDirsKeptNote is what a restore that has nothing to restore says of
// the git directories the agent made, if its removal moved any out.
func gitDirsKeptNote(c store.Conversation) string {
	if c.Removal == nil || len(c.Removal.GitDirsMoved) == 0 {
		return ""
	}
	return fmt.Sprintf("; the git directories the agent made in your tree (%s) were moved out at the removal and are kept in %s (readable by root only; never copy them into a tree your git runs in)",
		strings.Join(c.Removal.GitDirsMoved, ", "), c.Removal.GitDirsKept)
}
