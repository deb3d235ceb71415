package worktree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/ohd-dev/ohd/pkg/worktree/admindir"
	"github.com/ohd-dev/ohd/pkg/worktree/nofollow"
	"github.com/ohd-dev/ohd/pkg/worktree/snapshot"
)

// The conversation's private git view (see the package comment, "The git
// view"). On the host it lives beside the worktree, in a directory the
// container never sees:
//
//	<Root>/<id>/<basename>        the worktree (mounted at its own path)
//	<Root>/<id>/.ohd/             not mounted
//	<Root>/<id>/.ohd/git/         the view (mounted at the common dir's path)
//	<Root>/<id>/.ohd/objects      symlink to <CommonDir>/objects on the host;
//	                              the real object store is mounted read-only
//	                              at this path in the container, so the
//	                              view's alternates name one path valid on
//	                              both sides
const (
	viewParent  = ".ohd"
	viewName    = "git"
	viewObjects = "objects"
)

// ViewPaths returns the view directory and the alternate object store path
// of conversation id's worktree at path.
func viewPaths(path string) (view, alternate string) {
	d := filepath.Join(filepath.Dir(path), viewParent)
	return filepath.Join(d, viewName), filepath.Join(d, viewObjects)
}

// seedView creates wt's git view from the host repository: its own config
// (a copy, plus the branch's upstream), HEAD, packed-refs (every ref but
// ohd's own and other conversations' branches), info/ and shallow, an empty
// logs/ and object store whose alternates name the real one, and its own
// admin dir for the worktree (HEAD, commondir, gitdir, locked, and the
// host's index, config.worktree and info/). It costs O(refs): no object
// is copied. The view must not exist yet; on failure it is removed again.
//
// Everything read here is the host repository's (never the agent's): the
// common dir's config, HEAD, info/ and shallow, and the host admin dir's
// index, each opened without following a symlink.
func (m *Manager) seedView(ctx context.Context, wt Worktree) error {
	return m.seedViewWith(ctx, wt, true)
}

