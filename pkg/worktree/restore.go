package worktree

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/ohd-dev/ohd/pkg/hardgit"
	"github.com/ohd-dev/ohd/pkg/worktree/admindir"
	"github.com/ohd-dev/ohd/pkg/worktree/journal"
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
	// uncommitted changes ("" if there was none); Staged says its index
	// state (what was staged) was recreated too.
	Snapshot string
	Staged   bool
	// Branches are the local branches made from the side branches kept
	// from the conversation's view (refs/ohd/kept/<id>/heads/<name>): the
	// same name when it was free, else restored-<id prefix>/<name>.
	Branches []string
	// Stash is the stash commit kept from the view, put into the
	// repository's stash (refs/stash: `git stash list` shows it) BELOW
	// the user's own entries (the user's stash@{0} stays theirs), or "".
	Stash        string
	StashEntries int
	// Tags are the tags made from the view's tags kept by the removal
	// (refs/ohd/kept/<id>/tags/<name>): the same name when it was free,
	// else restored-<id prefix>/<name>.
	Tags []string
	// Already says the work was restored at Path before (a restore whose
	// answer was lost, ohd killed right after it finished): asked again
	// for the same path, Restore answers so instead of refusing.
	Already bool
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
	branch := "refs/heads/" + BranchName(id)
	// A restore that was interrupted (ohd killed) left its journal: what
	// it made is undone first, and this one does it all again.
	j, err := journal.Read(m.lockDir, id, m.log)
	if err != nil {
		return res, fmt.Errorf("worktree restore %s: %w", id, err)
	}
	if j != nil {
		if err := m.undoRestore(ctx, opts.CommonDir, j); err != nil {
			return res, fmt.Errorf("worktree restore %s: undo the interrupted restore into %s: %w", id, j.Into, err)
		}
		if opts.Into == "" {
			into = j.Into
		}
	}
	if where := admindir.CheckedOutIn(opts.CommonDir, branch); where != "" {
		if j == nil && admindir.SamePath(where, into) {
			// Finished before (its journal is gone only at the very end):
			// the retry of a restore whose answer was lost succeeds.
			m.log.Info("conversation work already restored", "conversation", id, "path", where)
			return RestoreResult{Path: where, Branch: BranchName(id), Already: true}, nil
		}
		return res, fmt.Errorf("worktree restore %s: %w: the conversation's work is already restored in %s (branch %s is checked out there): work there, or remove that worktree (git worktree remove %s) to restore again",
			id, ErrExists, where, BranchName(id), where)
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
		return res, fmt.Errorf("worktree restore %s: %w", id, hardgit.OwnerError(uid, m.euid))
	}
	ct := commonTarget(opts.CommonDir, uid, gid)
	refs, err := m.readRefsUnder(ctx, ct, branch, KeptPrefix(id), SnapshotRef(id))
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
	if j == nil {
		j = &journal.Journal{ID: id}
	}
	j.Into, j.CommonDir = into, opts.CommonDir
	j.Holder = journal.ProcessIdentity(os.Getpid())
	j.CreatedBranch, j.CreatedAt = "", ""
	if slices.Contains(args, "-b") {
		j.CreatedBranch, j.CreatedAt = res.Branch, args[len(args)-1]
	}
	if err := journal.Write(m.lockDir, j); err != nil {
		return res, fmt.Errorf("worktree restore %s: %w", id, err)
	}
	m.onStep("restore")
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
	_, err = m.git(ctx, gitTarget{Dir: opts.Repo, GitDir: opts.CommonDir, UID: uid, GID: gid}, runOpts{}, args...)
	if err != nil {
		unlock()
		_ = os.RemoveAll(into)
		return res, fmt.Errorf("worktree restore %s: %w", id, err)
	}
	admin, err := admindir.Find(opts.CommonDir, into)
	unlock()
	m.onStep("restore-checkout")
	if err != nil {
		return res, fmt.Errorf("worktree restore %s: %w", id, err)
	}
	t := gitTarget{Dir: into, GitDir: admin, WorkTree: into, UID: uid, GID: gid}
	memo := &filterMemo{}
	if _, err := m.git(ctx, t, runOpts{Filters: memo}, "reset", "--hard", "--no-recurse-submodules", "--quiet"); err != nil {
		return res, fmt.Errorf("worktree restore %s: check out %s in %s: %w", id, res.Branch, into, err)
	}
	if res.Snapshot != "" {
		// Two-tree merge from HEAD to the snapshot updates the index and
		// the files (deleting what the snapshot lacks); resetting the
		// index then leaves the work as uncommitted changes.
		if _, err := m.git(ctx, t, runOpts{Filters: memo}, "read-tree", "-m", "-u", "HEAD", res.Snapshot); err != nil {
			return res, fmt.Errorf("worktree restore %s: apply snapshot %s in %s: %w", id, res.Snapshot, into, err)
		}
		// The index as it was: the snapshot's second parent, if it has
		// one, records what was staged; otherwise nothing was.
		idx, staged, err := m.revParse(ctx, t, res.Snapshot+"^2^{tree}")
		if err != nil {
			return res, fmt.Errorf("worktree restore %s: %w", id, err)
		}
		if staged {
			_, err = m.git(ctx, t, runOpts{}, "read-tree", idx)
		} else {
			_, err = m.git(ctx, t, runOpts{Filters: memo}, "reset", "--quiet", "--no-recurse-submodules")
		}
		if err != nil {
			return res, fmt.Errorf("worktree restore %s: recreate the index: %w", id, err)
		}
		res.Staged = staged
	}
	if err := m.restoreKept(ctx, ct, id, refs, j, &res); err != nil {
		return res, fmt.Errorf("worktree restore %s in %s: %w", id, into, err)
	}
	if err := journal.Remove(m.lockDir, id); err != nil {
		return res, fmt.Errorf("worktree restore %s: %w", id, err)
	}
	res.Path = into
	m.log.Info("conversation work restored", "conversation", id, "path", into, "branch", res.Branch, "snapshot", res.Snapshot,
		"branches", len(res.Branches), "stash", res.Stash)
	return res, nil
}

