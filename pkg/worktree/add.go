package worktree

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ohd-dev/ohd/pkg/hardgit"
	"github.com/ohd-dev/ohd/pkg/worktree/admindir"
)

// AddOptions says what Add creates.
type AddOptions struct {
	// Repo is the repository, as returned by Inspect (Add inspects its
	// Workspace again and refuses if anything changed).
	Repo Repo
	// ConversationID is a canonical UUID (see ValidateID).
	ConversationID string
	// StartPoint is an optional branch, tag or commit to start from. When
	// empty, the first that exists of refs/remotes/origin/HEAD, main,
	// master and HEAD is used. Nothing is fetched.
	StartPoint string
	// Inspected says Repo comes from this Manager's Inspect a moment ago,
	// so Plan and Add need not inspect the workspace again (they do
	// otherwise, so a stale or hand-made Repo cannot point them elsewhere).
	Inspected bool
	// Planned, when set, is what Plan returned for these same options a
	// moment ago: Add then skips the checks Plan made (the inspection, the
	// free path and branch, the start point) instead of running their git
	// commands twice, and uses the start commit Plan resolved. The checks
	// that matter under the repository lock run again anyway.
	Planned *Worktree
	// View gives the worktree its own git view (see the package comment),
	// for a conversation whose agent runs in a container: the container
	// then never writes the host repository.
	View bool
	// Share, when set, is called on the conversation directory right
	// after Add makes it, before git writes anything below it: package
	// gitboundary gives it the default ACL that every file git checks out
	// then inherits (the agent's own uid may write them), with no walk.
	Share func(convDir string) error
}

// Worktree is a conversation's worktree as Add created it. Persist every
// field: Remove, Snapshot, MountPlan and Health need them and check them
// for consistency.
type Worktree struct {
	ConversationID string
	// Repo is the TopLevel of the host repository.
	Repo string
	// CommonDir is the canonical git common dir.
	CommonDir string
	// Path is the canonical worktree path <Root>/<id>/<basename(Repo)>.
	Path string
	// AdminID is the name of the worktree's admin dir, read from
	// <Path>/.git after creation (git picks it; it is not always the
	// basename of Path).
	AdminID string
	// AdminDir is <CommonDir>/worktrees/<AdminID>.
	AdminDir string
	// Branch is "openhands/<id>".
	Branch string
	// StartPoint is the start point used, as named by the order (for
	// example "refs/remotes/origin/HEAD", "main", "HEAD", or the explicit
	// one).
	StartPoint string
	// StartCommit is the full hex id of the commit the branch started at.
	StartCommit string
	// UID and GID own the repository; git ran as them and the container
	// must too.
	UID, GID int
	// View is the conversation's private git view, <Root>/<id>/.ohd/git,
	// mounted in the container at CommonDir; "" for a worktree that shares
	// the repository's git dir (a local-runtime conversation, or one
	// created before views existed: see SeedView).
	View string
	// InPlace says the conversation works in the repository's own folder
	// (see inplace.go): Path is Repo, the user's work tree, which ohd
	// never removes or resets; AdminID and AdminDir name the folder's own
	// admin dir when it is a linked worktree ("" for a main work tree);
	// View is <Root>/<id>/.ohd/git.
	InPlace bool
	// ViewBranch is the view's branch whose commits Publish brings to the
	// host's Branch; "" means Branch itself. In place it is the branch
	// the host had checked out.
	ViewBranch string
	// Workdir is, in place, the folder the conversation was created for
	// when it lies below Path: only it is mounted read-write, the rest of
	// Path read-only. "" means Path.
	Workdir string
}

// viewBranch is the view's branch that Publish publishes.
func (wt Worktree) viewBranch() string {
	if wt.ViewBranch != "" {
		return wt.ViewBranch
	}
	return wt.Branch
}

// startCandidates is the start point order when none is given: the name
// recorded, and the ref checked (full ref names, so a tag called "main"
// cannot stand in for the branch).
var startCandidates = [][2]string{
	{"refs/remotes/origin/HEAD", "refs/remotes/origin/HEAD"},
	{"main", "refs/heads/main"},
	{"master", "refs/heads/master"},
	{"HEAD", "HEAD"},
}