// seedViewWith is seedView, without the index unless index: Add seeds the
// view while git checks the worktree out, which writes the host's index,
// and copies it after (seedViewIndex).
func (m *Manager) seedViewWith(ctx context.Context, wt Worktree, index bool) (err error) {
	if wt.View == "" {
		return fmt.Errorf("seed view: %w: no view path", ErrInvalidWorktree)
	}
	parent := filepath.Dir(wt.View)
	alt := filepath.Join(parent, viewObjects)
	if ok, lerr := lexists(parent); lerr != nil || ok {
		if lerr == nil {
			lerr = fmt.Errorf("%w: %s exists", ErrExists, parent)
		}
		return fmt.Errorf("seed view: %w", lerr)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(parent)
		}
	}()
	w := ownedWriter{m: m, uid: wt.UID, gid: wt.GID}
	w.mkdir(parent, 0o700)
	w.symlink(filepath.Join(wt.CommonDir, "objects"), alt)
	v := wt.View
	dirs := []string{"", "objects", "objects/info", "objects/pack", "refs", "refs/heads", "refs/tags", "logs", "info", "hooks", "worktrees"}
	if wt.AdminID != "" {
		dirs = append(dirs, filepath.Join("worktrees", wt.AdminID))
	}
	if wt.InPlace && dirExistsNoFollow(wt.modulesDir()) {
		// Where the submodules' git dirs are mounted (inPlaceMounts).
		rel, _ := filepath.Rel(wt.CommonDir, wt.modulesDir())
		dirs = append(dirs, rel)
	}
	for _, d := range dirs {
		w.mkdir(filepath.Join(v, d), 0o755)
	}
	w.write(filepath.Join(v, "objects", "info", "alternates"), []byte(alt+"\n"), 0o644)

	config, cerr := nofollow.ReadFile(filepath.Join(wt.CommonDir, "config"), 1<<20)
	if cerr != nil {
		return fmt.Errorf("seed view: %w", cerr)
	}
	var upstream []byte
	if !wt.InPlace { // in place, the branch's upstream is in the copied config already
		var uerr error
		if upstream, uerr = m.upstreamConfig(ctx, wt); uerr != nil {
			return fmt.Errorf("seed view: %w", uerr)
		}
	}
	w.write(filepath.Join(v, "config"), append(append(withNewline(config), upstream...), hostRemoteConfig(wt)...), 0o644)
	head, herr := nofollow.ReadFile(filepath.Join(wt.CommonDir, "HEAD"), 4096)
	if herr != nil {
		return fmt.Errorf("seed view: %w", herr)
	}
	if wt.AdminID == "" {
		// In place in a main work tree, the view's own HEAD is the
		// folder's: on the view's branch.
		head = []byte("ref: refs/heads/" + wt.viewBranch() + "\n")
	}
	w.write(filepath.Join(v, "HEAD"), head, 0o644)
	// The host's refs, listed once for the host remote and the view.
	refs, rerr := m.git(ctx, commonTarget(wt.CommonDir, wt.UID, wt.GID), runOpts{}, "for-each-ref", "--format=%(objectname) %(refname) %(symref)")
	if rerr != nil {
		return fmt.Errorf("seed view: list the repository's refs: %w", rerr)
	}
	m.seedHostView(wt, &w, head, refs)
	if b, err := nofollow.ReadFile(filepath.Join(wt.CommonDir, "shallow"), 64<<20); err == nil {
		w.write(filepath.Join(v, "shallow"), b, 0o644)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("seed view: %w", err)
	}
	copyInfo(&w, filepath.Join(wt.CommonDir, "info"), filepath.Join(v, "info"))

	packed, loose := seedRefs(wt, refs)
	w.write(filepath.Join(v, "packed-refs"), packed, 0o644)
	w.write(filepath.Join(parent, seedRefsFile), packed, 0o644) // host-only: what the agent did not make
	for name, target := range loose {
		w.mkdirAll(filepath.Dir(filepath.Join(v, name)), v)
		w.write(filepath.Join(v, name), []byte("ref: "+target+"\n"), 0o644)
	}

	// The work tree's own git dir in the view: its admin dir, or (in
	// place in a main work tree) the view itself. Its index is seeded
	// from the host's, which the agent never writes.
	admin, hostIndex := v, filepath.Join(wt.CommonDir, "index")
	if wt.AdminID != "" {
		admin, hostIndex = filepath.Join(v, "worktrees", wt.AdminID), filepath.Join(wt.AdminDir, "index")
		w.write(filepath.Join(admin, "HEAD"), []byte("ref: refs/heads/"+wt.viewBranch()+"\n"), 0o644)
		w.write(filepath.Join(admin, "commondir"), []byte("../..\n"), 0o644)
		w.write(filepath.Join(admin, "gitdir"), []byte(filepath.Join(wt.Path, ".git")+"\n"), 0o644)
		w.write(filepath.Join(admin, "locked"), []byte(LockReason(wt.ConversationID)), 0o644)
	}
	// The work tree's own config (extensions.worktreeConfig: a sparse
	// checkout's settings, say) and, in a linked work tree, its own info/
	// (its sparse-checkout patterns) are the host's too.
	if fi, err := os.Lstat(filepath.Join(wt.AdminDir, "info")); wt.AdminID != "" && err == nil && fi.IsDir() {
		w.mkdir(filepath.Join(admin, "info"), 0o755)
		copyInfo(&w, filepath.Join(wt.AdminDir, "info"), filepath.Join(admin, "info"))
	}
	if b, err := nofollow.ReadFile(filepath.Join(filepath.Dir(hostIndex), "config.worktree"), 1<<20); err == nil {
		w.write(filepath.Join(admin, "config.worktree"), b, 0o644)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("seed view: %w", err)
	}
	if index {
		if err := copyIndexFiles(&w, filepath.Dir(hostIndex), admin); err != nil {
			return fmt.Errorf("seed view: %w", err)
		}
	}
	if w.err != nil {
		return fmt.Errorf("seed view %s: %w", v, w.err)
	}
	return nil
}

// seedViewIndex copies the host's index of wt's worktree (a linked one,
// not in place) into its view, which seedViewWith made without it.
func (m *Manager) seedViewIndex(wt Worktree) error {
	w := ownedWriter{m: m, uid: wt.UID, gid: wt.GID}
	if err := copyIndexFiles(&w, wt.AdminDir, filepath.Join(wt.View, "worktrees", wt.AdminID)); err != nil {
		return fmt.Errorf("seed view: %w", err)
	}
	if w.err != nil {
		return fmt.Errorf("seed view %s: %w", wt.View, w.err)
	}
	return nil
}

