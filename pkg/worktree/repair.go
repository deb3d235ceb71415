package worktree

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/ohd-dev/ohd/pkg/worktree/admindir"
)

// Stale is a worktree registration of a repository whose worktree does
// not exist on the host: what `git worktree list` reports as "prunable
// gitdir file points to non-existent location". The reference bug makes
// these: a worktree created inside a container, under a path only the
// container has.
type Stale struct {
	// Path is the worktree path the registration names.
	Path string
	// AdminDir is the registration's directory, <common>/worktrees/<name>.
	AdminDir string
	// Branch is the branch it had checked out (short name), if any.
	Branch string
	// Locked and LockReason say whether someone asked git to keep it.
	Locked     bool
	LockReason string
}

// StaleRegistrations lists the registrations of commonDir whose worktree
// does not exist on the host. It reads the admin dirs directly and runs
// nothing.
func (m *Manager) StaleRegistrations(ctx context.Context, commonDir string) ([]Stale, error) {
	entries, err := os.ReadDir(filepath.Join(commonDir, "worktrees"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("worktree stale registrations %s: %w", commonDir, err)
	}
	var out []Stale
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		admin := filepath.Join(commonDir, "worktrees", e.Name())
		if s, ok := staleAt(admin); ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// staleAt reports whether the admin dir's worktree is missing on the host.
func staleAt(admin string) (Stale, bool) {
	st, err := os.Lstat(admin)
	if err != nil || !st.IsDir() {
		return Stale{}, false
	}
	b, err := admindir.ReadLinkFile(filepath.Join(admin, "gitdir"))
	if err != nil {
		return Stale{}, false // git itself reports these differently; leave them
	}
	dotGit := strings.TrimSpace(string(b))
	if !filepath.IsAbs(dotGit) {
		dotGit = filepath.Join(admin, dotGit)
	}
	if _, err := os.Stat(dotGit); err == nil {
		return Stale{}, false
	}
	s := Stale{Path: filepath.Dir(dotGit), AdminDir: admin}
	if head, err := admindir.ReadLinkFile(filepath.Join(admin, "HEAD")); err == nil {
		if ref, ok := strings.CutPrefix(strings.TrimSpace(string(head)), "ref: refs/heads/"); ok {
			s.Branch = ref
		}
	}
	if reason, err := admindir.ReadLinkFile(filepath.Join(admin, "locked")); err == nil {
		s.Locked, s.LockReason = true, strings.TrimSpace(string(reason))
	}
	return s, true
}

// RemoveStale removes one stale registration, as `git worktree prune`
// would for it alone: under the repository lock it checks again that the
// worktree does not exist on the host, then deletes the admin dir. The
// branch and its commits are kept. A locked registration is refused:
// whoever locked it may still use it.
func (m *Manager) RemoveStale(ctx context.Context, commonDir string, s Stale) error {
	if filepath.Dir(s.AdminDir) != filepath.Join(commonDir, "worktrees") {
		return fmt.Errorf("worktree remove stale %s: %w: not an admin dir of %s", s.AdminDir, ErrInvalidWorktree, commonDir)
	}
	unlock, err := m.lockRepo(ctx, commonDir)
	if err != nil {
		return fmt.Errorf("worktree remove stale %s: %w", s.AdminDir, err)
	}
	defer unlock()
	now, ok := staleAt(s.AdminDir)
	if !ok {
		return fmt.Errorf("worktree remove stale %s: %w: its worktree exists now, or it is not a registration", s.AdminDir, ErrInvalidWorktree)
	}
	if now.Locked {
		return fmt.Errorf("worktree remove stale %s: %w: it is locked (%q); if nothing uses %s any more, run git worktree unlock on it first", s.AdminDir, ErrInvalidWorktree, now.LockReason, now.Path)
	}
	if err := os.RemoveAll(s.AdminDir); err != nil {
		return fmt.Errorf("worktree remove stale %s: %w", s.AdminDir, err)
	}
	m.log.Info("worktree stale registration removed", "admin", s.AdminDir, "path", now.Path, "branch", now.Branch)
	return nil
}

// Repair points a conversation worktree and its registration at each
// other again (both pointers, owned by the repository's owner) and
// re-locks it, so the host no longer reports it prunable. It changes no
// file of the work tree besides its .git file.
func (m *Manager) Repair(ctx context.Context, wt Worktree) error {
	if err := m.checkWorktree(wt); err != nil {
		return fmt.Errorf("worktree repair: %w", err)
	}
	if st, err := os.Stat(wt.Path); err != nil || !st.IsDir() {
		return fmt.Errorf("worktree repair %s: %w: the worktree folder is gone; nothing on the host can bring its files back", wt.Path, ErrInvalidWorktree)
	}
	unlock, err := m.lockRepo(ctx, wt.CommonDir)
	if err != nil {
		return fmt.Errorf("worktree repair %s: %w", wt.Path, err)
	}
	defer unlock()
	if !admindir.LooksLikeAdmin(wt.AdminDir) {
		return fmt.Errorf("worktree repair %s: %w: its registration %s is gone; end the conversation (its work is snapshotted) and start a new one", wt.Path, ErrInvalidWorktree, wt.AdminDir)
	}
	files := [][2]string{
		{filepath.Join(wt.Path, ".git"), "gitdir: " + wt.AdminDir + "\n"},
		{filepath.Join(wt.AdminDir, "gitdir"), filepath.Join(wt.Path, ".git") + "\n"},
	}
	if _, err := os.Lstat(filepath.Join(wt.AdminDir, "locked")); err != nil {
		files = append(files, [2]string{filepath.Join(wt.AdminDir, "locked"), LockReason(wt.ConversationID)})
	}
	// The worktree's .git is rewritten in place: the running container
	// has it bind-mounted read-only (package mountplan), and a rename over it
	// would detach that mount in the container's namespace, leaving the
	// agent a writable .git until the container is made anew.
	if err := m.rewriteOwned(files[0][0], files[0][1], wt.UID, wt.GID); err != nil {
		return fmt.Errorf("worktree repair %s: %w", wt.Path, err)
	}
	for _, f := range files[1:] {
		if err := m.writeOwned(f[0], f[1], wt.UID, wt.GID); err != nil {
			return fmt.Errorf("worktree repair %s: %w", wt.Path, err)
		}
	}
	m.log.Info("worktree repaired", "conversation", wt.ConversationID, "path", wt.Path)
	return nil
}

// rewriteOwned writes content into the regular file at path, keeping its
// inode (and so any bind mount of it), owned by uid:gid; anything else at
// path (a symlink, a directory, nothing) is replaced as writeOwned does.
// A crash midway leaves a .git that the next repair rewrites again.
func (m *Manager) rewriteOwned(path, content string, uid, gid int) error {
	st, err := os.Lstat(path)
	if err != nil || !st.Mode().IsRegular() {
		return m.writeOwned(path, content, uid, gid)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(content)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = m.chown(path, uid, gid)
	}
	return werr
}

// writeOwned replaces path atomically with content, owned by uid:gid. A
// symlink at path is replaced, never followed.
func (m *Manager) writeOwned(path, content string, uid, gid int) error {
	tmp := path + ".ohd-tmp"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(content)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = m.chown(tmp, uid, gid)
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		_ = os.Remove(tmp)
	}
	return werr
}

// UniqueCommits returns how many commits of branch (a short name) no other
// ref of the repository at commonDir holds (other branches, tags, remote
// branches, refs/ohd/...): the work a stale registration's branch would
// take with it if it were deleted. 0 for a branch that does not exist.
// It runs git rev-list as the repository's owner, uid:gid.
func (m *Manager) UniqueCommits(ctx context.Context, commonDir, branch string, uid, gid int) (int, error) {
	if branch == "" || strings.HasPrefix(branch, "-") || strings.ContainsAny(branch, "*?[\\") {
		return 0, nil
	}
	t := gitTarget{Dir: commonDir, GitDir: commonDir, UID: uid, GID: gid}
	ref := "refs/heads/" + branch
	if _, ok, err := m.revParse(ctx, t, ref); err != nil || !ok {
		return 0, err
	}
	out, err := m.git(ctx, t, runOpts{}, "rev-list", "--count", ref, "--not",
		"--exclude="+branch, "--branches", "--tags", "--remotes", "--glob=refs/ohd/*")
	if err != nil {
		return 0, fmt.Errorf("worktree unique commits of %s in %s: %w", branch, commonDir, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		return 0, fmt.Errorf("worktree unique commits of %s in %s: unexpected output %q", branch, commonDir, truncate(out, 100))
	}
	return n, nil
}
