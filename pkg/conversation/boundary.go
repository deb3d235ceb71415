package conversation

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ohd-dev/ohd/pkg/control"
	"github.com/ohd-dev/ohd/pkg/gitboundary"
	"github.com/ohd-dev/ohd/pkg/openhands"
	"github.com/ohd-dev/ohd/pkg/runtime"
	"github.com/ohd-dev/ohd/pkg/store"
)

// The ownership boundary (package gitboundary): a containerized
// conversation's agent runs as a uid of its own (Config.AgentUID), the
// trees it writes are shared with it through ACLs before its container
// starts (shareTrees), and given back at the removal (releaseTrees).

// agentOf returns the user conv's container runs as: the record's agent
// uid, or (the local runtime's agent runs on the host as the user; a
// record made before agent uids, until its container is next created)
// the repository owner.
func agentOf(conv store.Conversation) (uid, gid int) {
	if conv.Runtime == "local" || conv.AgentUID == 0 {
		return conv.UID, conv.GID
	}
	return conv.AgentUID, conv.AgentGID
}

// boundaryIDs are conv's owner and agent.
func boundaryIDs(conv store.Conversation) gitboundary.IDs {
	uid, gid := agentOf(conv)
	return gitboundary.IDs{Owner: conv.UID, OwnerGID: conv.GID, Agent: uid, AgentGID: gid}
}

// separated says whether conv's agent has a uid of its own (the trees are
// shared and released).
func separated(conv store.Conversation) bool {
	return conv.Runtime != "local" && conv.AgentUID != 0
}

// hostGit caches the host git check: its version does not change under a
// running ohd often enough to run git on every create.
type hostGit struct {
	once sync.Once
	err  error
}

// checkBoundary refuses, before anything is made, a create the boundary
// cannot hold: an agent uid that is root or the repository owner's, a host
// git without the ownership check, a workspace (or worktree root) on a
// filesystem without ACLs.
func (m *Manager) checkBoundary(ctx context.Context, owner, ownerGID int, trees ...string) error {
	if m.rt.Kind() == "local" {
		return nil
	}
	ids := gitboundary.IDs{Owner: owner, OwnerGID: ownerGID, Agent: m.cfg.AgentUID, AgentGID: m.cfg.AgentGID}
	if err := ids.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	m.git.once.Do(func() { _, m.git.err = gitboundary.CheckGit(context.WithoutCancel(ctx)) })
	if m.git.err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, m.git.err)
	}
	for _, t := range trees {
		if t == "" {
			continue
		}
		if err := gitboundary.CheckFilesystem(t); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	return nil
}

// shareConvDir is worktree.AddOptions.Share for conv.
func (m *Manager) shareConvDir(conv store.Conversation) func(string) error {
	if !separated(conv) {
		return nil
	}
	return func(dir string) error { return gitboundary.ShareDir(dir, boundaryIDs(conv)) }
}

