package worktree

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ohd-dev/ohd/pkg/gitimport"
	"github.com/ohd-dev/ohd/pkg/worktree/nofollow"
)

// KeptPrefix is where ohd keeps refs of conversation id's view that the
// host did not have: refs/ohd/kept/<id>/.
func KeptPrefix(id string) string { return "refs/ohd/kept/" + id + "/" }

// KeptRef is where ohd keeps the view's ref (a full name, refs/...):
// refs/ohd/kept/<id>/heads/foo for refs/heads/foo.
func KeptRef(id, ref string) string { return KeptPrefix(id) + strings.TrimPrefix(ref, "refs/") }

// maxKept bounds the refs one removal keeps: an agent that makes a million
// tags must not make a million refs in the user's repository.
const maxKept = 1000

// PublishResult says what Publish did.
type PublishResult struct {
	// Commit is the view's commit that was published (or kept).
	Commit string
	// Published is the host branch's value that ohd last wrote: Commit,
	// unless the host branch had been moved by someone else.
	Published string
	// Kept is the ref Commit was kept under when the host branch had moved
	// (refs/ohd/kept/<id>/heads/openhands/<id>); Conflict says so in a
	// sentence. Both empty when the branch was published.
	Kept, Conflict string
	// ClearedLock is a lock file of the branch an earlier, killed ohd
	// left, which Publish removed.
	ClearedLock string
	// Held is the ref Commit was held back under (HeldRef) because it
	// adds or changes the gitlinks HeldPaths, whose directories in the
	// work tree hold a repository the agent made; Publish then fails with
	// ErrHeld. Both empty otherwise.
	Held      string
	HeldPaths []string
}

// ErrLocked is returned when a ref ohd moves is locked by someone else
// (a lock file younger than this ohd): the publish is retried later.
var ErrLocked = errors.New("ref locked")

// ErrRefused wraps a publish whose objects git's validation refused (a
// corrupt or incomplete object from the view): nothing was imported.
var ErrRefused = gitimport.ErrRefused

