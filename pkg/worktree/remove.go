package worktree

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ohd-dev/ohd/pkg/hardgit"
	"github.com/ohd-dev/ohd/pkg/worktree/admindir"
	"github.com/ohd-dev/ohd/pkg/worktree/snapshot"
)

// RemoveOptions says how Remove treats unsaved work.
type RemoveOptions struct {
	// Discard skips the snapshot and deletes the branch, any snapshot ref
	// and any refs kept from the view, whatever they hold.
	Discard bool
	// Undo is the removal of a create that never reached running (a
	// failed or interrupted create): there is no agent work to save, so no
	// snapshot is taken (a half-made checkout is not work), and the branch
	// is deleted only if it still points at its start commit.
	Undo bool
	// Sandbox runs the view's side of the removal (see Sandbox): required
	// for a worktree with a view unless Discard or Undo is set.
	Sandbox Sandbox
	// Published is the value ohd last wrote to the host's branch; the
	// final publish moves the branch only from there (otherwise the
	// view's commit is kept, see Publish).
	Published string
	// Saved is the result of a SaveView made just before (through the
	// conversation's running container): Remove then does not save the
	// view again.
	Saved *RemoveResult
}

// RemoveResult says what Remove kept and why.
type RemoveResult struct {
	// SnapshotRef is "refs/ohd/snapshots/<id>" when uncommitted work was
	// recorded (now or by an earlier, interrupted Remove), else "".
	SnapshotRef    string
	SnapshotCommit string
	// CommitsBeyondStart is the number of commits on the branch that are
	// not reachable from StartCommit (-1 if it could not be counted).
	CommitsBeyondStart int
	// BranchKept is true when the branch was left in place: it has commits
	// beyond StartCommit, a snapshot was needed, it is checked out
	// elsewhere, or it could not be checked.
	BranchKept bool
	// BranchDeleted is true when Remove deleted the branch.
	BranchDeleted bool
	// AlreadyRemoved is true when there was no worktree left to remove (a
	// retry after an interrupted or completed Remove).
	AlreadyRemoved bool
	// Kept are the refs of the view kept on the host because the host
	// lacked their commits (refs/ohd/kept/<id>/...); KeptDropped counts
	// those beyond the limit of 1000 that were not kept.
	Kept        []string
	KeptDropped int
	// Conflict says the host branch had been moved by someone else, so
	// the view's commit was kept instead of published.
	Conflict string
	// Held is the ref the view's last commit was held back under, in
	// place, because it adds or changes the gitlinks HeldPaths, whose
	// directories in the folder hold a repository the agent made (see
	// HeldPrefix); HeldMessage says so in a sentence. Empty otherwise.
	Held        string
	HeldPaths   []string
	HeldMessage string
	// Published is the host branch's value ohd wrote last.
	Published string
	// IgnoredFiles and IgnoredBytes count the worktree's ignored files,
	// which are not kept (0 with Discard or Undo, which count nothing).
	IgnoredFiles int
	IgnoredBytes int64
	// NestedRepos are the nested repositories of the worktree saved in
	// the snapshot as their files, without their own history.
	NestedRepos []string
	// Message is one sentence for the user, e.g. "worktree /w removed;
	// branch openhands/<id> kept: 2 commits beyond start; uncommitted work
	// saved in refs/ohd/snapshots/<id>".
	Message string
}

