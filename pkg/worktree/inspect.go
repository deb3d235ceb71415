package worktree

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ohd-dev/ohd/pkg/gitboundary"
)

// Repo describes a workspace directory as git sees it.
type Repo struct {
	// Workspace is the canonical path given (symlinks resolved).
	Workspace string
	// IsGit is false when Workspace is not inside a git work tree (not an
	// error: the conversation then runs without a worktree).
	IsGit bool
	// TopLevel is the canonical top-level of the work tree holding
	// Workspace.
	TopLevel string
	// CommonDir is the canonical git common dir (<TopLevel>/.git, or
	// elsewhere for linked worktrees and separate git dirs).
	CommonDir string
	// GitDir is the canonical git dir of Workspace's own work tree: equal
	// to CommonDir for a main work tree, <CommonDir>/worktrees/<x> when the
	// workspace is itself a linked worktree. Its HEAD is the "HEAD" start
	// point.
	GitDir string
	// Prefix is Workspace relative to TopLevel, "" at the top; the same
	// relative path inside the new worktree is the conversation's working
	// directory.
	Prefix string
	// UID and GID own the git common dir: host-side git and the container
	// run as them.
	UID, GID int
}

// Inspect validates path (absolute, existing, a directory) and reports
// whether and how it is inside a git work tree. It changes nothing. A
// directory outside any repository returns Repo{IsGit: false} and nil.
func (m *Manager) Inspect(ctx context.Context, path string) (Repo, error) {
	ws, err := checkWorkspace(path)
	if err != nil {
		return Repo{}, err
	}
	repo := Repo{Workspace: ws}

	// Discovery runs as the workspace directory's owner (ohd may be root),
	// with safe.directory=* because the owner of the git dir is what we
	// are about to learn; rev-parse runs no programs.
	// A directory lent to a live conversation's agent (gitboundary.Borrow)
	// is its user's.
	uid, gid, err := gitboundary.OwnerOf(ws)
	if err != nil {
		return Repo{}, fmt.Errorf("inspect %s: %w", ws, err)
	}
	if m.euid != 0 {
		uid, gid = m.euid, os.Getegid()
	}
	t := gitTarget{Dir: ws, UID: uid, GID: gid, Discover: true}
	// A work tree, the usual case, is told and described in one git run;
	// anything else (no repository, a git dir, a bare repository, an
	// answer not understood) is looked at again step by step below, which
	// says what it is.
	out, err := m.git(ctx, t, runOpts{}, "rev-parse", "--is-inside-git-dir", "--is-inside-work-tree", "--is-bare-repository",
		"--path-format=absolute", "--show-toplevel", "--absolute-git-dir", "--git-common-dir", "--show-prefix")
	if f := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); err == nil && len(f) == 7 && f[0] == "false" && f[1] == "true" && f[2] == "false" {
		return m.inspected(repo, ws, f[3:])
	}
	if ge := (*GitError)(nil); errors.As(err, &ge) && strings.Contains(ge.Stderr, "not a git repository") {
		return repo, nil
	}
	out, err = m.git(ctx, t, runOpts{}, "rev-parse", "--is-inside-git-dir", "--is-inside-work-tree", "--is-bare-repository")
	if err != nil {
		var ge *GitError
		if errors.As(err, &ge) && strings.Contains(ge.Stderr, "not a git repository") {
			return repo, nil
		}
		return Repo{}, fmt.Errorf("inspect %s: %w", ws, err)
	}
	f := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(f) != 3 {
		return Repo{}, fmt.Errorf("inspect %s: unexpected git rev-parse output %q", ws, truncate(out, 200))
	}
	if f[0] == "true" || f[2] == "true" {
		return Repo{}, fmt.Errorf("inspect %s: %w: it is a git directory or a bare repository, not a work tree: pass the directory that holds the checked-out files", ws, ErrInvalidPath)
	}
	if f[1] != "true" {
		return Repo{}, fmt.Errorf("inspect %s: %w: not inside a git work tree: pass the directory that holds the checked-out files", ws, ErrInvalidPath)
	}

	out, err = m.git(ctx, t, runOpts{}, "rev-parse", "--path-format=absolute", "--show-toplevel", "--absolute-git-dir", "--git-common-dir", "--show-prefix")
	if err != nil {
		return Repo{}, fmt.Errorf("inspect %s: %w", ws, err)
	}
	return m.inspected(repo, ws, strings.Split(strings.TrimSuffix(out, "\n"), "\n"))
}

// inspected fills repo, the work tree at ws, from f: what rev-parse
// --path-format=absolute --show-toplevel --absolute-git-dir
// --git-common-dir --show-prefix said there, a line each.
func (m *Manager) inspected(repo Repo, ws string, f []string) (Repo, error) {
	if len(f) != 4 {
		return Repo{}, fmt.Errorf("inspect %s: unexpected git rev-parse output %q (a path with a newline?)", ws, truncate(strings.Join(f, "\n"), 200))
	}
	var err error
	for i, p := range f[:3] {
		if !filepath.IsAbs(p) {
			return Repo{}, fmt.Errorf("inspect %s: git reported a relative path %q", ws, p)
		}
		if f[i], err = filepath.EvalSymlinks(p); err != nil {
			return Repo{}, fmt.Errorf("inspect %s: resolve %s: %w", ws, p, err)
		}
	}
	repo.IsGit = true
	repo.TopLevel, repo.GitDir, repo.CommonDir = f[0], f[1], f[2]
	repo.Prefix = strings.TrimSuffix(f[3], "/")
	if repo.UID, repo.GID, err = owner(repo.CommonDir); err != nil {
		return Repo{}, fmt.Errorf("inspect %s: %w", ws, err)
	}
	return repo, nil
}

// checkWorkspace validates a workspace path and returns it canonical.
func checkWorkspace(path string) (string, error) {
	switch {
	case path == "":
		return "", fmt.Errorf("inspect: %w: empty path: pass the repository's absolute path", ErrInvalidPath)
	case strings.ContainsAny(path, "\x00\n\r"):
		return "", fmt.Errorf("inspect %q: %w: the path contains a control character", path, ErrInvalidPath)
	case !filepath.IsAbs(path):
		return "", fmt.Errorf("inspect %s: %w: the path is relative: pass an absolute path", path, ErrInvalidPath)
	}
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("inspect %s: %w: %w: check the path", path, ErrInvalidPath, fs.ErrNotExist)
	}
	if err != nil {
		return "", fmt.Errorf("inspect %s: %w: %w", path, ErrInvalidPath, err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("inspect %s: %w: not a directory: pass the repository's directory, not a file in it", path, ErrInvalidPath)
	}
	ws, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", fmt.Errorf("inspect %s: %w: %w", path, ErrInvalidPath, err)
	}
	if strings.ContainsAny(ws, "\n\r") {
		return "", fmt.Errorf("inspect %q: %w: the resolved path contains a control character", ws, ErrInvalidPath)
	}
	return ws, nil
}