// Publish makes the host's refs/heads/openhands/<id> equal to the view's
// commit tip. published is the value ohd last wrote there (the start
// commit at first). The objects come through the sandbox as a pack and
// enter the host's store only through `git unpack-objects --strict` or
// `git index-pack --strict` (git's validation of a push), and only if tip
// is then complete; the ref moves with published as its expected old
// value. A host branch equal to one of alsoOurs (a commit ohd was about
// to publish when it was killed) counts as published. If the host branch
// was moved by someone else (it is no longer published), it is left
// alone: tip is kept under KeptRef and PublishResult.Conflict says so. A
// lock of the branch's ref that an earlier ohd left (older than this
// Manager) is removed first (PublishResult.ClearedLock); a younger one is
// someone else's, and Publish fails with ErrLocked.
func (m *Manager) Publish(ctx context.Context, wt Worktree, sb Sandbox, tip, published string, alsoOurs ...string) (PublishResult, error) {
	res := PublishResult{Commit: tip, Published: published}
	if err := m.checkWorktree(wt); err != nil || wt.View == "" {
		if err == nil {
			err = fmt.Errorf("%w: %s has no git view", ErrInvalidWorktree, wt.Path)
		}
		return res, fmt.Errorf("worktree publish: %w", err)
	}
	if !isHexID(tip) {
		return res, fmt.Errorf("worktree publish %s: %w: the view's branch is %q, not a commit id", wt.Path, ErrRefused, truncate(tip, 80))
	}
	if tip == published {
		return res, nil
	}
	ct := commonTarget(wt.CommonDir, wt.UID, wt.GID)
	keep, err := m.importObjects(ctx, wt, sb, []string{tip}, []string{published, wt.StartCommit}, []string{tip})
	defer keep()
	if err != nil {
		return res, fmt.Errorf("worktree publish %s: %w", wt.Path, err)
	}
	m.onStep("publish")
	unlock, err := m.lockRepo(ctx, wt.CommonDir)
	if err != nil {
		return res, fmt.Errorf("worktree publish %s: %w", wt.Path, err)
	}
	defer unlock()
	ref := "refs/heads/" + wt.Branch
	cur, _, err := m.revParse(ctx, ct, ref)
	if err != nil {
		return res, fmt.Errorf("worktree publish %s: %w", wt.Path, err)
	}
	if cur != "" && slices.Contains(alsoOurs, cur) {
		published = cur // ohd wrote it, then was killed before recording it
	}
	if res.ClearedLock, err = m.clearStaleLock(wt.CommonDir, ref); err != nil {
		return res, fmt.Errorf("worktree publish %s: %w", wt.Path, err)
	}
	if cur == tip {
		res.Published = tip
		return res, nil
	}
	// A commit that would make the user's git enter a repository the
	// agent made is held back (held.go).
	heldRef := HeldRef(wt.ConversationID, ref)
	paths, err := m.heldGitlinks(ctx, ct, wt, cur, tip, true)
	if err != nil {
		return res, fmt.Errorf("worktree publish %s: %w", wt.Path, err)
	}
	if len(paths) > 0 {
		if _, err := m.git(ctx, ct, runOpts{}, "update-ref", "-m", "ohd: held back from conversation "+wt.ConversationID, heldRef, tip); err != nil {
			return res, fmt.Errorf("worktree publish %s: hold %s: %w", wt.Path, heldRef, err)
		}
		res.Held, res.HeldPaths = heldRef, paths
		msg := heldMessage(wt, tip, heldRef, paths, false)
		m.log.Warn("publish held back", "conversation", wt.ConversationID, "commit", tip, "held", heldRef, "paths", paths)
		return res, fmt.Errorf("worktree publish %s: %w: %s", wt.Path, ErrHeld, msg)
	}
	heldOld, _, err := m.revParse(ctx, ct, heldRef)
	if err != nil {
		return res, fmt.Errorf("worktree publish %s: %w", wt.Path, err)
	}
	if cur != published && published != "" {
		res.Kept = KeptRef(wt.ConversationID, ref)
		res.Conflict = fmt.Sprintf("branch %s was moved on the host (to %s) since ohd published %s: the conversation's commit %s is kept as %s",
			wt.Branch, shortOID(cur), shortOID(published), shortOID(tip), res.Kept)
		if _, err := m.git(ctx, ct, runOpts{}, "update-ref", "-m", "ohd: kept from conversation "+wt.ConversationID, res.Kept, tip); err != nil {
			return res, fmt.Errorf("worktree publish %s: keep %s: %w", wt.Path, res.Kept, err)
		}
		m.log.Warn("publish conflict", "conversation", wt.ConversationID, "branch", wt.Branch, "host", cur, "kept", res.Kept)
		return res, nil
	}
	// The branch moves, and a commit held back before is no longer.
	tx := fmt.Sprintf("update %s %s %s\n", ref, tip, orZero(cur))
	if heldOld != "" {
		tx += fmt.Sprintf("delete %s %s\n", heldRef, heldOld)
	}
	if err := m.updateRefs(ctx, ct, tx, "-m", "ohd: publish conversation "+wt.ConversationID); err != nil {
		return res, fmt.Errorf("worktree publish %s: move %s: %w", wt.Path, wt.Branch, err)
	}
	res.Published = tip
	m.log.Debug("published", "conversation", wt.ConversationID, "branch", wt.Branch, "commit", tip)
	return res, nil
}

// updateRefs runs `git update-ref --stdin` with tx, a transaction of
// "update"/"delete"/"create" lines on refs ohd owns for one conversation
// (its branch, snapshot, kept and live refs), after clearing each of
// those refs' lock files an earlier ohd left behind (clearStaleLock): a
// kill in the middle of such a transaction leaves them, and every later
// one would fail. The caller holds the repository's lock.
func (m *Manager) updateRefs(ctx context.Context, ct gitTarget, tx string, args ...string) error {
	for line := range strings.Lines(tx) {
		f := strings.Fields(line)
		if len(f) >= 2 && (f[0] == "update" || f[0] == "delete" || f[0] == "create") {
			if _, err := m.clearStaleLock(ct.GitDir, f[1]); err != nil {
				return err
			}
		}
	}
	_, err := m.git(ctx, ct, runOpts{Stdin: []byte(tx)}, append(append([]string{"update-ref"}, args...), "--stdin")...)
	return err
}