// plan is the side-effect-free first half of Add.
func (m *Manager) plan(ctx context.Context, opts AddOptions) (Worktree, Repo, error) {
	id := opts.ConversationID
	if err := ValidateID(id); err != nil {
		return Worktree{}, Repo{}, fmt.Errorf("worktree add: %w", err)
	}
	if err := checkStartPoint(opts.StartPoint); err != nil {
		return Worktree{}, Repo{}, fmt.Errorf("worktree add: %w", err)
	}
	repo := opts.Repo
	var err error
	if !opts.Inspected || !repo.IsGit || repo.TopLevel == "" {
		if repo, err = m.recheck(ctx, opts.Repo); err != nil {
			return Worktree{}, Repo{}, fmt.Errorf("worktree add: %w", err)
		}
	}
	if m.euid != 0 && repo.UID != m.euid {
		return Worktree{}, Repo{}, fmt.Errorf("worktree add %s: %w", repo.TopLevel, hardgit.OwnerError(repo.UID, m.euid))
	}
	base := filepath.Base(repo.TopLevel)
	if base == "/" || base == "." {
		return Worktree{}, Repo{}, fmt.Errorf("worktree add %s: %w: a repository at the file system root cannot be named", repo.TopLevel, ErrInvalidPath)
	}
	if base == viewParent {
		return Worktree{}, Repo{}, fmt.Errorf("worktree add %s: %w: a repository named %q collides with ohd's own directory beside the worktree: rename it", repo.TopLevel, ErrInvalidPath, viewParent)
	}
	convDir := filepath.Join(m.root, id)
	wt := Worktree{
		ConversationID: id,
		Repo:           repo.TopLevel,
		CommonDir:      repo.CommonDir,
		Path:           filepath.Join(convDir, base),
		Branch:         BranchName(id),
		UID:            repo.UID,
		GID:            repo.GID,
	}
	if opts.View {
		wt.View, _ = viewPaths(wt.Path)
	}
	fail := func(err error) (Worktree, Repo, error) {
		return Worktree{}, Repo{}, fmt.Errorf("worktree add %s: %w", wt.Path, err)
	}
	if within(wt.Path, repo.CommonDir) || within(repo.CommonDir, convDir) {
		return fail(fmt.Errorf("%w: the worktree root %s overlaps the git dir %s: choose a worktree root outside the repository's git dir", ErrInvalidPath, m.root, repo.CommonDir))
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
	// Without an explicit start point, the branch and every candidate of
	// the order are looked up in one git run.
	var known map[string]string
	if opts.StartPoint == "" {
		names := []string{"refs/heads/" + wt.Branch}
		for _, c := range startCandidates {
			names = append(names, c[1]+"^{commit}")
		}
		if known, err = m.lookup(ctx, rt, names); err != nil {
			return fail(err)
		}
	}
	if err := m.checkFree(ctx, rt, wt, known); err != nil {
		return fail(err)
	}
	wt.StartPoint, wt.StartCommit, err = m.resolveStartPoint(ctx, rt, repo, opts.StartPoint, known)
	if err != nil {
		return fail(err)
	}
	return wt, repo, nil
}

// lookup resolves each of names (full ref names, each maybe with a peel
// such as ^{commit}) in one git run, and returns the object ids of those
// that exist: what rev-parse --verify --quiet says of each.
func (m *Manager) lookup(ctx context.Context, t gitTarget, names []string) (map[string]string, error) {
	var in strings.Builder
	for _, n := range names {
		in.WriteString(n + "\n")
	}
	out, err := m.git(ctx, t, runOpts{Stdin: []byte(in.String())}, "cat-file", "--batch-check=%(objectname)")
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != len(names) {
		return nil, fmt.Errorf("git cat-file --batch-check: %d answers to %d names", len(lines), len(names))
	}
	found := map[string]string{}
	for i, n := range names {
		if isHexID(lines[i]) {
			found[n] = lines[i]
		}
	}
	return found, nil
}

// Plan runs every check of Add without changing anything and returns the
// worktree Add would create: its path, branch, and the start point and
// commit the order picks. The orchestrator calls it before it writes its
// record, so bad input (a start point that does not exist, an id in use)
// is refused before any side effect.
func (m *Manager) Plan(ctx context.Context, opts AddOptions) (Worktree, error) {
	wt, _, err := m.plan(ctx, opts)
	return wt, err
}

// Add creates the conversation's worktree on the host: branch
// openhands/<id> from the start point, locked with reason
// "ohd conversation <id>", at <Root>/<id>/<basename>. Every check runs
// before the first change; if git fails midway, Add removes what it
// created (directory, admin dir, branch) before returning the error.
func (m *Manager) Add(ctx context.Context, opts AddOptions) (Worktree, error) {
	var (
		wt   Worktree
		repo Repo
		err  error
	)
	if p := opts.Planned; p != nil {
		// Only a plan of exactly these options: anything else would skip
		// checks for a worktree they never covered.
		repo = opts.Repo
		want := filepath.Join(m.root, opts.ConversationID, filepath.Base(repo.TopLevel))
		if p.ConversationID != opts.ConversationID || p.Path != want || p.Repo != repo.TopLevel ||
			p.CommonDir != repo.CommonDir || p.Branch != BranchName(opts.ConversationID) || !isHexID(p.StartCommit) ||
			(opts.StartPoint != "" && p.StartPoint != opts.StartPoint) || ValidateID(opts.ConversationID) != nil ||
			(p.View != "") != opts.View {
			return Worktree{}, fmt.Errorf("worktree add: %w: the plan does not match the options; call Plan again", ErrInvalidWorktree)
		}
		wt = *p
		wt.AdminID, wt.AdminDir = "", ""
	} else if wt, repo, err = m.plan(ctx, opts); err != nil {
		return Worktree{}, err
	}
	id := wt.ConversationID
	convDir := filepath.Dir(wt.Path)
	rt := repoTarget(repo)
	fail := func(err error) (Worktree, error) {
		return Worktree{}, fmt.Errorf("worktree add %s: %w", wt.Path, err)
	}
	// Side effects start here.
	unlock, err := m.lockRepo(ctx, repo.CommonDir)
	if err != nil {
		return fail(err)
	}
	// Another ohd process may have won a race for this id.
	if _, ok, err := m.revParse(ctx, rt, "refs/heads/"+wt.Branch); err != nil || ok {
		unlock()
		if err == nil {
			err = fmt.Errorf("%w: branch %s was just created by someone else", ErrExists, wt.Branch)
		}
		return fail(err)
	}
	if ok, err := lexists(convDir); err != nil || ok {
		unlock()
		if err == nil {
			err = fmt.Errorf("%w: %s was just created by someone else", ErrExists, convDir)
		}
		return fail(err)
	}
	worktreesDir := filepath.Join(repo.CommonDir, "worktrees")
	hadWorktreesDir, err := lexists(worktreesDir)
	if err != nil {
		unlock()
		return fail(err)
	}
	undo := func(cause error) (Worktree, error) {
		m.undoAdd(ctx, wt, hadWorktreesDir)
		return fail(cause)
	}
	if err := os.Mkdir(convDir, 0o700); err != nil {
		unlock()
		return fail(fmt.Errorf("create %s: %w", convDir, err))
	}
	if err := m.chown(convDir, repo.UID, repo.GID); err != nil {
		defer unlock()
		return undo(err)
	}
	if opts.Share != nil {
		if err := opts.Share(convDir); err != nil {
			defer unlock()
			return undo(err)
		}
	}
	// --no-checkout: the files are checked out below by a separate git
	// run in the new worktree's own context, because that context (its
	// admin dir, its branch) decides which config includes apply, and the
	// filter drivers must be enumerated in exactly that context.
	_, err = m.git(ctx, rt, runOpts{}, "worktree", "add",
		"--lock", "--reason", LockReason(id),
		"--no-checkout", "-b", wt.Branch, "--no-track",
		wt.Path, wt.StartCommit)
	if err != nil {
		defer unlock()
		return undo(fmt.Errorf("create worktree in %s: %w", repo.TopLevel, err))
	}
	if wt.AdminDir, err = admindir.Find(wt.CommonDir, wt.Path); err != nil {
		defer unlock()
		return undo(err)
	}
	wt.AdminID = filepath.Base(wt.AdminDir)
	unlock()

	// The view is seeded while git checks the files out (both read the
	// host's repository; neither writes what the other reads), but for
	// the index, which the checkout writes and the view copies after.
	checkedOut := make(chan error, 1)
	go func() {
		_, err := m.git(ctx, worktreeTarget(wt), runOpts{}, "reset", "--hard", "--no-recurse-submodules", "--quiet")
		checkedOut <- err
	}()
	var serr error
	if wt.View != "" {
		serr = m.seedViewWith(ctx, wt, false)
	}
	if err := <-checkedOut; err != nil {
		serr = fmt.Errorf("check out %s: %w", wt.StartPoint, err)
	}
	if serr == nil && wt.View != "" {
		serr = m.seedViewIndex(wt)
	}
	if serr != nil {
		unlock, lerr := m.lockRepo(context.WithoutCancel(ctx), repo.CommonDir)
		if lerr == nil {
			defer unlock()
		}
		return undo(serr)
	}
	if wt.View != "" {
		m.onStep("view")
	}
	m.log.Info("worktree added", "conversation", id, "path", wt.Path, "branch", wt.Branch,
		"start_point", wt.StartPoint, "start_commit", wt.StartCommit, "admin_id", wt.AdminID, "view", wt.View)
	return wt, nil
}

// recheck inspects r.Workspace again and requires the same answer, so a
// stale or hand-made Repo cannot point Add somewhere else.
func (m *Manager) recheck(ctx context.Context, r Repo) (Repo, error) {
	if r.Workspace == "" {
		return Repo{}, fmt.Errorf("%w: Repo.Workspace is empty: call Inspect first", ErrInvalidPath)
	}
	got, err := m.Inspect(ctx, r.Workspace)
	if err != nil {
		return Repo{}, err
	}
	if !got.IsGit {
		return Repo{}, fmt.Errorf("%s: %w: start the conversation without a worktree, or run git init there", got.Workspace, ErrNotGit)
	}
	if r != got {
		return Repo{}, fmt.Errorf("%s: %w: the repository changed since it was inspected (-given +now):\n%s", r.Workspace, ErrInvalidPath, repoDiff(r, got))
	}
	return got, nil
}

// repoDiff lists the fields in which two Repos differ, one "-" and one
// "+" line each. (go-cmp did this; its package initialisation cost every
// start of ohd and ohctl 2 ms.)
func repoDiff(a, b Repo) string {
	var d strings.Builder
	field := func(name string, x, y any) {
		if x != y {
			fmt.Fprintf(&d, "-%s: %v\n+%s: %v\n", name, x, name, y)
		}
	}
	field("Workspace", a.Workspace, b.Workspace)
	field("IsGit", a.IsGit, b.IsGit)
	field("TopLevel", a.TopLevel, b.TopLevel)
	field("CommonDir", a.CommonDir, b.CommonDir)
	field("GitDir", a.GitDir, b.GitDir)
	field("Prefix", a.Prefix, b.Prefix)
	field("UID", a.UID, b.UID)
	field("GID", a.GID, b.GID)
	if d.Len() == 0 && a != b {
		fmt.Fprintf(&d, "-%+v\n+%+v\n", a, b) // a field added since
	}
	return d.String()
}

// checkFree fails with ErrExists if the branch or a registration for the
// worktree path already exists.
func (m *Manager) checkFree(ctx context.Context, rt gitTarget, wt Worktree, known map[string]string) error {
	ref := "refs/heads/" + wt.Branch
	ok := false
	if known != nil {
		_, ok = known[ref]
	} else if _, found, err := m.revParse(ctx, rt, ref); err != nil {
		return err
	} else {
		ok = found
	}
	if ok {
		return fmt.Errorf("%w: branch %s exists in %s: delete it or use another conversation id", ErrExists, wt.Branch, wt.Repo)
	}
	// The registrations are read from the admin dirs, as git worktree
	// list reads them (a git run fewer on the way of every create), under
	// the repository lock: while another create is inside git worktree
	// add, its admin dir can be half written.
	unlock, err := m.lockRepo(ctx, wt.CommonDir)
	if err != nil {
		return err
	}
	admin := admindir.RegisteredAt(wt.CommonDir, wt.Path)
	unlock()
	if admin != "" {
		return fmt.Errorf("%w: %s is still registered as a worktree of %s: remove the conversation first", ErrExists, wt.Path, wt.Repo)
	}
	return nil
}

// checkStartPoint rejects start points that are option-like or carry
// control characters before git sees them.
func checkStartPoint(sp string) error {
	switch {
	case sp == "":
		return nil
	case strings.HasPrefix(sp, "-"):
		return fmt.Errorf("%w %q: it looks like an option: pass a branch, tag or commit", ErrInvalidStartPoint, truncate(sp, 64))
	case len(sp) > 1024:
		return fmt.Errorf("%w: longer than 1024 bytes: pass a branch, tag or commit", ErrInvalidStartPoint)
	}
	for _, c := range []byte(sp) {
		if c < 0x20 || c == 0x7f {
			return fmt.Errorf("%w %q: it contains a control character: pass a branch, tag or commit", ErrInvalidStartPoint, sp)
		}
	}
	return nil
}

// resolveStartPoint applies the start point order and returns the name
// used and its commit.
func (m *Manager) resolveStartPoint(ctx context.Context, rt gitTarget, repo Repo, explicit string, known map[string]string) (string, string, error) {
	if explicit != "" {
		commit, ok, err := m.revParse(ctx, rt, explicit+"^{commit}")
		var ge *GitError
		if err != nil && errors.As(err, &ge) && ge.ExitCode == 128 {
			ok, err = false, nil // e.g. bad revision syntax: same answer for the user
		}
		if err != nil {
			return "", "", err
		}
		if !ok {
			return "", "", fmt.Errorf("%w: %q is not a commit in %s: pass an existing branch, tag or commit to --start-point", ErrInvalidStartPoint, explicit, repo.TopLevel)
		}
		return explicit, commit, nil
	}
	for _, c := range startCandidates {
		var commit string
		ok := false
		if known != nil {
			commit, ok = known[c[1]+"^{commit}"]
		} else {
			var err error
			if commit, ok, err = m.revParse(ctx, rt, c[1]+"^{commit}"); err != nil {
				return "", "", err
			}
		}
		if ok {
			return c[0], commit, nil
		}
	}
	return "", "", fmt.Errorf("%w: %s has no commit to start from (no origin/HEAD, main, master or HEAD): commit something first or pass --start-point", ErrNoCommits, repo.TopLevel)
}

// revParse resolves rev to an object id; ok is false when it does not
// exist (exit status 1 of rev-parse --verify --quiet).
func (m *Manager) revParse(ctx context.Context, t gitTarget, rev string) (oid string, ok bool, err error) {
	out, err := m.git(ctx, t, runOpts{}, "rev-parse", "--verify", "--quiet", "--end-of-options", rev)
	if err != nil {
		var ge *GitError
		if errors.As(err, &ge) && ge.ExitCode == 1 {
			return "", false, nil
		}
		return "", false, err
	}
	oid = strings.TrimSpace(out)
	if !isHexID(oid) {
		return "", false, fmt.Errorf("git rev-parse %s: unexpected output %q", rev, truncate(out, 100))
	}
	return oid, true, nil
}

// isHexID reports whether s is a full SHA-1 or SHA-256 object id.
func isHexID(s string) bool { return hardgit.IsObjectID(s) }

// undoAdd removes what a failed Add created: the admin dir (only one whose
// gitdir points at our path), the conversation dir, the branch (only if it
// still points at the start commit) and an empty worktrees/ dir that did
// not exist before. The caller holds the repository lock.
func (m *Manager) undoAdd(ctx context.Context, wt Worktree, hadWorktreesDir bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.timeout)
	defer cancel()
	// Ours: pointing at our path, or, when git was stopped before writing
	// gitdir, carrying our lock reason (git writes the lock first).
	reason := LockReason(wt.ConversationID)
	for admin := admindir.FindOwn(wt.CommonDir, wt.Path, reason); admin != ""; admin = admindir.FindOwn(wt.CommonDir, wt.Path, reason) {
		if err := admindir.Remove(wt.CommonDir, admin, wt.ConversationID, func() { m.onStep("admin-moved") }); err != nil {
			m.log.Warn("undo worktree add: remove admin dir", "path", admin, "err", err)
			break
		}
	}
	m.removeAbandonedAdmins(wt)
	if err := os.RemoveAll(filepath.Join(m.root, wt.ConversationID)); err != nil {
		m.log.Warn("undo worktree add: remove conversation dir", "path", wt.Path, "err", err)
	}
	ct := commonTarget(wt.CommonDir, wt.UID, wt.GID)
	if oid, ok, err := m.revParse(ctx, ct, "refs/heads/"+wt.Branch); err == nil && ok && oid == wt.StartCommit {
		if _, err := m.git(ctx, ct, runOpts{}, "update-ref", "-d", "refs/heads/"+wt.Branch, wt.StartCommit); err != nil {
			m.log.Warn("undo worktree add: delete branch", "branch", wt.Branch, "err", err)
		}
	}
	if !hadWorktreesDir {
		_ = os.Remove(filepath.Join(wt.CommonDir, "worktrees")) // only if empty
	}
}

// chown gives path to uid:gid when ohd is root (otherwise ohd is the owner).
func (m *Manager) chown(path string, uid, gid int) error {
	if m.euid != 0 {
		return nil
	}
	if err := os.Lchown(path, uid, gid); err != nil {
		return fmt.Errorf("chown %s to %d:%d: %w", path, uid, gid, err)
	}
	return nil
}

// repoTarget runs git in the context of the workspace's own work tree.
func repoTarget(r Repo) gitTarget {
	return gitTarget{Dir: r.TopLevel, GitDir: r.GitDir, UID: r.UID, GID: r.GID}
}

// commonTarget runs git on the common dir, with no work tree.
func commonTarget(commonDir string, uid, gid int) gitTarget {
	return gitTarget{Dir: commonDir, GitDir: commonDir, UID: uid, GID: gid}
}

// worktreeTarget runs git in the conversation worktree's own context,
// naming the recorded admin dir and path explicitly (the .git file is
// agent-writable and is not followed).
func worktreeTarget(wt Worktree) gitTarget {
	return gitTarget{Dir: wt.Path, GitDir: wt.AdminDir, WorkTree: wt.Path, UID: wt.UID, GID: wt.GID}
}