// Remove ends the worktree's life on the host and loses no work:
//
//  1. unless Discard, Snapshot records uncommitted work (if that fails,
//     nothing is removed);
//  2. the worktree is unlocked and removed (`git worktree remove --force`;
//     if git cannot, or the directory is already gone, ohd deletes the
//     directory and the admin dir itself, the admin dir only after
//     checking that its gitdir points at wt.Path);
//  3. the branch is deleted only if it has no commits beyond StartCommit,
//     no snapshot exists and no other worktree has it checked out; with
//     Discard the branch and the snapshot ref are deleted regardless
//     (unless checked out elsewhere);
//  4. <Root>/<id> is removed.
//
// It leaves no worktrees/ registration behind and is idempotent: calling
// it again after a crash or a completed removal finishes the job. Call it
// with the container stopped.
func (m *Manager) Remove(ctx context.Context, wt Worktree, opts RemoveOptions) (RemoveResult, error) {
	res := RemoveResult{CommitsBeyondStart: -1, Published: opts.Published}
	if err := m.checkRecord(wt, true); err != nil {
		return res, fmt.Errorf("worktree remove: %w", err)
	}
	if wt.InPlace {
		return m.removeInPlace(ctx, wt, opts)
	}
	fail := func(err error) (RemoveResult, error) {
		return res, fmt.Errorf("worktree remove %s: %w", wt.Path, err)
	}
	convDir := filepath.Join(m.root, wt.ConversationID)

	dirExists, err := lexists(wt.Path)
	if err != nil {
		return fail(err)
	}
	if ok, err := lexists(wt.CommonDir); err != nil {
		return fail(err)
	} else if !ok {
		// The repository is gone: no snapshot, no branch to keep.
		if dirExists && !opts.Discard {
			return fail(fmt.Errorf("%w: the repository's git dir %s no longer exists (moved or deleted), so the files in %s cannot be saved: copy what you need, then remove with --discard", ErrUnsavedWork, wt.CommonDir, wt.Path))
		}
		if err := os.RemoveAll(convDir); err != nil {
			return fail(err)
		}
		res.AlreadyRemoved = !dirExists
		res.Message = fmt.Sprintf("worktree %s removed; repository git dir %s no longer exists", wt.Path, wt.CommonDir)
		return res, nil
	}
	// Git runs as the repository's current owner.
	if wt.UID, wt.GID, err = owner(wt.CommonDir); err != nil {
		return fail(err)
	}
	if m.euid != 0 && wt.UID != m.euid {
		return fail(hardgit.OwnerError(wt.UID, m.euid))
	}
	registered := admindir.Owns(wt.AdminDir, wt.Path, LockReason(wt.ConversationID))
	ct := commonTarget(wt.CommonDir, wt.UID, wt.GID)
	snapRef := SnapshotRef(wt.ConversationID)

	if wt.View != "" && opts.Sandbox == nil && opts.Saved == nil && !opts.Discard && !opts.Undo && dirExists {
		return fail(fmt.Errorf("%w: a worktree with a git view needs a sandbox to save its work", ErrInvalidWorktree))
	}
	if !opts.Discard && !opts.Undo {
		switch {
		case dirExists && wt.View != "" && opts.Saved != nil:
			// Everything saveView filled is carried; what Remove itself
			// works out below starts afresh.
			res = *opts.Saved
			res.Kept, res.NestedRepos = slices.Clone(res.Kept), slices.Clone(res.NestedRepos)
			res.CommitsBeyondStart, res.BranchKept, res.BranchDeleted, res.AlreadyRemoved, res.Message = -1, false, false, false, ""
		case dirExists && wt.View != "":
			// Registered or not: the view holds the work (a removal
			// interrupted after it deleted the host's registration saved it
			// already; saving again changes nothing).
			if err := m.saveView(ctx, wt, opts, &res); err != nil {
				return fail(fmt.Errorf("%w: nothing was removed: fix the cause and remove again (--discard drops the conversation's uncommitted work and its unpublished commits)", err))
			}
		case dirExists && registered:
			if res.IgnoredFiles, res.IgnoredBytes, err = m.countIgnored(ctx, wt); err != nil {
				return fail(fmt.Errorf("%w: nothing was removed: fix the cause, or remove with --discard to drop uncommitted work", err))
			}
			if res.SnapshotRef, res.SnapshotCommit, err = m.Snapshot(ctx, wt); err != nil {
				return fail(fmt.Errorf("%w: nothing was removed: fix the cause, or remove with --discard to drop uncommitted work", err))
			}
		case dirExists:
			// A removal killed after it deleted the registration (it
			// snapshots first) left its snapshot: the work is saved.
			if _, ok, err := m.revParse(ctx, ct, snapRef); err == nil && ok {
				break
			}
			return fail(fmt.Errorf("%w: %s is no longer registered as a worktree of %s, so its uncommitted work cannot be snapshotted: copy what you need, then remove with --discard", ErrUnsavedWork, wt.Path, wt.Repo))
		}
	}
	res.AlreadyRemoved = !dirExists && !registered

	unlock, err := m.lockRepo(ctx, wt.CommonDir)
	if err != nil {
		return fail(err)
	}
	defer unlock()

	// Checked again under the lock: a registration seen before it may have
	// been removed meanwhile and its name reused by git for another
	// worktree, which admindir.Owns then refuses.
	registered = registered && admindir.Owns(wt.AdminDir, wt.Path, LockReason(wt.ConversationID))
	if err := m.removeWorktree(wt, registered); err != nil {
		return fail(err)
	}
	m.removeAbandonedAdmins(wt)
	// A registration is an admin dir whose gitdir names the path: none may
	// be left for ours (an admin dir git reused for another worktree is
	// not ours and stays).
	if admin := admindir.RegisteredAt(wt.CommonDir, wt.Path); admin != "" {
		return fail(fmt.Errorf("%s is still registered after removal (%s): run `git worktree remove --force --force %s` in %s", wt.Path, admin, wt.Path, wt.Repo))
	}
	// The branch, the snapshot ref and the live mirror, read in one git
	// run, under the lock (which publishes take too).
	listed, err := m.readRefsUnder(ctx, ct, "refs/heads/"+wt.Branch, snapRef, LivePrefix(wt.ConversationID))
	if err != nil {
		return fail(err)
	}
	refs, live := map[string]string{}, map[string]string{}
	for name, oid := range listed {
		switch {
		case name == "refs/heads/"+wt.Branch || name == snapRef:
			refs[name] = oid
		case strings.HasPrefix(name, LivePrefix(wt.ConversationID)):
			live[name] = oid
		}
	}
	if res.SnapshotRef == "" && !opts.Discard { // an earlier, interrupted Remove may have saved one
		if oid, ok := refs[snapRef]; ok {
			res.SnapshotRef, res.SnapshotCommit = snapRef, oid
		}
	}
	checkedOutIn, err := m.settleBranch(ctx, wt, ct, opts, refs["refs/heads/"+wt.Branch], &res)
	if err != nil {
		return fail(err)
	}
	if oid, ok := refs[snapRef]; opts.Discard && ok {
		if _, err := m.git(ctx, ct, runOpts{}, "update-ref", "-d", snapRef, oid); err != nil {
			return fail(fmt.Errorf("delete %s: %w", snapRef, err))
		}
	}
	if opts.Discard {
		if err := m.deleteKept(ctx, ct, wt.ConversationID); err != nil {
			return fail(err)
		}
	}
	// The view's refs are saved (kept, published): its live mirror goes.
	if err := m.dropLiveRefs(ctx, ct, wt.ConversationID, live); err != nil {
		return fail(err)
	}
	// The view is the agent's, its refs saved: it goes as the worktree
	// did (discardTree; RemoveAll unlinks what it finds without following
	// a symlink).
	if err := m.discardTree(filepath.Join(convDir, viewParent), wt.ConversationID); err != nil {
		return fail(fmt.Errorf("remove the git view: %w", err))
	}
	if err := os.Remove(convDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fail(fmt.Errorf("remove %s: %w", convDir, err))
	}
	res.Message = removeMessage(wt, opts, res, checkedOutIn)
	m.log.Info("worktree removed", "conversation", wt.ConversationID, "path", wt.Path,
		"branch_kept", res.BranchKept, "snapshot", res.SnapshotRef, "kept", len(res.Kept), "discard", opts.Discard)
	return res, nil
}

