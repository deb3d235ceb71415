package snapshot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ohd-dev/ohd/pkg/hardgit"
	"github.com/ohd-dev/ohd/pkg/worktree/porcelain"
)

// A nested repository is a directory of the worktree with a .git of its
// own (a clone the agent made, or `git init sub` by a project generator).
// git itself saves one only as a gitlink to its commit (none without a
// commit), so its files and uncommitted work would be lost with the
// worktree. Inside the sandbox the snapshot saves an untracked nested
// repository as its files instead: built in an index of its own with the
// nested directory as the work tree (its own .gitignore applies, and its
// .git is never read as content), read into the snapshot's index under its
// path in place of the gitlink. Its own history (commits, branches, stash
// of its .git) is not kept. A nested repository already in the
// conversation's index or HEAD (a submodule) stays a gitlink, as git has it.

// maxNestedDepth bounds how deep nested repositories inside nested
// repositories are saved as files, and MaxNested how many are (each costs
// a few git runs in the sandbox); the others stay as git has them.
const (
	maxNestedDepth = 4
	MaxNested      = 100
)

// addAll is `git add --all` into o's index. It returns the nested
// repositories without a commit (`git init sub`): git cannot make a gitlink
// of one and then adds nothing at all, so the rest is added again without
// them (they are for addNestedRepos, or refused outside the sandbox). Any
// other error is an error.
func (b *Builder) addAll(ctx context.Context, t hardgit.Target, o hardgit.Opts) ([]string, error) {
	_, err := b.git(ctx, t, o, "add", "--all")
	if err == nil {
		return nil, nil
	}
	var ge *hardgit.GitError
	if !errors.As(err, &ge) || !strings.Contains(ge.Stderr, "does not have a commit checked out") {
		return nil, fmt.Errorf("add the working tree to a temporary index: %w", err)
	}
	// The nested repositories are the directories status lists; each is
	// tried alone to tell those without a commit.
	status, err := b.git(ctx, t, o, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--ignore-submodules=all", "--no-renames")
	if err != nil {
		return nil, fmt.Errorf("status of the working tree: %w", err)
	}
	var empty []string
	for _, dir := range porcelain.UntrackedDirs(status) {
		if !isNestedRepo(filepath.Join(t.WorkTree, dir)) {
			continue
		}
		_, err := b.git(ctx, t, o, "add", "--all", "--", ":(literal)"+dir)
		if err == nil {
			continue
		}
		if !errors.As(err, &ge) || !strings.Contains(ge.Stderr, "does not have a commit checked out") {
			return nil, fmt.Errorf("add %s to a temporary index: %w", dir, err)
		}
		empty = append(empty, dir)
	}
	// Through stdin: there can be many (argv has a limit).
	var spec strings.Builder
	spec.WriteString(".\x00")
	for _, dir := range empty {
		spec.WriteString(":(exclude,literal)" + dir + "\x00")
	}
	o.Stdin = []byte(spec.String())
	if _, err := b.git(ctx, t, o, "add", "--all", "--pathspec-from-file=-", "--pathspec-file-nul"); err != nil {
		return nil, fmt.Errorf("add the working tree to a temporary index: %w", err)
	}
	return empty, nil
}

// isNestedRepo reports whether dir is a real directory (not a symlink)
// holding a .git of its own.
func isNestedRepo(dir string) bool {
	st, err := os.Lstat(dir)
	if err != nil || !st.IsDir() {
		return false
	}
	_, err = os.Lstat(filepath.Join(dir, ".git"))
	return err == nil
}

// addNestedRepos replaces, in o's index, each candidate (a path relative
// to t's work tree) that is a nested repository by the tree of its files.
// It returns the paths saved so, relative to the conversation's worktree.
func (b *Builder) addNestedRepos(ctx context.Context, wt Tree, t hardgit.Target, o hardgit.Opts, memo *hardgit.FilterMemo, tmp string, candidates []string, depth int, budget *int) ([]string, error) {
	if depth >= maxNestedDepth {
		return nil, nil
	}
	var saved []string
	for _, rel := range candidates {
		dir := filepath.Join(t.WorkTree, rel)
		if *budget <= 0 || !isNestedRepo(dir) {
			continue
		}
		*budget--
		tree, inner, err := b.nestedTree(ctx, wt, dir, memo, tmp, depth+1, budget)
		if err != nil {
			return nil, fmt.Errorf("save nested repository %s: %w", rel, err)
		}
		// add --all staged it as a gitlink (or, without a commit, not
		// at all): its files go in its place.
		if _, err := b.git(ctx, t, o, "update-index", "--force-remove", "--", rel); err != nil {
			return nil, fmt.Errorf("save nested repository %s: %w", rel, err)
		}
		if _, err := b.git(ctx, t, o, "read-tree", "--prefix="+rel+"/", tree); err != nil {
			return nil, fmt.Errorf("save nested repository %s: %w", rel, err)
		}
		full, err := filepath.Rel(wt.Path, dir)
		if err != nil {
			return nil, err
		}
		saved = append(saved, filepath.ToSlash(full))
		saved = append(saved, inner...)
	}
	return saved, nil
}

// nestedTree writes the tree of nested repository dir's files (objects
// into the conversation's view) and returns it, with the nested
// repositories inside it that were saved as files too.
func (b *Builder) nestedTree(ctx context.Context, wt Tree, dir string, memo *hardgit.FilterMemo, tmp string, depth int, budget *int) (string, []string, error) {
	idxDir, err := os.MkdirTemp(tmp, "nested-")
	if err != nil {
		return "", nil, fmt.Errorf("temporary index: %w", err)
	}
	if err := b.chown(idxDir, wt.UID, wt.GID); err != nil {
		return "", nil, err
	}
	nt := hardgit.Target{Dir: dir, GitDir: wt.GitDir, WorkTree: dir, UID: wt.UID, GID: wt.GID}
	no := hardgit.Opts{Env: []string{"GIT_INDEX_FILE=" + filepath.Join(idxDir, "index")}, Filters: memo}
	if _, err := b.addAll(ctx, nt, no); err != nil { // those without a commit are listed below
		return "", nil, err
	}
	// Nested repositories inside: those with a commit are gitlinks in the
	// new index, those without are still untracked.
	staged, err := b.git(ctx, nt, no, "ls-files", "-z", "--stage")
	if err != nil {
		return "", nil, err
	}
	cands := porcelain.Gitlinks(staged)
	others, err := b.git(ctx, nt, no, "ls-files", "-z", "--others", "--exclude-standard", "--directory")
	if err != nil {
		return "", nil, err
	}
	for _, e := range strings.Split(others, "\x00") {
		if p, ok := strings.CutSuffix(e, "/"); ok && p != "" {
			cands = append(cands, p)
		}
	}
	inner, err := b.addNestedRepos(ctx, wt, nt, no, memo, tmp, cands, depth, budget)
	if err != nil {
		return "", nil, err
	}
	out, err := b.git(ctx, nt, no, "write-tree")
	if err != nil {
		return "", nil, err
	}
	tree := strings.TrimSpace(out)
	if !hardgit.IsObjectID(tree) {
		return "", nil, fmt.Errorf("git write-tree: unexpected output %q", truncate(out, 100))
	}
	return tree, inner, nil
}
