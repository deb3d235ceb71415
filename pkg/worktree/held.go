package worktree

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ohd-dev/ohd/pkg/worktree/porcelain"
)

// Held gitlinks. A commit of the agent's that adds or changes a gitlink
// (a submodule entry) at a path whose directory in the work tree holds a
// git repository the agent made is a trap once the user merges it: their
// index then has that gitlink, and their next `git status` enters the
// directory as a submodule, setting GIT_DIR for the child, so git's
// ownership check is skipped and the repository's config (an fsmonitor)
// runs as the user. In place that directory is in the user's own folder.
// In place while the conversation runs, any gitlink the agent adds that
// is not one of the user's submodules is held, even over an empty
// directory: the user could merge it in that very folder, and the agent
// could then make the repository its directory lacked (the container's
// mounts fix only the gitlinks the host's index had when it started).
// So such a commit is held back: kept as refs/ohd/held/<id>/<ref without
// refs/> instead of moving the conversation's branch, reported (the
// publish fails with ErrHeld, naming the paths; a removal says so), and
// published by a later publish once no such directory holds a repository
// (the agent removed it, or the removal moved it out). A gitlink of one
// of the user's own submodules (one in the host's index) is the user's:
// its .git is fixed by the container's mounts (package mountplan).

// HeldPrefix is where ohd holds back commits of conversation id that
// would make the user's git enter a repository the agent made:
// refs/ohd/held/<id>/.
func HeldPrefix(id string) string { return "refs/ohd/held/" + id + "/" }

// HeldRef is where ohd holds back the commit of ref (a full name).
func HeldRef(id, ref string) string { return HeldPrefix(id) + strings.TrimPrefix(ref, "refs/") }

// ErrHeld wraps a publish held back because its commit adds a gitlink
// whose directory in the work tree holds a repository the agent made
// (see HeldPrefix): nothing is wrong with the objects, and the publish
// succeeds once the directory holds no repository.
var ErrHeld = errors.New("held back")

// maxGitlinkChanges bounds the gitlinks of one publish's diff that are
// looked at; beyond it the commit is held (the agent's to explain).
const maxGitlinkChanges = 10000

// heldGitlinks returns the paths of the gitlinks that commit tip adds or
// changes relative to base (the host branch's commit; "" for none) that
// are not the user's submodules (gitlinks of the host's index) and whose
// directory in wt's work tree holds a git repository, or cannot be told
// apart from one (a symlink on the way), or, in place with live (the
// conversation runs), is the agent's to fill. It reads objects and the
// host's index only, with hardened git.
func (m *Manager) heldGitlinks(ctx context.Context, ct gitTarget, wt Worktree, base, tip string, live bool) ([]string, error) {
	var out string
	var err error
	if base == "" {
		out, err = m.git(ctx, ct, runOpts{}, "ls-tree", "-r", "-z", "--full-tree", tip)
	} else {
		out, err = m.git(ctx, ct, runOpts{}, "diff-tree", "-r", "-z", "--no-renames", "--diff-filter=AMT", base, tip)
	}
	if err != nil {
		return nil, fmt.Errorf("list the gitlinks of %s: %w", shortOID(tip), err)
	}
	links := porcelain.ChangedGitlinks(out)
	if base == "" {
		links = porcelain.Gitlinks(out)
	}
	if len(links) == 0 {
		return nil, nil
	}
	if len(links) > maxGitlinkChanges {
		return links[:1], nil
	}
	gitDir := wt.CommonDir
	if wt.AdminDir != "" {
		gitDir = wt.AdminDir
	}
	users := map[string]bool{}
	if dirExistsNoFollow(gitDir) {
		subs, err := m.gitlinks(wt.Path, gitDir, wt.UID, wt.GID)
		if err != nil {
			return nil, err
		}
		for _, p := range subs {
			users[p] = true
		}
	}
	var held []string
	for _, p := range links {
		if !cleanRelPath(p) {
			held = append(held, p)
			continue
		}
		if !users[p] && ((live && wt.InPlace) || holdsRepo(wt.Path, p)) {
			held = append(held, p)
		}
	}
	return held, nil
}

// holdsRepo reports whether the directory rel of the work tree top holds
// a .git (of any kind), or may: a component on the way that is a symlink
// counts as one (the user's git could be led elsewhere).
func holdsRepo(top, rel string) bool {
	p := top
	for _, part := range strings.Split(rel, "/") {
		p = filepath.Join(p, part)
		st, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return false
		}
		if err != nil || st.Mode()&fs.ModeSymlink != 0 {
			return true
		}
		if !st.IsDir() {
			return false
		}
	}
	_, err := os.Lstat(filepath.Join(p, ".git"))
	return err == nil || !errors.Is(err, fs.ErrNotExist)
}

// heldMessage says why tip is held as held, for the paths; ended says
// the conversation is ending (no later publish will come).
func heldMessage(wt Worktree, tip, held string, paths []string, ended bool) string {
	shown := paths
	if len(shown) > 5 {
		shown = shown[:5]
	}
	more := ""
	if len(paths) > len(shown) {
		more = fmt.Sprintf(" and %d more", len(paths)-len(shown))
	}
	then := "it is published once that directory holds no repository (remove its .git, or end the conversation)"
	if ended {
		then = fmt.Sprintf("it stays held: the removal moves the agent's git directories out of the tree (the removal result names them), and you take the commit, once you have checked that submodule entry, with git -C %s branch <name> %s", wt.Repo, held)
	}
	what := "holds a git repository the agent made"
	if wt.InPlace && !ended {
		what = "is the agent's to fill with a git repository while the conversation runs"
		then = "it is published when the conversation ends, if that directory then holds no repository"
	}
	return fmt.Sprintf("the conversation's commit %s is held back as %s, not published to %s: it adds or changes the submodule entry %s%s, whose directory in %s %s, which the user's git would enter (running its config) after a merge; %s",
		shortOID(tip), held, wt.Branch, strings.Join(shown, ", "), more, wt.Path, what, then)
}