// SaveView is the first half of Remove for a worktree with a git view,
// through a sandbox that is the conversation's own running container: it
// saves the work (see saveView) and changes nothing else, so the caller can
// then stop the container and call Remove with RemoveOptions.Saved.
func (m *Manager) SaveView(ctx context.Context, wt Worktree, sb Sandbox, published string) (RemoveResult, error) {
	res := RemoveResult{CommitsBeyondStart: -1, Published: published}
	if err := m.checkWorktree(wt); err != nil || wt.View == "" {
		if err == nil {
			err = fmt.Errorf("%w: %s has no git view", ErrInvalidWorktree, wt.Path)
		}
		return res, fmt.Errorf("worktree save view: %w", err)
	}
	// Saving reads only the view (its own admin dir) and writes the host's
	// objects and refs: a host registration that is gone (deleted by
	// hand) does not stop it, one that is another worktree's does.
	if _, err := os.Lstat(wt.AdminDir); !wt.InPlace && !errors.Is(err, fs.ErrNotExist) && !admindir.Owns(wt.AdminDir, wt.Path, LockReason(wt.ConversationID)) {
		return res, fmt.Errorf("worktree save view %s: %w: %s is not this worktree's registration", wt.Path, ErrInvalidWorktree, wt.AdminDir)
	}
	if err := m.saveView(ctx, wt, RemoveOptions{Sandbox: sb, Published: published}, &res); err != nil {
		return res, fmt.Errorf("worktree save view %s: %w", wt.Path, err)
	}
	return res, nil
}