// copyIndexFiles copies the host git dir src's index into the view's git
// dir dst, with its split index's shared index files (core.splitIndex:
// sharedindex.<id>, which the index names and git reads from the git
// dir), each with its modification time (snapshot.KeepIndexTime). A missing index
// copies nothing.
func copyIndexFiles(w *ownedWriter, src, dst string) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		name := e.Name()
		if name != "index" && !(strings.HasPrefix(name, "sharedindex.") && isHexID(strings.TrimPrefix(name, "sharedindex."))) {
			continue
		}
		b, st, err := nofollow.ReadFileInfo(filepath.Join(src, name), 1<<30)
		if errors.Is(err, fs.ErrNotExist) {
			continue // gone meanwhile, or not a regular file
		}
		if err != nil {
			return err
		}
		w.write(filepath.Join(dst, name), b, 0o644)
		if w.err == nil {
			w.err = snapshot.KeepIndexTime(filepath.Join(dst, name), st)
		}
	}
	return nil
}

// copyInfo copies the regular files of the host's info directory src (a
// directory or symlink in it is not git's) into dst.
func copyInfo(w *ownedWriter, src, dst string) {
	if fi, err := os.Lstat(src); err != nil || !fi.IsDir() {
		return
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		if b, err := nofollow.ReadFile(filepath.Join(src, e.Name()), 16<<20); err == nil {
			w.write(filepath.Join(dst, e.Name()), b, 0o644)
		}
	}
}

// SeedView gives an existing worktree (one that shares the repository's
// git dir: created before views existed) its own git view, seeded from the
// host repository as Add seeds a new one; the agent's commits are already
// on the host, since it wrote them there. Call it with the container
// stopped, before the container is created again with MountPlan's view
// layout. It returns wt with View set.
func (m *Manager) SeedView(ctx context.Context, wt Worktree) (Worktree, error) {
	if err := m.checkWorktree(wt); err != nil {
		return wt, fmt.Errorf("worktree seed view: %w", err)
	}
	if wt.View != "" {
		return wt, nil
	}
	if !admindir.Owns(wt.AdminDir, wt.Path, LockReason(wt.ConversationID)) {
		return wt, fmt.Errorf("worktree seed view %s: %w: %s is not this worktree's registration", wt.Path, ErrInvalidWorktree, wt.AdminDir)
	}
	wt.View, _ = viewPaths(wt.Path)
	if err := m.seedView(ctx, wt); err != nil {
		return Worktree{}, fmt.Errorf("worktree seed view %s: %w", wt.Path, err)
	}
	m.log.Info("worktree moved to its own git view", "conversation", wt.ConversationID, "view", wt.View)
	return wt, nil
}

// seedRefs is the view's refs of out, the host repository's refs as
// `for-each-ref --format="%(objectname) %(refname) %(symref)"` lists
// them: packed-refs content for plain refs, and symbolic refs
// (origin/HEAD) by target. ohd's
// own refs (refs/ohd/) and other conversations' branches are left out:
// they are nobody's business inside this conversation.
func seedRefs(wt Worktree, out string) (packed []byte, symbolic map[string]string) {
	own := "refs/heads/" + wt.Branch
	type ref struct{ oid, name string }
	var refs []ref
	symbolic = map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !isHexID(f[0]) || !strings.HasPrefix(f[1], "refs/") {
			continue
		}
		name := f[1]
		if strings.HasPrefix(name, "refs/ohd/") || (strings.HasPrefix(name, "refs/heads/openhands/") && name != own) {
			continue
		}
		if len(f) == 3 && strings.HasPrefix(f[2], "refs/") {
			symbolic[name] = f[2]
			continue
		}
		refs = append(refs, ref{f[0], name})
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].name < refs[j].name })
	var b bytes.Buffer
	b.WriteString("# pack-refs with: sorted \n")
	for _, r := range refs {
		b.WriteString(r.oid + " " + r.name + "\n")
	}
	return b.Bytes(), symbolic
}

