package worktree

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ohd-dev/ohd/pkg/gitindex"
	"github.com/ohd-dev/ohd/pkg/hardgit"
	"github.com/ohd-dev/ohd/pkg/worktree/mountplan"
	"github.com/ohd-dev/ohd/pkg/worktree/porcelain"
)

// In place: the conversation works in the repository's own folder (what
// an SDK create, with no worktree field, and Agent Canvas's picked
// workspace ask for), yet the container never writes the repository's git
// dir. It gets the same git view a worktree gets (seedView, Publish,
// saveView), mounted at the git common dir's path, over the folder's
// .git:
//
//	<TopLevel>                      read-write  the user's folder itself
//	                                (read-only when the conversation was
//	                                created for a subdirectory, which is
//	                                then mounted read-write over it)
//	<CommonDir>      <- <View>      read-write  the conversation's git view,
//	                                            <Root>/<id>/.ohd/git
//	<CommonDir>/hooks               read-only   the repository's hooks
//	<CommonDir>/modules             read-only   the submodules' git dirs
//	                                            (<AdminDir>/modules in a
//	                                            linked worktree): status,
//	                                            log and diff work in them,
//	                                            a commit does not
//	<Root>/<id>/.ohd/objects <- <CommonDir>/objects
//	                                read-only   the view's alternate
//	<TopLevel>/.git                 read-only   when it is a file (a linked
//	                                            worktree, a separate git
//	                                            dir): the agent cannot
//	                                            point it elsewhere
//	submodules' .git, unpopulated   read-only   and the directories holding
//	submodule directories                       them pinned onto themselves
//	                                            (package mountplan)
//
// The view's HEAD is on the branch the host has checked out (ViewBranch;
// a detached host HEAD gives the view openhands/<id>), its index a copy of
// the host's. Publish brings that branch's commits to the host's
// refs/heads/openhands/<id>, never to the checked-out branch: the host's
// HEAD, index and branches move only by the user's hand. Removal keeps
// the folder as the agent left it (no snapshot is needed: the files are
// the user's), publishes a last time, keeps the view's other refs under
// refs/ohd/kept/<id>/ and removes only <Root>/<id>.
//
// A subdirectory: the whole work tree is mounted (read-only) so that git
// inside sees the repository's files as they are, not a tree with
// everything outside the subdirectory deleted; only the subdirectory the
// conversation was created for is writable.