// saveView is the last publish of a worktree with a git view, run before
// anything is removed: in the sandbox, uncommitted work becomes a commit in
// the view and the view's refs are listed; the host imports (through git's
// validation) what the branch, the snapshot and the view's other refs need,
// then in one ref transaction moves the branch (or keeps its commit, if the
// host branch was moved meanwhile), records the snapshot under
// refs/ohd/snapshots/<id>, and keeps the view's branches, tags and stash
// whose commits the host lacked under refs/ohd/kept/<id>/.
func (m *Manager) saveView(ctx context.Context, wt Worktree, opts RemoveOptions, res *RemoveResult) error {
	var out bytes.Buffer
	args := []string{"collect", "--id", wt.ConversationID, "--worktree", wt.Path, "--admin", filepath.Join(wt.CommonDir, "worktrees", wt.AdminID)}
	if wt.InPlace {
		// The folder's files stay where the agent left them: no
		// snapshot, only the view's refs.
		args = []string{"collect", "--id", wt.ConversationID, "--git-dir", wt.CommonDir, "--refs-only"}
	}
	if err := opts.Sandbox.View(ctx, args, nil, &limitedWriter{w: &out, n: 16 << 20}); err != nil {
		return fmt.Errorf("save the conversation's work in its sandbox: %w", err)
	}
	var col Collected
	if err := json.Unmarshal(out.Bytes(), &col); err != nil {
		return fmt.Errorf("save the conversation's work: the sandbox's answer is not valid: %w", err)
	}
	if col.Snapshot != "" && !isHexID(col.Snapshot) {
		return fmt.Errorf("%w: the sandbox's snapshot %q is not a commit id", ErrRefused, truncate(col.Snapshot, 80))
	}
	res.IgnoredFiles, res.IgnoredBytes = col.IgnoredFiles, col.IgnoredBytes
	ct := commonTarget(wt.CommonDir, wt.UID, wt.GID)
	// own is the view's branch, published to the host's Branch (the same
	// name but in place).
	own, hostRef := "refs/heads/"+wt.viewBranch(), "refs/heads/"+wt.Branch
	tip := col.Refs[own]
	if tip != "" && !isHexID(tip) {
		tip = ""
	}
	// The objects of every keepable ref the host lacks come over: the
	// view is seeded with all the host's refs, so most are the host's own
	// (tens of thousands in a repository with many tags), and only those
	// whose object is missing on the host are sent as tips. Which refs to
	// keep is decided afterwards, by reachability from the host's refs, so
	// a retried removal whose first attempt imported the objects decides
	// the same way.
	var candidates []string
	for name, oid := range col.Refs {
		if keepable(name, own) && isHexID(oid) {
			candidates = append(candidates, name)
		}
	}
	// The stash's older entries (its reflog: stash@{1}, ...) are kept as
	// refs/ohd/kept/<id>/stash-entries/<n>; restore stacks them again.
	for i, oid := range col.Stash {
		if i == 0 || i > maxStashEntries || !isHexID(oid) {
			continue // stash@{0} is refs/stash itself
		}
		name := stashEntryRef(i)
		col.Refs[name] = oid
		candidates = append(candidates, name)
	}
	sort.Strings(candidates)
	var tips []string
	seen := map[string]bool{}
	add := func(o string) {
		if o != "" && !seen[o] {
			seen[o] = true
			tips = append(tips, o)
		}
	}
	add(tip)
	add(col.Snapshot)
	for _, name := range candidates {
		add(col.Refs[name])
	}
	// The usual removal, nothing uncommitted and every commit of the
	// agent's published already: the host's branches and tags, read once
	// under the lock, hold every object and commit the view's refs name
	// (hostHolds), and that read is all the git run the save needs before
	// its transaction. Otherwise the lock is let go, and the objects are
	// looked up, imported and judged first.
	var (
		unlock func()
		host   map[string]string
		lacks  = map[string]bool{}
		err    error
	)
	if col.Snapshot == "" {
		if unlock, err = m.lockRepo(ctx, wt.CommonDir); err != nil {
			return err
		}
		held := false
		if host, held, err = m.hostHolds(ctx, ct, tips, candidates, col.Refs); err != nil || !held {
			unlock()
			unlock, host = nil, nil
		}
		if err != nil {
			return err
		}
	}
	if unlock == nil {
		// Which tips the host has, and what the candidates peel to, in one
		// git run: the peeling holds when nothing is imported (the agent's
		// commits were published already).
		have, peeled, err := m.presentPeeled(ctx, ct, tips, candidates, col.Refs)
		if err != nil {
			return err
		}
		tips = slices.DeleteFunc(tips, func(o string) bool { return have[o] })
		if len(tips) > 0 {
			peeled = nil // objects come over: unreachable peels again
		}
		var commits []string
		for _, c := range []string{tip, col.Snapshot} {
			if c != "" && !have[c] {
				commits = append(commits, c)
			}
		}
		dropKeep, err := m.importObjects(ctx, wt, opts.Sandbox, tips, []string{opts.Published, wt.StartCommit}, commits)
		defer dropKeep()
		if err != nil {
			return err
		}
		if col.Snapshot != "" {
			if res.NestedRepos, err = m.checkNested(ctx, ct, col.Snapshot, col.NestedRepos); err != nil {
				return err
			}
		}
		if lacks, err = m.unreachable(ctx, ct, wt.ConversationID, candidates, col.Refs, peeled); err != nil {
			return err
		}
		m.onStep("snapshot")
		if unlock, err = m.lockRepo(ctx, wt.CommonDir); err != nil {
			return err
		}
		// The host's branches and tags, read once under the lock: the
		// branch's value the transaction below moves from, and what the
		// agent's refs are compared with.
		if host, err = m.readRefsUnder(ctx, ct, "refs/heads/", "refs/tags/", "refs/stash"); err != nil {
			unlock()
			return err
		}
	} else {
		m.onStep("snapshot")
	}
	defer unlock()
	cur := host[hostRef]
	// A ref the agent made or moved (it differs from the view's seed) is
	// kept also when its commit is on the host, unless the host has the
	// same ref at the same value: its name (a tag, a side branch) is work
	// too.
	made := madeByAgent(wt, candidates, col.Refs, host)
	var keep []string
	for _, name := range candidates {
		if lacks[name] || made[name] {
			keep = append(keep, name)
		}
	}
	if len(keep) > maxKept {
		res.KeptDropped = len(keep) - maxKept
		keep = keep[:maxKept]
	}
	var tx strings.Builder
	if tip != "" && tip == cur {
		res.Published = cur // published already
	}
	if tip != "" && tip != cur && wt.InPlace {
		// The folder stays: a commit that would make the user's git enter
		// a repository the agent left there is held back (held.go). (A
		// worktree's directories go with it.)
		paths, err := m.heldGitlinks(ctx, ct, wt, cur, tip, false)
		if err != nil {
			return err
		}
		if len(paths) > 0 {
			res.Held, res.HeldPaths = HeldRef(wt.ConversationID, hostRef), paths
			res.HeldMessage = heldMessage(wt, tip, res.Held, paths, true)
			fmt.Fprintf(&tx, "update %s %s\n", res.Held, tip)
			m.log.Warn("last publish held back", "conversation", wt.ConversationID, "commit", tip, "held", res.Held, "paths", paths)
			tip = ""
		}
	}
	if tip != "" && tip != cur {
		if cur == opts.Published || opts.Published == "" {
			fmt.Fprintf(&tx, "update %s %s %s\n", hostRef, tip, cur)
			res.Published = tip
			// A commit held back while the conversation ran is no longer.
			heldRef := HeldRef(wt.ConversationID, hostRef)
			if old, ok, err := m.revParse(ctx, ct, heldRef); err != nil {
				return err
			} else if ok {
				fmt.Fprintf(&tx, "delete %s %s\n", heldRef, old)
			}
		} else {
			kept := KeptRef(wt.ConversationID, hostRef)
			fmt.Fprintf(&tx, "update %s %s\n", kept, tip)
			res.Conflict = fmt.Sprintf("branch %s was moved on the host (to %s) since ohd published %s: the conversation's commit %s is kept as %s",
				wt.Branch, shortOID(cur), shortOID(opts.Published), shortOID(tip), kept)
			res.Kept = append(res.Kept, kept)
		}
	}
	if col.Snapshot != "" {
		fmt.Fprintf(&tx, "update %s %s\n", SnapshotRef(wt.ConversationID), col.Snapshot)
		res.SnapshotRef, res.SnapshotCommit = SnapshotRef(wt.ConversationID), col.Snapshot
	}
	for _, name := range keep {
		kept := KeptRef(wt.ConversationID, name)
		fmt.Fprintf(&tx, "update %s %s\n", kept, col.Refs[name])
		res.Kept = append(res.Kept, kept)
	}
	if tx.Len() == 0 {
		return nil
	}
	if err := m.updateRefs(ctx, ct, tx.String(), "-m", "ohd: conversation "+wt.ConversationID+" ended"); err != nil {
		return fmt.Errorf("record the conversation's work: %w", err)
	}
	m.log.Info("view saved", "conversation", wt.ConversationID, "branch", res.Published, "snapshot", res.SnapshotCommit,
		"kept", len(res.Kept), "ignored_files", res.IgnoredFiles)
	return nil
}

