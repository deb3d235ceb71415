package snapshot

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ohd-dev/ohd/pkg/hardgit"
)

// ErrUnsavedWork is returned when a work tree holds work a snapshot cannot
// save (outside the sandbox, a nested repository without a commit).
// Package worktree returns it as worktree.ErrUnsavedWork.
var ErrUnsavedWork = errors.New("worktree has work that cannot be saved")

// Builder builds snapshot commits of work trees.
type Builder struct {
	// Git runs every git command of a snapshot (required).
	Git hardgit.Runner
	// Chown, if set, gives the temporary index (and the files beside it)
	// to the work tree's owner (ohd runs as root); nil changes no owner.
	Chown func(path string, uid, gid int) error
}

// Tree is the work tree a snapshot reads.
type Tree struct {
	// ID is the conversation's id, named in the commit messages.
	ID string
	// Path is the work tree; GitDir is its own git dir (a linked
	// worktree's admin dir), whose index and HEAD the snapshot starts
	// from. The .git file in Path is never followed.
	Path, GitDir string
	// UID and GID own the work tree: git runs as them.
	UID, GID int
}

func (b *Builder) git(ctx context.Context, t hardgit.Target, o hardgit.Opts, args ...string) (string, error) {
	return b.Git.Run(ctx, t, o, args...)
}

func (b *Builder) chown(path string, uid, gid int) error {
	if b.Chown == nil {
		return nil
	}
	return b.Chown(path, uid, gid)
}

// revParse resolves rev to an object id; ok is false when it does not
// exist (exit status 1 of rev-parse --verify --quiet).
func (b *Builder) revParse(ctx context.Context, t hardgit.Target, rev string) (oid string, ok bool, err error) {
	out, err := b.git(ctx, t, hardgit.Opts{}, "rev-parse", "--verify", "--quiet", "--end-of-options", rev)
	if err != nil {
		var ge *hardgit.GitError
		if errors.As(err, &ge) && ge.ExitCode == 1 {
			return "", false, nil
		}
		return "", false, err
	}
	oid = strings.TrimSpace(out)
	if !hardgit.IsObjectID(oid) {
		return "", false, fmt.Errorf("git rev-parse %s: unexpected output %q", rev, truncate(out, 100))
	}
	return oid, true, nil
}

// truncate shortens s, quoted in an error message, to n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