// PlanInPlace runs every check of AddInPlace without changing anything
// and returns the Worktree it would make for conversation id in the
// repository repo (from Inspect).
func (m *Manager) PlanInPlace(ctx context.Context, repo Repo, id string) (Worktree, error) {
	if err := ValidateID(id); err != nil {
		return Worktree{}, fmt.Errorf("worktree in place: %w", err)
	}
	if !repo.IsGit || repo.TopLevel == "" {
		return Worktree{}, fmt.Errorf("worktree in place %s: %w", repo.Workspace, ErrNotGit)
	}
	if m.euid != 0 && repo.UID != m.euid {
		return Worktree{}, fmt.Errorf("worktree in place %s: %w", repo.TopLevel, hardgit.OwnerError(repo.UID, m.euid))
	}
	fail := func(err error) (Worktree, error) {
		return Worktree{}, fmt.Errorf("worktree in place %s: %w", repo.TopLevel, err)
	}
	convDir := filepath.Join(m.root, id)
	wt := Worktree{
		ConversationID: id, Repo: repo.TopLevel, CommonDir: repo.CommonDir, Path: repo.TopLevel,
		Branch: BranchName(id), StartPoint: "HEAD", UID: repo.UID, GID: repo.GID,
		View: filepath.Join(convDir, viewParent, viewName), InPlace: true,
	}
	if repo.Workspace != repo.TopLevel {
		wt.Workdir = repo.Workspace
	}
	if repo.GitDir != repo.CommonDir {
		if filepath.Dir(repo.GitDir) != filepath.Join(repo.CommonDir, "worktrees") {
			return fail(fmt.Errorf("%w: its git dir %s is neither the common dir nor one of its worktrees", ErrInvalidPath, repo.GitDir))
		}
		wt.AdminID, wt.AdminDir = filepath.Base(repo.GitDir), repo.GitDir
	}
	if within(m.root, repo.TopLevel) || within(repo.TopLevel, convDir) || within(m.root, repo.CommonDir) {
		return fail(fmt.Errorf("%w: the worktree root %s overlaps the repository: choose a worktree root outside it", ErrInvalidPath, m.root))
	}
	if err := checkTraversable(m.root, repo.UID, repo.GID); err != nil {
		return fail(err)
	}
	if ok, err := lexists(convDir); err != nil || ok {
		if err == nil {
			err = fmt.Errorf("%w: %s exists: remove the conversation first", ErrExists, convDir)
		}
		return fail(err)
	}
	rt := repoTarget(repo)
	if _, ok, err := m.revParse(ctx, rt, "refs/heads/"+wt.Branch); err != nil || ok {
		if err == nil {
			err = fmt.Errorf("%w: branch %s exists in %s: delete it or use another conversation id", ErrExists, wt.Branch, wt.Repo)
		}
		return fail(err)
	}
	// The host's HEAD: its branch becomes the view's; a detached HEAD
	// gives the view the conversation's own branch.
	if out, err := m.git(ctx, rt, runOpts{}, "symbolic-ref", "--quiet", "HEAD"); err == nil {
		ref := strings.TrimSpace(out)
		if b, ok := strings.CutPrefix(ref, "refs/heads/"); ok && validRefName(ref) && validConfigWord(b) {
			wt.ViewBranch = b
		}
	}
	commit, ok, err := m.revParse(ctx, rt, "HEAD^{commit}")
	if err != nil {
		return fail(err)
	}
	if ok {
		wt.StartCommit = commit
	} else if wt.ViewBranch == "" {
		return fail(fmt.Errorf("%w: HEAD is neither a commit nor a branch", ErrNoCommits))
	}
	return wt, nil
}

// AddInPlace makes what a conversation in place needs on the host, from a
// plan PlanInPlace returned: <Root>/<id> (0700, the owner's) with the git
// view, and the host branch openhands/<id> at the start commit (none while
// the checked-out branch has no commit yet). The user's folder and git dir
// are not written. If anything fails, what was made is removed again.
func (m *Manager) AddInPlace(ctx context.Context, wt Worktree) (Worktree, error) {
	if err := m.checkWorktree(wt); err != nil || !wt.InPlace {
		if err == nil {
			err = fmt.Errorf("%w: not an in-place plan", ErrInvalidWorktree)
		}
		return Worktree{}, fmt.Errorf("worktree in place: %w", err)
	}
	convDir := filepath.Join(m.root, wt.ConversationID)
	ct := commonTarget(wt.CommonDir, wt.UID, wt.GID)
	fail := func(err error) (Worktree, error) {
		return Worktree{}, fmt.Errorf("worktree in place %s: %w", wt.Path, err)
	}
	unlock, err := m.lockRepo(ctx, wt.CommonDir)
	if err != nil {
		return fail(err)
	}
	defer unlock()
	if err := os.Mkdir(convDir, 0o700); err != nil {
		return fail(fmt.Errorf("create %s: %w", convDir, err))
	}
	undo := func(cause error) (Worktree, error) {
		m.undoInPlace(ctx, wt)
		return fail(cause)
	}
	if err := m.chown(convDir, wt.UID, wt.GID); err != nil {
		return undo(err)
	}
	if wt.StartCommit != "" {
		// An empty old value: the branch must not exist (another ohd may
		// have won a race for this id).
		if _, err := m.git(ctx, ct, runOpts{}, "update-ref", "-m", "ohd: conversation "+wt.ConversationID+" in place",
			"refs/heads/"+wt.Branch, wt.StartCommit, ""); err != nil {
			_ = os.RemoveAll(convDir)
			return fail(fmt.Errorf("create branch %s: %w", wt.Branch, err))
		}
	}
	if err := m.seedView(ctx, wt); err != nil {
		return undo(err)
	}
	m.onStep("view")
	m.log.Info("in place view added", "conversation", wt.ConversationID, "folder", wt.Path, "view_branch", wt.ViewBranch,
		"start_commit", wt.StartCommit, "view", wt.View)
	return wt, nil
}