// hostHolds reads the host's branches, tags and stash (name -> object id,
// as readRefsUnder's) and reports whether they alone hold what saveView
// needs of the view's refs: each of tips is one of their objects, and each
// of names (view refs, values in refs) is one of their objects that peels
// to a commit, which that host ref reaches: nothing to import, nothing the
// host lacks. Then the save runs no other git before its transaction.
func (m *Manager) hostHolds(ctx context.Context, ct gitTarget, tips, names []string, refs map[string]string) (map[string]string, bool, error) {
	out, err := m.git(ctx, ct, runOpts{}, "for-each-ref",
		"--format=%(objectname)%09%(objecttype)%09%(*objectname)%09%(*objecttype)%09%(refname)", "--", "refs/heads/", "refs/tags/", "refs/stash")
	if err != nil {
		return nil, false, fmt.Errorf("read refs: %w", err)
	}
	host := map[string]string{}
	commitOf := map[string]string{} // a host ref's object -> the commit it peels to
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 5 || !isHexID(f[0]) {
			continue
		}
		host[f[4]] = f[0]
		switch {
		case f[1] == "commit":
			commitOf[f[0]] = f[0]
		case f[3] == "commit" && isHexID(f[2]):
			commitOf[f[0]] = f[2]
		default:
			commitOf[f[0]] = commitOf[f[0]] // known to the host, peels to no commit here
		}
	}
	for _, o := range tips {
		if _, ok := commitOf[o]; !ok {
			return host, false, nil
		}
	}
	for _, n := range names {
		if c := commitOf[refs[n]]; c == "" {
			return host, false, nil
		}
	}
	return host, true, nil
}

// stashEntryRef names stash@{n} of the view among the refs saveView
// keeps (KeptRef turns it into refs/ohd/kept/<id>/stash-entries/<n>).
func stashEntryRef(n int) string { return "refs/stash-entries/" + strconv.Itoa(n) }

