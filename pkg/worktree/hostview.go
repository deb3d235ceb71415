package worktree

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ohd-dev/ohd/pkg/worktree/nofollow"
)

// The host's branches, live inside the view (see the package comment,
// "The view is live both ways"). The view is seeded once; afterwards the
// agent sees the host's branches move through a read-only remote "host":
// a small bare repository ohd keeps beside the view,
//
//	<Root>/<id>/.ohd/host/   HEAD, config, packed-refs, objects/info/alternates
//
// mounted read-only in the container at its own path, whose packed-refs
// holds the host's refs/heads/* and refs/tags/* (not refs/ohd/, not other
// conversations' branches) and whose objects are the host's store (the
// same alternate as the view's). The view's config names it:
//
//	[remote "host"]
//		url = <Root>/<id>/.ohd/host
//		fetch = +refs/heads/*:refs/remotes/host/*
//
// so `git fetch host` inside brings refs/remotes/host/* up to date (no
// object is copied: the view already borrows the host's store).
// RefreshHostView rewrites packed-refs when the host's branches moved.

const hostViewName = "host"

// hostViewPath is the host remote's directory of wt.
func hostViewPath(wt Worktree) string { return filepath.Join(filepath.Dir(wt.View), hostViewName) }

// hostRemoteConfig is the view's configuration of the remote "host".
func hostRemoteConfig(wt Worktree) []byte {
	return fmt.Appendf(nil, "[remote \"host\"]\n\turl = %s\n\tfetch = +refs/heads/*:refs/remotes/host/*\n\ttagOpt = --no-tags\n", hostViewPath(wt))
}

// seedHostView creates wt's host remote (see above) with w.
func (m *Manager) seedHostView(wt Worktree, w *ownedWriter, head []byte, refs string) {
	dir := hostViewPath(wt)
	_, alt := viewPaths(wt.Path)
	for _, d := range []string{"", "objects", "objects/info", "objects/pack", "refs", "refs/heads", "refs/tags"} {
		w.mkdir(filepath.Join(dir, d), 0o755)
	}
	w.write(filepath.Join(dir, "HEAD"), head, 0o644)
	w.write(filepath.Join(dir, "config"), []byte("[core]\n\trepositoryformatversion = 0\n\tbare = true\n"), 0o644)
	w.write(filepath.Join(dir, "objects", "info", "alternates"), []byte(alt+"\n"), 0o644)
	if w.err != nil {
		return
	}
	w.write(filepath.Join(dir, "packed-refs"), hostHeadsOf(refs), 0o644)
}

// hostHeads is the host remote's packed-refs: the host's branches (but
// conversations') and tags, sorted.
func (m *Manager) hostHeads(ctx context.Context, wt Worktree) ([]byte, error) {
	out, err := m.git(ctx, commonTarget(wt.CommonDir, wt.UID, wt.GID), runOpts{}, "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/", "refs/tags/")
	if err != nil {
		return nil, fmt.Errorf("list the host's branches: %w", err)
	}
	return hostHeadsOf(out), nil
}

// hostHeadsOf is hostHeads of the output of for-each-ref with the format
// "%(objectname) %(refname)", optionally followed by " %(symref)" (and
// any refs: those but branches and tags are left out).
func hostHeadsOf(out string) []byte {
	var lines []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		oid, name := f[0], f[1]
		if !(strings.HasPrefix(name, "refs/heads/") || strings.HasPrefix(name, "refs/tags/")) ||
			!isHexID(oid) || strings.HasPrefix(name, "refs/heads/openhands/") || !validRefName(name) {
			continue
		}
		lines = append(lines, oid+" "+name+"\n")
	}
	sort.Slice(lines, func(i, j int) bool { return strings.Fields(lines[i])[1] < strings.Fields(lines[j])[1] })
	return []byte("# pack-refs with: sorted \n" + strings.Join(lines, ""))
}

// RefreshHostView brings wt's host remote up to date with the host's
// branches and tags (a no-op for a view made before the remote existed).
// It reports whether anything changed.
func (m *Manager) RefreshHostView(ctx context.Context, wt Worktree) (bool, error) {
	dir := hostViewPath(wt)
	if wt.View == "" {
		return false, nil
	}
	if st, err := os.Lstat(dir); err != nil || !st.IsDir() {
		return false, nil
	}
	packed, err := m.hostHeads(ctx, wt)
	if err != nil {
		return false, fmt.Errorf("worktree refresh host view: %w", err)
	}
	file := filepath.Join(dir, "packed-refs")
	if old, err := nofollow.ReadFile(file, 64<<20); err == nil && bytes.Equal(old, packed) {
		return false, nil
	}
	tmp := file + ".ohd-new"
	_ = os.Remove(tmp)
	w := ownedWriter{m: m, uid: wt.UID, gid: wt.GID}
	w.write(tmp, packed, 0o644)
	if w.err != nil {
		return false, fmt.Errorf("worktree refresh host view: %w", w.err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return false, fmt.Errorf("worktree refresh host view: %w", err)
	}
	return true, nil
}