// clearStaleLock removes ref's lock file (and packed-refs.lock) in the
// common dir if an earlier ohd left it: older than this Manager, while
// this ohd holds the repository's lock, so no ohd is using it. It returns
// the removed path, or ErrLocked for a younger lock.
func (m *Manager) clearStaleLock(commonDir, ref string) (string, error) {
	var cleared []string
	for _, p := range []string{filepath.Join(commonDir, filepath.FromSlash(ref)+".lock"), filepath.Join(commonDir, "packed-refs.lock")} {
		st, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		if !st.Mode().IsRegular() || !st.ModTime().Before(m.started) {
			return "", fmt.Errorf("%w: %s exists (another git is updating it, or it was left behind: remove it if no git runs in the repository)", ErrLocked, p)
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		m.log.Warn("removed a ref lock an earlier ohd left", "lock", p, "modified", st.ModTime())
		cleared = append(cleared, p)
	}
	return strings.Join(cleared, ", "), nil
}

// StaleLocks lists the lock files of wt's branch (and packed-refs) that
// exist in the host repository now: `ohctl doctor` reports them.
func (m *Manager) StaleLocks(wt Worktree) []string {
	var out []string
	for _, p := range []string{filepath.Join(wt.CommonDir, "refs", "heads", filepath.FromSlash(wt.Branch)+".lock"), filepath.Join(wt.CommonDir, "packed-refs.lock")} {
		if st, err := os.Lstat(p); err == nil && time.Since(st.ModTime()) > 10*time.Second {
			out = append(out, p)
		}
	}
	return out
}

func shortOID(s string) string {
	if s == "" {
		return "nothing"
	}
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// ViewBranch reads the commit of the view's branch (refs/heads/openhands/<id>,
// or in place the branch the host had checked out: Worktree.ViewBranch;
// "" if the ref does not exist), as a loose ref or in packed-refs. The
// view is the agent's: every path component is opened relative to the
// view without following a symlink, so nothing outside the view is ever
// read, and packed-refs is read only when it changed and is not huge.
func (m *Manager) ViewBranch(wt Worktree) (string, error) {
	if wt.View == "" {
		return "", fmt.Errorf("worktree view branch: %w: %s has no git view", ErrInvalidWorktree, wt.Path)
	}
	ref := "refs/heads/" + wt.viewBranch()
	b, err := nofollow.ReadBeneath(wt.View, ref, 4096)
	switch {
	case err == nil:
		s := strings.TrimSpace(string(b))
		if !isHexID(s) {
			return "", fmt.Errorf("worktree view branch %s: %w: the loose ref holds %q", wt.Path, ErrRefused, truncate(s, 80))
		}
		return s, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("worktree view branch %s: %w", wt.Path, err)
	}
	return m.packedRef(wt.View, ref)
}

// packedFile is what packedRef last read of one view's packed-refs.
type packedFile struct {
	dev, ino    uint64
	size, mtime int64
	ref, oid    string
}

// packedRef finds ref in the view's packed-refs, reading the file again
// only when it changed (device, inode, size, modification time): the
// publisher asks several times a second, and an agent can make the file
// large.
func (m *Manager) packedRef(view, ref string) (string, error) {
	f, err := nofollow.OpenBeneath(view, "packed-refs")
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("worktree view branch: %w", err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "", err
	}
	key := packedFile{dev: uint64(st.Dev), ino: uint64(st.Ino), size: st.Size, mtime: st.Mtim.Nano(), ref: ref}
	if v, ok := m.packed.Load(view); ok {
		if c := v.(packedFile); c.dev == key.dev && c.ino == key.ino && c.size == key.size && c.mtime == key.mtime && c.ref == ref {
			return c.oid, nil
		}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", nil
	}
	if st.Size > 64<<20 {
		return "", fmt.Errorf("worktree view branch: %s/packed-refs is larger than 64 MiB", view)
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<20))
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(b)) {
		oid, name, ok := strings.Cut(strings.TrimRight(line, "\n"), " ")
		if ok && name == ref && isHexID(oid) {
			key.oid = oid
			break
		}
	}
	m.packed.Store(view, key)
	return key.oid, nil
}

// keepable reports whether a view ref is one ohd keeps when its commit is
// new to the host: branches, tags and the stash, with a name git accepts.
func keepable(name, own string) bool {
	if name == own || !validRefName(name) {
		return false
	}
	return strings.HasPrefix(name, "refs/heads/") || strings.HasPrefix(name, "refs/tags/") || name == "refs/stash"
}

// validRefName is git's check-ref-format, conservatively: what it accepts
// and a little less (no non-ASCII).
func validRefName(name string) bool {
	if len(name) > 1024 || !strings.HasPrefix(name, "refs/") || strings.HasSuffix(name, "/") || strings.HasSuffix(name, ".") ||
		strings.Contains(name, "..") || strings.Contains(name, "@{") || strings.Contains(name, "//") || name == "@" {
		return false
	}
	for _, comp := range strings.Split(name, "/") {
		if comp == "" || strings.HasPrefix(comp, ".") || strings.HasSuffix(comp, ".lock") {
			return false
		}
	}
	for _, c := range []byte(name) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte("~^:?*[\\", c) >= 0 {
			return false
		}
	}
	return true
}