// upstreamConfig is the view's configuration of the branch's upstream: the
// remote branch the start point names (refs/remotes/origin/HEAD → its
// target), as `git worktree add --track` would have written into the
// shared config. It goes into the view's config only, so `git status -sb`
// inside shows "## openhands/<id>...origin/main" and the host's config is
// never written.
func (m *Manager) upstreamConfig(ctx context.Context, wt Worktree) ([]byte, error) {
	if wt.StartPoint == "" || wt.StartPoint == "HEAD" {
		return nil, nil
	}
	ct := commonTarget(wt.CommonDir, wt.UID, wt.GID)
	if strings.HasPrefix(wt.StartPoint, "-") {
		return nil, nil
	}
	// No --end-of-options: rev-parse 2.39 echoes it in this mode. The start
	// point was checked not to look like an option.
	out, err := m.git(ctx, ct, runOpts{}, "rev-parse", "--symbolic-full-name", wt.StartPoint)
	if err != nil {
		return nil, nil // a commit id or tag: nothing to track
	}
	full := strings.TrimSpace(out)
	if full == "refs/remotes/origin/HEAD" {
		if b, err := m.git(ctx, ct, runOpts{}, "symbolic-ref", "--quiet", "refs/remotes/origin/HEAD"); err == nil {
			full = strings.TrimSpace(b)
		}
	}
	var remote, merge string
	switch {
	case strings.HasPrefix(full, "refs/remotes/"):
		rest := strings.TrimPrefix(full, "refs/remotes/")
		r, branch, ok := strings.Cut(rest, "/")
		if !ok || branch == "HEAD" || !validConfigWord(r) {
			return nil, nil
		}
		remote, merge = r, "refs/heads/"+branch
	case strings.HasPrefix(full, "refs/heads/"):
		remote, merge = ".", full
	default:
		return nil, nil
	}
	if !validConfigWord(merge) {
		return nil, nil
	}
	return fmt.Appendf(nil, "[branch \"%s\"]\n\tremote = %s\n\tmerge = %s\n", wt.Branch, remote, merge), nil
}

// validConfigWord accepts what can be written into a config value or
// subsection without quoting: ref-name characters only.
func validConfigWord(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c == '"' || c == '\\' || c == ';' || c == '#' || c == 0x7f {
			return false
		}
	}
	return true
}

func withNewline(b []byte) []byte {
	if len(b) > 0 && b[len(b)-1] != '\n' {
		return append(b, '\n')
	}
	return b
}

// ownedWriter creates files and directories owned by uid:gid in a tree
// ohd just made (nothing else can write there yet); the first error
// sticks.
type ownedWriter struct {
	m        *Manager
	uid, gid int
	err      error
}

func (w *ownedWriter) mkdir(p string, mode os.FileMode) {
	if w.err != nil {
		return
	}
	if err := os.Mkdir(p, mode); err != nil && !errors.Is(err, fs.ErrExist) {
		w.err = err
		return
	}
	if err := os.Chmod(p, mode); err != nil {
		w.err = err
		return
	}
	w.err = w.m.chown(p, w.uid, w.gid)
}

// mkdirAll creates p and its missing parents up to (excluding) top.
func (w *ownedWriter) mkdirAll(p, top string) {
	if w.err != nil || p == top || !within(p, top) {
		return
	}
	if ok, _ := lexists(p); ok {
		return
	}
	w.mkdirAll(filepath.Dir(p), top)
	w.mkdir(p, 0o755)
}

func (w *ownedWriter) write(p string, data []byte, mode os.FileMode) {
	if w.err != nil {
		return
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, mode)
	if err != nil {
		w.err = err
		return
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(p, mode)
	}
	if err == nil {
		err = w.m.chown(p, w.uid, w.gid)
	}
	w.err = err
}

func (w *ownedWriter) symlink(target, p string) {
	if w.err != nil {
		return
	}
	if err := os.Symlink(target, p); err != nil {
		w.err = err
		return
	}
	w.err = w.m.chown(p, w.uid, w.gid)
}

// HostBranch returns the commit of the host's refs/heads/openhands/<id>
// ("" if it does not exist).
func (m *Manager) HostBranch(ctx context.Context, wt Worktree) (string, error) {
	oid, _, err := m.revParse(ctx, commonTarget(wt.CommonDir, wt.UID, wt.GID), "refs/heads/"+wt.Branch)
	if err != nil {
		return "", fmt.Errorf("worktree host branch %s: %w", wt.Branch, err)
	}
	return oid, nil
}