// shareTrees shares every tree conv's agent writes with its uid, before
// its container starts: the git view (small), and the in-place folder or
// the plain folder (a walk; a worktree inherits from its conversation
// directory, see shareConvDir, except on a later start, when files the
// user brought in since are shared too). The user's directories in the
// folder or worktree are lent to the agent's uid (a walk of directories
// only) and given back at the removal (releaseTree). The worktree's own .git file the
// agent only reads: a pointer the user's git follows.
func (m *Manager) shareTrees(conv store.Conversation, start bool) (err error) {
	if !separated(conv) {
		return nil
	}
	ids := boundaryIDs(conv)
	// What the user makes in the tree from now on is not the agent's to
	// write (the default ACLs carry no entry of its) until the watcher
	// shares it, as it comes (watchtree.go). Its walk, which places a
	// watch on every directory, runs beside the lending and sharing walks
	// below (none of them makes a name it would be told of), and ends
	// before the container starts, as before. The boundary does not
	// depend on it: what it has not shared, the agent cannot write.
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		m.watchNow(conv)
	}()
	defer func() {
		<-watched
		if err != nil {
			m.unwatch(conv.ID, false) // as if never started: the tree was not shared
		}
	}()
	var trees []string
	switch {
	case conv.InPlace:
		trees = append(trees, conv.Repo)
	case conv.Worktree != "":
		if start {
			trees = append(trees, conv.Worktree)
		}
	default:
		trees = append(trees, conv.Workspace)
	}
	// The user's directories in the tree the agent writes are lent to
	// the agent's uid first (before Apply, so what is recorded is what
	// the user had), so that an implicit bare repository the agent fills
	// into one is another user's to the user's git (gitboundary.Borrow).
	// Not the git view's: the user's git never runs there.
	if lent := releasedTree(conv); lent != "" {
		st, err := gitboundary.Borrow(lent, ids)
		if err != nil && !(conv.Worktree != "" && errors.Is(err, fs.ErrNotExist)) {
			return err
		}
		m.log.Debug("lent the user's directories to the agent's uid", "id", conv.ID, "tree", lent, "dirs", st.Dirs, "changed", st.Changed, "took", st.Duration)
	}
	for _, t := range trees {
		st, err := gitboundary.Apply(t, ids)
		if err != nil {
			return err
		}
		m.log.Debug("shared a tree with the agent's uid", "id", conv.ID, "tree", t, "dirs", st.Dirs, "files", st.Files, "changed", st.Changed, "took", st.Duration)
	}
	if conv.GitView != "" {
		// The git view, which ohd's git writes in too and no git of the
		// user's reads: what either makes stays the other's to write.
		view := filepath.Dir(conv.GitView)
		st, err := gitboundary.ApplyAll(view, ids)
		if err != nil {
			return err
		}
		m.log.Debug("shared the git view with the agent's uid", "id", conv.ID, "tree", view, "dirs", st.Dirs, "files", st.Files, "changed", st.Changed, "took", st.Duration)
	}
	if conv.Worktree != "" {
		if err := gitboundary.ReadOnly(filepath.Join(conv.Worktree, ".git"), ids); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// keptGitDirs is where the git directories the agent made in conv's tree
// go at its removal.
func (m *Manager) keptGitDirs(id string) string {
	return filepath.Join(m.cfg.KeptRoot, id, "git-dirs")
}

// releaseTree gives conv's tree back to its owner at the removal, after
// the agent has stopped (gitboundary.Release): the agent's git
// directories moved out to keptGitDirs, and (but in a worktree, deleted
// next) its files chowned back and the ACL entries removed. Idempotent: an
// interrupted removal runs it again.
func (m *Manager) releaseTree(conv store.Conversation, moveOnly bool) (gitboundary.ReleaseResult, error) {
	tree := releasedTree(conv)
	if !separated(conv) || tree == "" || m.cfg.KeptRoot == "" {
		return gitboundary.ReleaseResult{}, nil
	}
	if _, err := os.Lstat(tree); errors.Is(err, fs.ErrNotExist) {
		return gitboundary.ReleaseResult{}, nil
	}
	if conv.InPlace {
		// The folder is shared with other conversations' agents
		// (sharersOf): it is given back when the last of them ends, whose
		// release then moves out every agent's git directories. Releasing
		// it now would take their write access away mid-work.
		if others := m.sharersOf(conv.Repo, conv.ID); len(others) > 0 {
			m.log.Info("the folder is shared: it is given back to its owner when the last conversation on it ends", "id", conv.ID, "tree", tree, "others", len(others))
			return gitboundary.ReleaseResult{}, nil
		}
	}
	res, err := gitboundary.Release(tree, gitboundary.ReleaseOptions{IDs: boundaryIDs(conv), KeptDir: m.keptGitDirs(conv.ID), MoveOnly: moveOnly})
	if err != nil {
		return res, err
	}
	if len(res.Moved) > 0 {
		m.log.Info("moved the agent's git directories out of the user's tree", "id", conv.ID, "tree", tree, "to", m.keptGitDirs(conv.ID), "moved", res.Moved)
	}
	return res, nil
}

// releasedTree is the tree of the user's that conv's agent wrote.
func releasedTree(conv store.Conversation) string {
	switch {
	case conv.InPlace:
		return conv.Repo
	case conv.Worktree != "":
		return conv.Worktree
	}
	return conv.Workspace
}

// checkGitDirs is doctor's report of the git directories conv's agent made
// in the user's tree (ohctl rm moves them out).
func (m *Manager) checkGitDirs(conv store.Conversation) control.DoctorCheck {
	ck := control.DoctorCheck{Conversation: conv.ID, Check: "agent-git-dirs"}
	tree := releasedTree(conv)
	if !separated(conv) {
		ck.Status, ck.Detail = "warn", fmt.Sprint("its container runs as the repository owner (made before the agent had a uid of its own): your git cannot tell a git directory the agent makes from yours until its container is next created with the agent's uid; do not run git in directories it wrote meanwhile")
		return ck
	}
	found, took, err := gitboundary.FindGitDirs(tree, boundaryIDs(conv))
	if err != nil {
		ck.Status, ck.Detail = "warn", err.Error()
		return ck
	}
	var agent []string
	for _, f := range found {
		if f.AgentMade {
			agent = append(agent, f.Rel+" ("+f.Kind+")")
		}
	}
	if len(agent) == 0 {
		ck.Status, ck.Detail = "ok", fmt.Sprintf("no git directory of the agent's in %s (looked in %v)", tree, took.Round(time.Millisecond))
		return ck
	}
	ck.Status = "warn"
	ck.Detail = fmt.Sprintf("the agent made git directories in %s: %s; your git refuses each (another user owns it: a directory of yours in the tree is lent to the agent's uid while the conversation lives, so an implicit bare repository filled into it is refused too; one you make meanwhile the agent cannot write until it is lent); `ohctl rm %s` moves every one out to %s",
		tree, strings.Join(agent, ", "), conv.ID, m.keptGitDirs(conv.ID))
	return ck
}

// separateAgent gives a conversation made before agent uids (its container
// ran as the repository owner) today's boundary when its container is
// next created: the old container goes (a restart would keep its user),
// and the record gets the agent's uid; shareTrees then shares its trees.
// A host that cannot hold the boundary (checkBoundary) stops the start
// with the reason.
func (m *Manager) separateAgent(ctx context.Context, c store.Conversation) (store.Conversation, error) {
	if c.Runtime == "local" || c.AgentUID != 0 {
		return c, nil
	}
	if err := m.checkBoundary(ctx, c.UID, c.GID, releasedTree(c)); err != nil {
		return c, fmt.Errorf("it was made before the agent had a uid of its own and cannot get one here: %w", err)
	}
	if c.ContainerID != "" {
		m.retire(c.ContainerID)
		if err := m.rt.Remove(ctx, c.ContainerID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			return c, fmt.Errorf("remove its container, which runs as the repository owner: %w", err)
		}
	}
	c, err := m.st.UpdateConversation(c.ID, func(r *store.Conversation) error {
		r.AgentUID, r.AgentGID = m.cfg.AgentUID, m.cfg.AgentGID
		r.ContainerID, r.HostPort = "", 0
		return nil
	})
	if err != nil {
		return c, err
	}
	// What the old container's user owned is the agent's now: the
	// broker's directory is made anew for it, the inner server's state
	// given to it.
	if err := m.br.Close(c.ID); err != nil {
		return c, fmt.Errorf("close its broker: %w", err)
	}
	if err := os.RemoveAll(m.brokerDir(c.ID)); err != nil {
		return c, fmt.Errorf("remove its broker directory: %w", err)
	}
	if m.cfg.InnerRoot != "" {
		if err := chownTree(openhands.DirsOf(m.cfg.InnerRoot, c.ID).Root, c.AgentUID, c.AgentGID); err != nil {
			return c, fmt.Errorf("give its inner state to the agent's uid: %w", err)
		}
	}
	if _, err := m.openBroker(ctx, c); err != nil {
		return c, fmt.Errorf("broker: %w", err)
	}
	m.log.Info("the conversation's agent has a uid of its own from this container on", "id", c.ID, "agent_uid", c.AgentUID)
	return c, nil
}

// chownTree gives every inode under root (ohd's own state, not a user's
// tree) to uid:gid, never following a symlink.
func chownTree(root string, uid, gid int) error {
	if os.Geteuid() != 0 {
		return nil
	}
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// checkHostBoundary is doctor's report of what the boundary needs from the
// host: the agent's own uid, a git that refuses what another user owns,
// ACLs on the worktree root's filesystem.
func (m *Manager) checkHostBoundary(ctx context.Context) []control.DoctorCheck {
	if m.rt.Kind() == "local" {
		return nil
	}
	var out []control.DoctorCheck
	check := func(name, status, detail string) {
		out = append(out, control.DoctorCheck{Check: name, Status: status, Detail: detail})
	}
	if m.cfg.AgentUID == 0 {
		check("agent-uid", "fail", "containers run as root: run ohd serve with --agent-uid of an unprivileged uid of its own")
	} else {
		check("agent-uid", "ok", fmt.Sprintf("containers run as %d:%d, a uid of their own: your git refuses every git directory the agent makes", m.cfg.AgentUID, m.cfg.AgentGID))
	}
	switch v, err := gitboundary.CheckGit(ctx); {
	case errors.Is(err, gitboundary.ErrOldGit):
		check("host-git", "fail", err.Error())
	case err != nil:
		check("host-git", "warn", err.Error())
	default:
		check("host-git", "ok", fmt.Sprintf("%s refuses a repository another user owns (2.35.2 or later)", v))
	}
	if err := gitboundary.CheckFilesystem(m.wt.Root()); err != nil {
		check("worktree-root-acl", "fail", err.Error())
	} else {
		check("worktree-root-acl", "ok", m.wt.Root()+" is on a filesystem with POSIX ACLs")
	}
	return out
}

// checkRepoGitDirs is doctor --repo's report of the git directories in a
// repository's work tree that are not its own: the agent's (another uid's,
// which the user's git refuses, but for a bare repository's parts in a
// directory of the user's), and every implicit bare repository and nested
// .git an earlier ohd's agent, which ran as the user, may have left
// (nothing when there is none).
func (m *Manager) checkRepoGitDirs(top string, uid, gid int) []control.DoctorCheck {
	agent := m.cfg.AgentUID
	if agent == 0 {
		agent = -1 // the local runtime: no agent uid, nothing is the agent's
	}
	ids := gitboundary.IDs{Owner: uid, OwnerGID: gid, Agent: agent, AgentGID: m.cfg.AgentGID}
	found, took, err := gitboundary.FindGitDirs(top, ids)
	if err != nil {
		return []control.DoctorCheck{{Check: "git-dirs", Status: "warn", Detail: err.Error()}}
	}
	subs := submodulePaths(top)
	var out []control.DoctorCheck
	for _, f := range found {
		ck := control.DoctorCheck{Check: "git-dirs", Status: "warn"}
		switch {
		case !f.AgentMade && f.UID == uid && f.Kind != gitboundary.KindBare && f.Kind != gitboundary.KindBareParts && !subs[filepath.Dir(f.Rel)]:
			ck.Detail = fmt.Sprintf("%s: %s %s is a repository of yours that is no submodule of this one: if you did not make it (an agent of an earlier ohd ran as you and could), your git runs its configuration there; check `git -C %s config --list --show-origin` or move it out of the tree", top, f.Kind, f.Rel, filepath.Join(top, filepath.Dir(f.Rel)))
		case f.AgentMade:
			ck.Detail = fmt.Sprintf("%s: %s %s made by ohd's agent (uid %d); ohctl rm of its conversation moves it out, or move it out of the tree yourself (never run git in it)", top, f.Kind, f.Rel, f.UID)
		case f.UID != uid:
			ck.Detail = fmt.Sprintf("%s: %s %s belongs to uid %d, not to the repository's owner %d: your git refuses it; if you did not make it, move it out of the tree", top, f.Kind, f.Rel, f.UID, uid)
		case f.Kind == gitboundary.KindBare:
			ck.Detail = fmt.Sprintf("%s: %s %s is a repository your git opens by discovery (git log there reads its config): if you did not make it (an agent of an earlier ohd ran as you), move it out of the tree; set safe.bareRepository=explicit in your global git config", top, f.Kind, f.Rel)
		default:
			// The user's own nested repository or submodule: nothing to say.
			continue
		}
		out = append(out, ck)
	}
	// A clean work tree adds nothing to the report.
	m.log.Debug("doctor looked for git directories", "tree", top, "found", len(out), "took", took)
	return out
}

// submodulePaths are the paths .gitmodules at top names (read as text, no
// git run), relative to top.
func submodulePaths(top string) map[string]bool {
	out := map[string]bool{}
	b, err := os.ReadFile(filepath.Join(top, ".gitmodules"))
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if ok && strings.TrimSpace(k) == "path" {
			out[filepath.Clean(strings.TrimSpace(v))] = true
		}
	}
	return out
}

// SystemGitConfigFile is the file of the conversation's broker directory
// that the container's git reads as its system configuration
// (GIT_CONFIG_SYSTEM=ContainerSystemGitConfig): the image's own
// /etc/gitconfig, included, and safe.directory=*. The agent's uid is not
// the tree's owner, so its git needs safe.directory; the command scope
// (worktree.ContainerGitConfig) has it too, but git clears that scope for
// the git it runs on a local repository (upload-pack for `git fetch` from
// the view's remote "host"), while the system scope stays.
const (
	SystemGitConfigFile      = "gitconfig-system"
	ContainerSystemGitConfig = ContainerBrokerDir + "/" + SystemGitConfigFile
)

// writeSystemGitConfig writes SystemGitConfigFile into dir for conv.
func writeSystemGitConfig(conv store.Conversation, dir string) error {
	uid, gid := agentOf(conv)
	return writeOwnedFile(filepath.Join(dir, SystemGitConfigFile), []byte("[include]\n\tpath = /etc/gitconfig\n[safe]\n\tdirectory = *\n"), 0o444, uid, gid)
}