// presentPeeled reports which of oids (object ids) the host's store has,
// and what each of names (view refs, values in refs) peels to as a commit
// there (absent: not a commit there), in one git run.
func (m *Manager) presentPeeled(ctx context.Context, ct gitTarget, oids, names []string, refs map[string]string) (map[string]bool, map[string]string, error) {
	var in strings.Builder
	var ask []string
	for _, o := range oids {
		if isHexID(o) {
			in.WriteString(o + "\n")
			ask = append(ask, o)
		}
	}
	for _, n := range names {
		in.WriteString(refs[n] + "^{commit}\n")
	}
	have, peeled := map[string]bool{}, map[string]string{}
	if in.Len() == 0 {
		return have, peeled, nil
	}
	out, err := m.git(ctx, ct, runOpts{Stdin: []byte(in.String())}, "cat-file", "--batch-check=%(objectname) %(objecttype)")
	if err != nil {
		return nil, nil, fmt.Errorf("look up objects: %w", err)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != len(ask)+len(names) {
		return nil, nil, fmt.Errorf("look up objects: git cat-file --batch-check gave %d answers to %d questions", len(lines), len(ask)+len(names))
	}
	for i, o := range ask {
		if oid, typ, ok := strings.Cut(lines[i], " "); ok && typ != "missing" && oid == o {
			have[o] = true
		}
	}
	for i, n := range names {
		if oid, typ, ok := strings.Cut(lines[len(ask)+i], " "); ok && typ == "commit" && isHexID(oid) {
			peeled[n] = oid
		}
	}
	return have, peeled, nil
}

// unreachable reports which of the named view refs point (peeled to a
// commit) at commits no host ref reaches, ignoring what ohd kept of this
// conversation before (a retried removal). The objects are on the host
// (imported) when it runs.
//
// peeled, when not nil, is each name's commit as presentPeeled found it
// (absent: none); otherwise the refs are peeled here.
func (m *Manager) unreachable(ctx context.Context, ct gitTarget, id string, names []string, refs, peeled map[string]string) (map[string]bool, error) {
	out := map[string]bool{}
	if len(names) == 0 {
		return out, nil
	}
	if peeled == nil {
		var in strings.Builder
		for _, n := range names {
			in.WriteString(refs[n] + "^{commit}\n")
		}
		answer, err := m.git(ctx, ct, runOpts{Stdin: []byte(in.String())}, "cat-file", "--batch-check=%(objectname)")
		if err != nil {
			return nil, fmt.Errorf("peel the view's refs: %w", err)
		}
		lines := strings.Split(strings.TrimRight(answer, "\n"), "\n")
		peeled = map[string]string{}
		for i, n := range names {
			if i < len(lines) && isHexID(lines[i]) {
				peeled[n] = lines[i]
			}
		}
	}
	commitOf := map[string]string{}
	var commits strings.Builder
	for _, n := range names {
		if c, ok := peeled[n]; ok && isHexID(c) {
			commitOf[n] = c
			commits.WriteString(c + "\n")
		} else {
			out[n] = true // not a commit-ish the host can place: keep it
		}
	}
	if len(commitOf) == 0 {
		return out, nil
	}
	// The commits go through stdin (one per view ref: argv has a limit),
	// read where --stdin stands, so --not applies to --all only.
	list, err := m.git(ctx, ct, runOpts{Stdin: []byte(commits.String())},
		"rev-list", "--stdin", "--not", "--exclude="+KeptPrefix(id)+"*", "--exclude="+LivePrefix(id)+"*", "--all", "--")
	if err != nil {
		return nil, fmt.Errorf("find the view's commits the host lacks: %w", err)
	}
	missing := map[string]bool{}
	for _, c := range strings.Fields(list) {
		missing[c] = true
	}
	for n, c := range commitOf {
		out[n] = missing[c]
	}
	return out, nil
}

// checkNested returns those of the nested repositories the sandbox reported
// (the agent's word, stored, printed and put in the removal's message)
// that are clean relative paths, free of control and format characters,
// of directories of the imported snapshot snap, at most snapshot.MaxNested
// of them.
func (m *Manager) checkNested(ctx context.Context, ct gitTarget, snap string, names []string) ([]string, error) {
	var ok []string
	seen := map[string]bool{}
	for _, n := range names {
		if len(ok) == snapshot.MaxNested*4 {
			break // the rest is not looked at
		}
		if seen[n] || !cleanRelPath(n) {
			continue
		}
		seen[n] = true
		ok = append(ok, n)
	}
	if len(ok) == 0 {
		return nil, nil
	}
	var in strings.Builder
	for _, n := range ok {
		in.WriteString(snap + ":" + n + "\n")
	}
	out, err := m.git(ctx, ct, runOpts{Stdin: []byte(in.String())}, "cat-file", "--batch-check=%(objecttype)")
	if err != nil {
		return nil, fmt.Errorf("check the sandbox's nested repositories: %w", err)
	}
	lines := strings.Split(out, "\n")
	var dirs []string
	for i, n := range ok {
		if i < len(lines) && lines[i] == "tree" && len(dirs) < snapshot.MaxNested {
			dirs = append(dirs, n)
		}
	}
	return dirs, nil
}

// cleanRelPath reports whether p is a clean, relative, slash-separated
// path of valid UTF-8 with no control or format (e.g. bidi) characters.
func cleanRelPath(p string) bool {
	if p == "" || !utf8.ValidString(p) || path.IsAbs(p) || path.Clean(p) != p || p == "." || p == ".." || strings.HasPrefix(p, "../") {
		return false
	}
	for _, r := range p {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\\' {
			return false
		}
	}
	return true
}

// deleteKept deletes the refs kept from conversation id's view (Discard).
func (m *Manager) deleteKept(ctx context.Context, ct gitTarget, id string) error {
	out, err := m.git(ctx, ct, runOpts{}, "for-each-ref", "--format=delete %(refname) %(objectname)", KeptPrefix(id), HeldPrefix(id))
	if err != nil {
		return fmt.Errorf("list kept refs: %w", err)
	}
	if strings.TrimSpace(out) == "" {
		return nil
	}
	if err := m.updateRefs(ctx, ct, out); err != nil {
		return fmt.Errorf("delete kept refs: %w", err)
	}
	return nil
}