// restoreKept makes local branches of the side branches kept from the
// conversation's view (same name if free, else restored-<id prefix>/name)
// and pushes the kept stash onto the repository's stash. refs are the
// refs read under KeptPrefix(id).
func (m *Manager) restoreKept(ctx context.Context, ct gitTarget, id string, refs map[string]string, j *journal.Journal, res *RestoreResult) error {
	heads := KeptPrefix(id) + "heads/"
	var names []string
	for ref := range refs {
		if name, ok := strings.CutPrefix(ref, heads); ok && name != BranchName(id) {
			names = append(names, name)
		}
	}
	if len(names) > 0 {
		sort.Strings(names)
		have, err := m.readRefsUnder(ctx, ct, "refs/heads/")
		if err != nil {
			return err
		}
		var tx strings.Builder
		for _, name := range names {
			local := name
			if _, taken := have["refs/heads/"+local]; taken {
				local = "restored-" + id[:8] + "/" + name
			}
			if _, taken := have["refs/heads/"+local]; taken || !validRefName("refs/heads/"+local) {
				continue // restored before: the branch is there
			}
			fmt.Fprintf(&tx, "create refs/heads/%s %s\n", local, refs[heads+name])
			res.Branches = append(res.Branches, local)
		}
		if tx.Len() > 0 {
			if _, err := m.git(ctx, ct, runOpts{Stdin: []byte(tx.String())}, "update-ref", "-m", "ohd: restore conversation "+id, "--stdin"); err != nil {
				return fmt.Errorf("make the side branches: %w", err)
			}
		}
	}
	if err := m.restoreTags(ctx, ct, id, refs, res); err != nil {
		return err
	}
	if stash := refs[KeptRef(id, "refs/stash")]; stash != "" {
		// The agent's entries go BELOW the user's: `git stash pop` goes
		// on popping what the user stashed. refs/stash is rebuilt, oldest
		// first: the agent's (stash@{n} ... stash@{1}, then refs/stash of
		// the view), then the user's with their messages. The user's
		// entries are read once and kept in the journal, so a restore
		// killed half-way rebuilds from them, not from its own half.
		var older []int
		entries := KeptPrefix(id) + "stash-entries/" // see stashEntryRef
		for ref := range refs {
			if n, err := strconv.Atoi(strings.TrimPrefix(ref, entries)); strings.HasPrefix(ref, entries) && err == nil && n > 0 {
				older = append(older, n)
			}
		}
		sort.Sort(sort.Reverse(sort.IntSlice(older)))
		if !j.UserStashRead {
			user, err := m.stashEntries(ctx, ct)
			if err != nil {
				return fmt.Errorf("read the repository's stash: %w", err)
			}
			j.UserStash, j.UserStashRead = user, true
			if err := journal.Write(m.lockDir, j); err != nil {
				return err
			}
		}
		if _, err := m.git(ctx, ct, runOpts{}, "update-ref", "-d", "refs/stash"); err != nil {
			return fmt.Errorf("restore the stash: %w", err)
		}
		m.onStep("restore-stash-cleared")
		push := func(oid, msg string) error {
			_, err := m.git(ctx, ct, runOpts{}, "update-ref", "--create-reflog", "-m", msg, "refs/stash", oid)
			return err
		}
		for _, n := range older {
			if err := push(refs[entries+strconv.Itoa(n)], "ohd: stash of conversation "+id); err != nil {
				return fmt.Errorf("restore the stash: %w", err)
			}
		}
		if err := push(stash, "ohd: stash of conversation "+id); err != nil {
			return fmt.Errorf("restore the stash: %w", err)
		}
		for i := len(j.UserStash) - 1; i >= 0; i-- {
			if err := push(j.UserStash[i].OID, j.UserStash[i].Message); err != nil {
				return fmt.Errorf("put the user's stash back on top: %w", err)
			}
		}
		res.Stash = stash
		res.StashEntries = len(older) + 1
	}
	return nil
}