// undoInPlace removes what a failed AddInPlace made; the caller holds the
// repository lock.
func (m *Manager) undoInPlace(ctx context.Context, wt Worktree) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.timeout)
	defer cancel()
	if err := os.RemoveAll(filepath.Join(m.root, wt.ConversationID)); err != nil {
		m.log.Warn("undo in place: remove conversation dir", "id", wt.ConversationID, "err", err)
	}
	ct := commonTarget(wt.CommonDir, wt.UID, wt.GID)
	if oid, ok, err := m.revParse(ctx, ct, "refs/heads/"+wt.Branch); err == nil && ok && oid == wt.StartCommit {
		if _, err := m.git(ctx, ct, runOpts{}, "update-ref", "-d", "refs/heads/"+wt.Branch, wt.StartCommit); err != nil {
			m.log.Warn("undo in place: delete branch", "branch", wt.Branch, "err", err)
		}
	}
}

// removeInPlace is Remove in place: the view's work is saved (the last
// publish, the view's refs the host lacks kept), the branch settled as for
// a worktree, and <Root>/<id> removed. The user's folder and its files are
// never touched, and nothing is registered or unregistered.
func (m *Manager) removeInPlace(ctx context.Context, wt Worktree, opts RemoveOptions) (RemoveResult, error) {
	res := RemoveResult{CommitsBeyondStart: -1, Published: opts.Published}
	fail := func(err error) (RemoveResult, error) {
		return res, fmt.Errorf("worktree remove in place %s: %w", wt.Path, err)
	}
	convDir := filepath.Join(m.root, wt.ConversationID)
	viewExists, err := lexists(wt.View)
	if err != nil {
		return fail(err)
	}
	if ok, err := lexists(wt.CommonDir); err != nil {
		return fail(err)
	} else if !ok {
		if err := os.RemoveAll(convDir); err != nil {
			return fail(err)
		}
		res.AlreadyRemoved = !viewExists
		res.Message = fmt.Sprintf("the folder %s is kept; its repository's git dir %s no longer exists", wt.Path, wt.CommonDir)
		return res, nil
	}
	if wt.UID, wt.GID, err = owner(wt.CommonDir); err != nil {
		return fail(err)
	}
	if m.euid != 0 && wt.UID != m.euid {
		return fail(hardgit.OwnerError(wt.UID, m.euid))
	}
	ct := commonTarget(wt.CommonDir, wt.UID, wt.GID)
	if !opts.Discard && !opts.Undo && viewExists {
		switch {
		case opts.Saved != nil:
			res = *opts.Saved
			res.Kept = slices.Clone(res.Kept)
			res.CommitsBeyondStart, res.BranchKept, res.BranchDeleted, res.AlreadyRemoved, res.Message = -1, false, false, false, ""
		case opts.Sandbox == nil:
			return fail(fmt.Errorf("%w: a git view needs a sandbox to save its work", ErrInvalidWorktree))
		default:
			if err := m.saveView(ctx, wt, opts, &res); err != nil {
				return fail(fmt.Errorf("%w: nothing was removed: fix the cause and remove again (--discard drops the conversation's unpublished commits)", err))
			}
		}
	}
	res.AlreadyRemoved = !viewExists
	unlock, err := m.lockRepo(ctx, wt.CommonDir)
	if err != nil {
		return fail(err)
	}
	defer unlock()
	ref := "refs/heads/" + wt.Branch
	refs, err := m.readRefs(ctx, ct, ref)
	if err != nil {
		return fail(err)
	}
	if _, err := m.settleBranch(ctx, wt, ct, opts, refs[ref], &res); err != nil {
		return fail(err)
	}
	if opts.Discard {
		if err := m.deleteKept(ctx, ct, wt.ConversationID); err != nil {
			return fail(err)
		}
	}
	// The view is the agent's: RemoveAll unlinks without following.
	if err := os.RemoveAll(filepath.Join(convDir, viewParent)); err != nil {
		return fail(fmt.Errorf("remove the git view: %w", err))
	}
	if err := os.Remove(convDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fail(fmt.Errorf("remove %s: %w", convDir, err))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the folder %s keeps the conversation's files", wt.Path)
	switch {
	case res.BranchKept:
		fmt.Fprintf(&b, "; its commits are on branch %s", wt.Branch)
	case res.BranchDeleted:
		fmt.Fprintf(&b, "; branch %s deleted (no commits)", wt.Branch)
	}
	if len(res.Kept) > 0 {
		fmt.Fprintf(&b, "; %d more refs kept under %s", len(res.Kept), KeptPrefix(wt.ConversationID))
	}
	if res.Conflict != "" {
		b.WriteString("; " + res.Conflict)
	}
	if res.HeldMessage != "" {
		b.WriteString("; " + res.HeldMessage)
	}
	res.Message = b.String()
	m.log.Info("in place view removed", "conversation", wt.ConversationID, "folder", wt.Path, "branch_kept", res.BranchKept, "kept", len(res.Kept))
	return res, nil
}

// checkInPlace is checkRecord for an in-place Worktree; bad formats its
// error.
func (m *Manager) checkInPlace(wt Worktree, bad func(string, ...any) error) error {
	if wt.Path != wt.Repo {
		return bad("Path %s is not the repository %s", wt.Path, wt.Repo)
	}
	if want := filepath.Join(m.root, wt.ConversationID, viewParent, viewName); wt.View != want {
		return bad("View %q is not %s", wt.View, want)
	}
	if wt.AdminID != "" || wt.AdminDir != "" {
		if wt.AdminID == "." || wt.AdminID == ".." || strings.ContainsAny(wt.AdminID, "/\x00\n\r") ||
			wt.AdminDir != filepath.Join(wt.CommonDir, "worktrees", wt.AdminID) {
			return bad("AdminDir %q is not %s/worktrees/%s", wt.AdminDir, wt.CommonDir, wt.AdminID)
		}
	}
	if wt.Branch != BranchName(wt.ConversationID) {
		return bad("Branch %q is not %q", wt.Branch, BranchName(wt.ConversationID))
	}
	if wt.ViewBranch != "" && (!validRefName("refs/heads/"+wt.ViewBranch) || !validConfigWord(wt.ViewBranch)) {
		return bad("ViewBranch %q is not a branch name", wt.ViewBranch)
	}
	if wt.Workdir != "" && (!filepath.IsAbs(wt.Workdir) || filepath.Clean(wt.Workdir) != wt.Workdir || !within(wt.Workdir, wt.Path)) {
		return bad("Workdir %q is not a clean path in %s", wt.Workdir, wt.Path)
	}
	if wt.StartCommit != "" && !isHexID(wt.StartCommit) {
		return bad("StartCommit %q is not a full commit id", wt.StartCommit)
	}
	return nil
}

// modulesDir is where git keeps the git dirs of the submodules of wt's
// work tree: the modules directory of its own git dir (the common dir's,
// in a main work tree).
func (wt Worktree) modulesDir() string {
	if wt.AdminID != "" {
		return filepath.Join(wt.AdminDir, "modules")
	}
	return filepath.Join(wt.CommonDir, "modules")
}

// inPlaceMounts is MountPlan in place (see the layout above).
func (m *Manager) inPlaceMounts(wt Worktree) ([]mountplan.Mount, error) {
	var mounts []mountplan.Mount
	if wt.Workdir != "" && wt.Workdir != wt.Path {
		mounts = append(mounts, mountplan.Mount{Source: wt.Path, Target: wt.Path, ReadOnly: true}, mountplan.Mount{Source: wt.Workdir, Target: wt.Workdir})
	} else {
		mounts = append(mounts, mountplan.Mount{Source: wt.Path, Target: wt.Path})
	}
	mounts = append(mounts,
		mountplan.Mount{Source: wt.View, Target: wt.CommonDir},
		mountplan.Mount{Source: filepath.Join(wt.CommonDir, "objects"), Target: filepath.Join(filepath.Dir(wt.View), viewObjects), ReadOnly: true})
	// The repository's hooks, and its submodules' git dirs, read-only:
	// the submodules the user checked out work inside (status, log, diff,
	// a build that reads them), but the agent commits in none of them.
	for _, p := range []string{filepath.Join(wt.CommonDir, "hooks"), wt.modulesDir()} {
		if dirExistsNoFollow(p) {
			mounts = append(mounts, mountplan.Mount{Source: p, Target: p, ReadOnly: true})
		}
	}
	for _, mt := range mounts {
		if err := mountplan.CheckSource(mt.Source); err != nil {
			return nil, fmt.Errorf("worktree mount plan %s: %w", wt.Path, err)
		}
	}
	dotGit := filepath.Join(wt.Path, ".git")
	st, err := os.Lstat(dotGit)
	switch {
	case err != nil:
		return nil, fmt.Errorf("worktree mount plan %s: %w", wt.Path, err)
	case st.Mode().IsRegular():
		// A linked worktree's or a separate git dir's pointer: the
		// agent must not point the user's git at a directory it made
		// (mountplan.WorkTreePointers mounts it read-only).
	case st.IsDir() && dotGit == wt.CommonDir:
		// Covered by the view's mount.
	default:
		return nil, fmt.Errorf("worktree mount plan %s: %w: %s is neither the git dir nor a .git file", wt.Path, ErrInvalidWorktree, dotGit)
	}
	gitDir := wt.CommonDir
	if wt.AdminDir != "" {
		gitDir = wt.AdminDir
	}
	ptrs, err := mountplan.WorkTreePointers(mountHost{m}, wt.Path, gitDir, wt.UID, wt.GID)
	if err != nil {
		return nil, fmt.Errorf("worktree mount plan %s: %w", wt.Path, err)
	}
	if mounts, err = mountplan.Pin(mounts, ptrs); err != nil {
		return nil, fmt.Errorf("worktree mount plan %s: %w", wt.Path, err)
	}
	return mounts, nil
}

// gitlinks lists the submodule paths (gitlinks) of the index of the git
// dir gitDir, whose work tree is workTree: read from the index file itself
// (package gitindex: a large repository's index is read in a millisecond,
// where git lists every entry), or, for an index that package does not
// read, through hardened git (ls-files reads no file of the work tree).
func (m *Manager) gitlinks(workTree, gitDir string, uid, gid int) ([]string, error) {
	var links []string
	if read, err := gitindex.Gitlinks(filepath.Join(gitDir, "index"), uid); err == nil {
		links = read
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
		defer cancel()
		out, err := m.git(ctx, gitTarget{Dir: workTree, GitDir: gitDir, WorkTree: workTree, UID: uid, GID: gid}, runOpts{}, "ls-files", "--stage", "-z")
		if err != nil {
			return nil, fmt.Errorf("list the submodules of %s: %w", workTree, err)
		}
		links = porcelain.Gitlinks(out)
	}
	var paths []string
	for _, path := range links {
		if cleanRelPath(path) {
			paths = append(paths, path)
		}
	}
	return paths, nil
}