// ListKept returns the refs kept for conversation id in the repository at
// commonDir (name -> object id).
func (m *Manager) ListKept(ctx context.Context, commonDir, id string) (map[string]string, error) {
	if err := ValidateID(id); err != nil {
		return nil, err
	}
	uid, gid, err := owner(commonDir)
	if err != nil {
		return nil, err
	}
	return m.readRefsUnder(ctx, commonTarget(commonDir, uid, gid), KeptPrefix(id), HeldPrefix(id), SnapshotRef(id))
}

// readRefsUnder returns the refs matching the patterns (prefixes or full
// names), name -> object id.
func (m *Manager) readRefsUnder(ctx context.Context, t gitTarget, patterns ...string) (map[string]string, error) {
	args := append([]string{"for-each-ref", "--format=%(objectname) %(refname)", "--"}, patterns...)
	out, err := m.git(ctx, t, runOpts{}, args...)
	if err != nil {
		return nil, fmt.Errorf("read refs: %w", err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if oid, name, ok := strings.Cut(line, " "); ok && isHexID(oid) {
			got[name] = oid
		}
	}
	return got, nil
}

// limitedWriter writes at most n bytes to w, then fails.
type limitedWriter struct {
	w io.Writer
	n int64
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.n {
		return 0, errors.New("answer too large")
	}
	l.n -= int64(len(p))
	return l.w.Write(p)
}

// removeWorktree unlocks and removes the worktree directory and its admin
// dir. The caller holds the repository lock.
//
// Unlocking deletes <AdminDir>/locked directly (that file is the lock, see
// gitrepository-layout(5)): `git worktree unlock <path>` picks the first
// registration claiming the path, which need not be ours if an agent
// rewrote another admin dir's gitdir. For the same reason ohd does not ask
// git to remove the worktree by path: it deletes the directory and (only if
// it is ours, see admindir.Owns) the admin dir itself, which is all
// `git worktree remove --force` does.
func (m *Manager) removeWorktree(wt Worktree, registered bool) error {
	if registered {
		if err := os.Remove(filepath.Join(wt.AdminDir, "locked")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("unlock %s: %w", wt.Path, err)
		}
		// What `git worktree remove --force` does, done directly: the admin
		// dir is ours (admindir.Owns, checked before unlocking; git cannot
		// reuse a name that exists), the snapshot is taken, and git would
		// only delete the two directories. Two git runs fewer per removal.
		if err := admindir.Remove(wt.CommonDir, wt.AdminDir, wt.ConversationID, func() { m.onStep("admin-moved") }); err != nil {
			return err
		}
		_ = os.Remove(filepath.Join(wt.CommonDir, "worktrees")) // git does this too; only if empty
	}
	// The snapshot (or Discard) has been taken care of by now.
	if err := m.discardTree(wt.Path, wt.ConversationID); err != nil {
		return fmt.Errorf("remove %s: %w", wt.Path, err)
	}
	return nil
}

// discardTree deletes the directory p, whose work is saved (or
// discarded), for the removal of owner (a conversation id). With a trash
// dir it is one rename there, and the unlinking of its files, which is
// most of a large worktree's removal, runs in the background: from the
// rename on, p is gone for every reader, and what is in the trash is
// nobody's work (a killed ohd's leftovers are deleted by the next New).
// A rename that fails (another filesystem, say) deletes p in place.
// RemoveAll never follows a symlink the agent planted.
func (m *Manager) discardTree(p, owner string) error {
	if m.trash == "" {
		return os.RemoveAll(p)
	}
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	dst := filepath.Join(m.trash, owner+"."+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := os.Rename(p, dst); err != nil {
		m.log.Debug("worktree removal: the trash is not reachable by a rename; deleting in place", "path", p, "err", err)
		return os.RemoveAll(p)
	}
	m.onStep("trashed")
	m.emptying.Go(func() {
		if err := os.RemoveAll(dst); err != nil {
			m.log.Warn("delete a removed worktree's files (the next start tries again)", "path", dst, "err", err)
		}
	})
	return nil
}

// emptyTrash deletes, in the background, what the trash holds when the
// Manager starts: what discardTree runs of a killed ohd left.
func (m *Manager) emptyTrash() {
	ents, err := os.ReadDir(m.trash)
	if err != nil || len(ents) == 0 {
		return
	}
	m.emptying.Go(func() {
		for _, e := range ents {
			p := filepath.Join(m.trash, e.Name())
			if err := os.RemoveAll(p); err != nil {
				m.log.Warn("delete what an interrupted worktree removal left in the trash", "path", p, "err", err)
				continue
			}
			m.log.Info("deleted what an interrupted worktree removal left in the trash", "path", p)
		}
	})
}

// Wait waits for the deletions running in the background (TrashDir) to
// end.
func (m *Manager) Wait() { m.emptying.Wait() }

// settleBranch deletes or keeps the conversation's branch and fills res.
// It returns the path of another worktree that has the branch checked out,
// if any (the branch is then kept).
func (m *Manager) settleBranch(ctx context.Context, wt Worktree, ct gitTarget, opts RemoveOptions, oid string, res *RemoveResult) (string, error) {
	ref := "refs/heads/" + wt.Branch
	if oid == "" {
		return "", nil // already deleted (by an earlier Remove, or by hand)
	}
	if n, err := m.commitsBeyond(ctx, ct, oid, wt.StartCommit); err == nil {
		res.CommitsBeyondStart = n
	} else {
		m.log.Warn("cannot count the branch's commits; keeping it", "branch", wt.Branch, "err", err)
	}
	if path := admindir.CheckedOutIn(wt.CommonDir, ref); path != "" {
		res.BranchKept = true
		return path, nil
	}
	if !opts.Discard && (res.CommitsBeyondStart != 0 || res.SnapshotRef != "") {
		res.BranchKept = true
		return "", nil
	}
	// Delete only the value just checked, so a concurrent update is not lost.
	if _, err := m.git(ctx, ct, runOpts{}, "update-ref", "-d", ref, oid); err != nil {
		return "", fmt.Errorf("delete branch %s: %w", wt.Branch, err)
	}
	res.BranchDeleted = true
	return "", nil
}

// readRefs returns the object ids of those refs that exist, in one git run.
func (m *Manager) readRefs(ctx context.Context, t gitTarget, refs ...string) (map[string]string, error) {
	args := append([]string{"for-each-ref", "--format=%(objectname) %(refname)", "--"}, refs...)
	out, err := m.git(ctx, t, runOpts{}, args...)
	if err != nil {
		return nil, fmt.Errorf("read refs: %w", err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		oid, name, ok := strings.Cut(line, " ")
		if ok && isHexID(oid) && slices.Contains(refs, name) { // patterns also match refs below them
			got[name] = oid
		}
	}
	return got, nil
}

// commitsBeyond counts the commits reachable from tip but not from start.
func (m *Manager) commitsBeyond(ctx context.Context, ct gitTarget, tip, start string) (int, error) {
	if !isHexID(start) {
		return -1, fmt.Errorf("no valid start commit recorded (%q)", start)
	}
	if tip == start {
		return 0, nil // the common case, and no git run needed
	}
	out, err := m.git(ctx, ct, runOpts{}, "rev-list", "--count", tip, "^"+start, "--")
	if err != nil {
		return -1, err
	}
	return strconv.Atoi(strings.TrimSpace(out))
}

// removeMessage is the sentence for the user.
func removeMessage(wt Worktree, opts RemoveOptions, res RemoveResult, checkedOutIn string) string {
	var b strings.Builder
	if res.AlreadyRemoved {
		fmt.Fprintf(&b, "worktree %s was already removed", wt.Path)
	} else {
		fmt.Fprintf(&b, "worktree %s removed", wt.Path)
	}
	switch {
	case res.BranchKept && checkedOutIn != "":
		fmt.Fprintf(&b, "; branch %s kept: it is checked out in %s", wt.Branch, checkedOutIn)
	case res.BranchKept:
		var why []string
		switch res.CommitsBeyondStart {
		case -1:
			why = append(why, "its commits could not be counted")
		case 0:
		case 1:
			why = append(why, "1 commit beyond start")
		default:
			why = append(why, fmt.Sprintf("%d commits beyond start", res.CommitsBeyondStart))
		}
		if res.SnapshotRef != "" {
			why = append(why, "uncommitted work saved in "+res.SnapshotRef)
		}
		fmt.Fprintf(&b, "; branch %s kept: %s", wt.Branch, strings.Join(why, "; "))
	case res.BranchDeleted && opts.Discard:
		fmt.Fprintf(&b, "; branch %s and any snapshot discarded", wt.Branch)
	case res.BranchDeleted:
		fmt.Fprintf(&b, "; branch %s deleted (no commits beyond start, nothing uncommitted)", wt.Branch)
	case opts.Discard:
		b.WriteString("; snapshot discarded")
	default:
		fmt.Fprintf(&b, "; branch %s no longer exists", wt.Branch)
		if res.SnapshotRef != "" {
			fmt.Fprintf(&b, "; uncommitted work saved in %s", res.SnapshotRef)
		}
	}
	if len(res.Kept) > 0 {
		fmt.Fprintf(&b, "; %d refs of the view kept under %s", len(res.Kept), KeptPrefix(wt.ConversationID))
	}
	if res.KeptDropped > 0 {
		fmt.Fprintf(&b, " (%d more not kept: over the limit of %d)", res.KeptDropped, maxKept)
	}
	if res.Conflict != "" {
		b.WriteString("; " + res.Conflict)
	}
	if len(res.NestedRepos) > 0 {
		fmt.Fprintf(&b, "; nested repositories saved in the snapshot as files, without their own history: %s", strings.Join(res.NestedRepos, ", "))
	}
	switch res.IgnoredFiles {
	case 0:
	case 1:
		fmt.Fprintf(&b, "; 1 ignored file (%d bytes) not kept", res.IgnoredBytes)
	default:
		fmt.Fprintf(&b, "; %d ignored files (%d bytes) not kept", res.IgnoredFiles, res.IgnoredBytes)
	}
	return b.String()
}