// stashEntries lists refs/stash's entries, newest first (none if there
// is no stash).
func (m *Manager) stashEntries(ctx context.Context, ct gitTarget) ([]journal.StashEntry, error) {
	have, err := m.readRefsUnder(ctx, ct, "refs/stash")
	if err != nil || have["refs/stash"] == "" {
		return nil, err
	}
	out, err := m.git(ctx, ct, runOpts{}, "log", "-g", "--no-decorate", "--format=%H%x09%gs", "refs/stash", "--")
	if err != nil {
		return nil, err
	}
	var list []journal.StashEntry
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		oid, msg, ok := strings.Cut(line, "\t")
		if !ok || !isHexID(oid) {
			continue
		}
		list = append(list, journal.StashEntry{OID: oid, Message: msg})
	}
	return list, nil
}

// restoreTags makes tags from the view's tags the removal kept
// (refs/ohd/kept/<id>/tags/<name>): the same name if free, else
// restored-<id prefix>/<name>; a tag already there with the same object
// (a retried restore) is left as it is.
func (m *Manager) restoreTags(ctx context.Context, ct gitTarget, id string, refs map[string]string, res *RestoreResult) error {
	prefix := KeptPrefix(id) + "tags/"
	var names []string
	for ref := range refs {
		if name, ok := strings.CutPrefix(ref, prefix); ok {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names)
	have, err := m.readRefsUnder(ctx, ct, "refs/tags/")
	if err != nil {
		return err
	}
	var tx strings.Builder
	for _, name := range names {
		oid := refs[prefix+name]
		local := name
		for _, cand := range []string{name, "restored-" + id[:8] + "/" + name} {
			local = cand
			if have["refs/tags/"+cand] == "" || have["refs/tags/"+cand] == oid {
				break
			}
		}
		switch cur := have["refs/tags/"+local]; {
		case cur == oid:
			res.Tags = append(res.Tags, local) // restored before
			continue
		case cur != "" || !validRefName("refs/tags/"+local):
			continue
		}
		fmt.Fprintf(&tx, "create refs/tags/%s %s\n", local, oid)
		res.Tags = append(res.Tags, local)
	}
	if tx.Len() > 0 {
		if _, err := m.git(ctx, ct, runOpts{Stdin: []byte(tx.String())}, "update-ref", "-m", "ohd: restore conversation "+id, "--stdin"); err != nil {
			return fmt.Errorf("make the tags: %w", err)
		}
	}
	return nil
}
