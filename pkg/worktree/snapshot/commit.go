package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ohd-dev/ohd/pkg/hardgit"
	"github.com/ohd-dev/ohd/pkg/worktree/porcelain"
)

// Commit builds the snapshot commit (objects only, no ref) and
// returns its id, or "" when there is nothing uncommitted. In the sandbox
// (inSandbox: it reads the nested repositories' files), an untracked
// nested repository is saved as its files rather than as the gitlink git
// would make of it (nested lists those saved so), and the one walk of the
// worktree also lists its ignored files (ignored; nil outside).
func (b *Builder) Commit(ctx context.Context, wt Tree, inSandbox bool) (commit string, nested, ignored []string, err error) {
	t := hardgit.Target{Dir: wt.Path, GitDir: wt.GitDir, WorkTree: wt.Path, UID: wt.UID, GID: wt.GID}
	// One filter enumeration serves every command below: the agent is
	// stopped, nothing changes the configuration meanwhile.
	memo := &hardgit.FilterMemo{}
	// The common case, a clean worktree, costs one status: nothing staged,
	// modified or untracked means nothing to save. GIT_OPTIONAL_LOCKS=0
	// keeps status from refreshing (writing) the worktree's index.
	args := []string{"status", "--porcelain=v1", "-z", "--untracked-files=all", "--ignore-submodules=all", "--no-renames"}
	if inSandbox {
		// With -uall, every ignored file is listed too, one by one: the
		// count the removal reports costs no second walk.
		args = append(args, "--ignored")
	}
	out, err := b.git(ctx, t, hardgit.Opts{Filters: memo}, args...)
	if err != nil {
		return "", nil, nil, fmt.Errorf("status of the worktree: %w", err)
	}
	clean, ignored := porcelain.SplitIgnored(out)
	if clean == "" {
		return "", nil, ignored, nil
	}
	head, hasHead, err := b.revParse(ctx, t, "HEAD^{commit}")
	if err != nil {
		return "", nil, nil, fmt.Errorf("read HEAD: %w", err)
	}
	var headTree string
	if hasHead {
		headTree, _, err = b.revParse(ctx, t, head+"^{tree}")
	} else {
		headTree, err = b.emptyTree(ctx, t)
	}
	if err != nil {
		return "", nil, nil, fmt.Errorf("read HEAD's tree: %w", err)
	}

	tmp, err := os.MkdirTemp("", "ohd-snapshot-")
	if err != nil {
		return "", nil, nil, fmt.Errorf("temporary index: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := b.chown(tmp, wt.UID, wt.GID); err != nil {
		return "", nil, nil, err
	}
	index := filepath.Join(tmp, "index")
	if err := b.copyIndex(filepath.Join(wt.GitDir, "index"), index, wt.UID, wt.GID); err != nil {
		return "", nil, nil, err
	}
	o := hardgit.Opts{Env: []string{"GIT_INDEX_FILE=" + index}, Filters: memo}

	// The index as the agent left it (fails when it has conflicts; then
	// there is no separate index state to keep).
	indexTree, err := b.git(ctx, t, o, "write-tree")
	indexTree = strings.TrimSpace(indexTree)
	if err != nil {
		var ge *hardgit.GitError
		if !errors.As(err, &ge) || ge.ExitCode < 0 {
			return "", nil, nil, fmt.Errorf("write the index tree: %w", err)
		}
		indexTree = ""
	}
	empty, err := b.addAll(ctx, t, o)
	if err != nil {
		return "", nil, nil, err
	}
	if !inSandbox && len(empty) > 0 {
		// Outside the sandbox nested repositories are not read: the
		// snapshot could not hold these, and removing would lose them.
		return "", nil, nil, fmt.Errorf("%w: %s is a nested git repository without a commit, which the snapshot cannot save: commit in it or copy it elsewhere, then try again (or remove with --discard to drop it)",
			ErrUnsavedWork, filepath.Join(wt.Path, empty[0]))
	}
	if inSandbox {
		budget := MaxNested
		if nested, err = b.addNestedRepos(ctx, wt, t, o, memo, tmp, porcelain.UntrackedDirs(clean), 0, &budget); err != nil {
			return "", nil, nil, err
		}
	}
	out, err = b.git(ctx, t, o, "write-tree")
	if err != nil {
		return "", nil, nil, fmt.Errorf("write the working tree: %w", err)
	}
	workTree := strings.TrimSpace(out)
	if workTree == headTree && (indexTree == "" || indexTree == headTree) {
		return "", nil, ignored, nil
	}

	var parents []string
	if hasHead {
		parents = append(parents, "-p", head)
	}
	when := time.Now().UTC().Format(time.RFC3339)
	// The index is a second parent whenever something is staged, even
	// when it equals the working tree: restore recreates the staged state
	// from it (without it, everything staged would come back unstaged).
	if indexTree != "" && indexTree != headTree {
		msg := fmt.Sprintf("ohd: index of conversation %s at %s", wt.ID, when)
		args := append(append([]string{"commit-tree", "--no-gpg-sign"}, parents...), "-m", msg, indexTree)
		out, err := b.git(ctx, t, hardgit.Opts{}, args...)
		if err != nil {
			return "", nil, nil, fmt.Errorf("commit the index state: %w", err)
		}
		parents = append(parents, "-p", strings.TrimSpace(out))
	}
	msg := fmt.Sprintf("ohd: snapshot of conversation %s at %s\n\n"+
		"Uncommitted changes (modified, staged and untracked files) of\n%s\n"+
		"when the conversation ended. A second parent, if any, is the index.\n",
		wt.ID, when, wt.Path)
	args = append(append([]string{"commit-tree", "--no-gpg-sign"}, parents...), "-m", msg, workTree)
	out, err = b.git(ctx, t, hardgit.Opts{}, args...)
	if err != nil {
		return "", nil, nil, fmt.Errorf("commit the snapshot: %w", err)
	}
	commit = strings.TrimSpace(out)
	if !hardgit.IsObjectID(commit) {
		return "", nil, nil, fmt.Errorf("git commit-tree: unexpected output %q", truncate(out, 100))
	}
	return commit, nested, ignored, nil
}

// emptyTree returns the id of the empty tree in this repository's hash
// (without writing it).
func (b *Builder) emptyTree(ctx context.Context, t hardgit.Target) (string, error) {
	out, err := b.git(ctx, t, hardgit.Opts{Stdin: []byte{}}, "hash-object", "-t", "tree", "--stdin")
	if err != nil {
		return "", fmt.Errorf("hash the empty tree: %w", err)
	}
	return strings.TrimSpace(out), nil
}

// copyIndex copies the worktree's index to dst (owned by uid:gid). The
// source is opened without following a symlink (the admin dir is
// agent-writable and ohd may be root); a missing index copies nothing
// (git then starts from an empty index).
func (b *Builder) copyIndex(src, dst string, uid, gid int) error {
	in, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open the worktree's index: %w", err)
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("the worktree's index %s is not a regular file", src)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("temporary index: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy the worktree's index: %w", err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("copy the worktree's index: %w", err)
	}
	if err := KeepIndexTime(dst, st); err != nil {
		return fmt.Errorf("copy the worktree's index: %w", err)
	}
	return b.chown(dst, uid, gid)
}

// KeepIndexTime gives a copy of an index the modification time of the
// index it copies (st). Git trusts an entry whose file's size and times
// match it unless the entry is no older than the index file itself (it is
// "racily clean", and git compares contents): a copy with a new time
// would make a file changed in the second of the index's last write, at
// the same size, look unchanged, and its change would be lost.
func KeepIndexTime(dst string, st fs.FileInfo) error {
	return os.Chtimes(dst, time.Time{}, st.ModTime())
}
