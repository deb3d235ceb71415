package worktree

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ohd-dev/ohd/pkg/worktree/nofollow"
)

// The live mirror (see the package comment, "The view is live both ways
// and safe from the host's gc"): every ref the agent makes or moves in its
// view (a ref whose value differs from the one the view was seeded with)
// is mirrored on the host under refs/ohd/live/<id>/<ref without refs/>
// while the conversation runs, through the same bounded and quarantined
// import as the branch. The host's gc then never prunes what the view
// needs (the view borrows the host's object store), and the user sees the
// agent's side branches and tags at once. The conversation's own branch
// is published as refs/heads/openhands/<id> and not mirrored again; the
// view's refs/remotes/ and refs/ohd/ are the host's, not the agent's.

// LivePrefix is where the view's refs of conversation id are mirrored on
// the host: refs/ohd/live/<id>/.
func LivePrefix(id string) string { return "refs/ohd/live/" + id + "/" }

// LiveRef is the host's mirror of the view's ref (a full name, refs/...).
func LiveRef(id, ref string) string { return LivePrefix(id) + strings.TrimPrefix(ref, "refs/") }

// seedRefsFile holds, beside the view (host-only, never mounted), the
// refs the view was seeded with, in packed-refs format.
const seedRefsFile = "seed-refs"

// maxViewRefs bounds the refs ViewRefs reads (and so the refs mirrored).
const maxViewRefs = maxKept

// ViewRefs reads the view's refs (loose and packed, name -> object id) on
// the host without following a symlink out of the view, at most
// maxViewRefs of them (more is an error: the mirror would be incomplete).
// Symbolic refs are skipped.
func (m *Manager) ViewRefs(wt Worktree) (map[string]string, error) {
	if wt.View == "" {
		return nil, fmt.Errorf("worktree view refs: %w: %s has no git view", ErrInvalidWorktree, wt.Path)
	}
	packed, err := m.packedRefs(wt.View)
	if err != nil {
		return nil, fmt.Errorf("worktree view refs: %w", err)
	}
	refs := maps.Clone(packed)
	if refs == nil {
		refs = map[string]string{}
	}
	fd, err := unix.Open(filepath.Join(wt.View, "refs"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("worktree view refs: %w", err)
	}
	loose := 0
	if err := walkRefs(fd, "refs", 0, refs, &loose); err != nil {
		return nil, fmt.Errorf("worktree view refs %s: %w", wt.View, err)
	}
	if len(refs) > maxViewRefs*10 {
		return nil, fmt.Errorf("worktree view refs %s: more than %d refs", wt.View, maxViewRefs*10)
	}
	return refs, nil
}

// packedAll is what packedRefs last read of one view's packed-refs.
type packedAll struct {
	dev, ino    uint64
	size, mtime int64
	refs        map[string]string
}

// packedRefs reads the view's packed-refs (name -> object id), again only
// when it changed: the publisher asks several times a second.
func (m *Manager) packedRefs(view string) (map[string]string, error) {
	f, err := nofollow.OpenBeneath(view, "packed-refs")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, err
	}
	key := packedAll{dev: uint64(st.Dev), ino: uint64(st.Ino), size: st.Size, mtime: st.Mtim.Nano()}
	if v, ok := m.packedAll.Load(view); ok {
		if c := v.(packedAll); c.dev == key.dev && c.ino == key.ino && c.size == key.size && c.mtime == key.mtime {
			return c.refs, nil
		}
	}
	b, err := nofollow.ReadRegular(f, "packed-refs", 64<<20)
	if err != nil {
		return nil, err
	}
	key.refs = map[string]string{}
	for line := range strings.Lines(string(b)) {
		oid, name, ok := strings.Cut(strings.TrimRight(line, "\n"), " ")
		if ok && isHexID(oid) && validRefName(name) {
			key.refs[name] = oid
		}
	}
	m.packedAll.Store(view, key)
	return key.refs, nil
}

// walkRefs reads the loose refs below the directory fd (named prefix),
// closing fd; nothing is followed.
func walkRefs(fd int, prefix string, depth int, refs map[string]string, n *int) error {
	d := os.NewFile(uintptr(fd), prefix)
	defer d.Close()
	if depth > 16 {
		return fmt.Errorf("%s: refs nested too deeply", prefix)
	}
	ents, err := d.ReadDir(-1)
	if err != nil {
		return err
	}
	for _, e := range ents {
		name := prefix + "/" + e.Name()
		if *n++; *n > maxViewRefs*10 {
			return fmt.Errorf("more than %d loose refs", maxViewRefs*10)
		}
		switch {
		case e.IsDir():
			sub, err := unix.Openat(fd, e.Name(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				continue // gone, or not a plain directory
			}
			if err := walkRefs(sub, name, depth+1, refs, n); err != nil {
				return err
			}
		case e.Type().IsRegular() && validRefName(name):
			f, err := unix.Openat(fd, e.Name(), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			if err != nil {
				continue
			}
			file := os.NewFile(uintptr(f), name)
			b, err := nofollow.ReadRegular(file, name, 4096)
			file.Close()
			if s := strings.TrimSpace(string(b)); err == nil && isHexID(s) {
				refs[name] = s
			}
		}
	}
	return nil
}

// seedRefs reads the refs wt's view was seeded with (none for a view
// seeded before the file existed: every ref then counts as the agent's).
func seedRefsOf(wt Worktree) map[string]string {
	seed := map[string]string{}
	b, err := nofollow.ReadFile(filepath.Join(filepath.Dir(wt.View), seedRefsFile), 64<<20)
	if err != nil {
		return seed
	}
	for line := range strings.Lines(string(b)) {
		if oid, name, ok := strings.Cut(strings.TrimRight(line, "\n"), " "); ok && isHexID(oid) {
			seed[name] = oid
		}
	}
	return seed
}

// Mirrored returns the refs of view (ViewRefs) that the mirror holds:
// those the agent made or moved, under their live names, at most
// maxViewRefs (the first by name).
func (m *Manager) Mirrored(wt Worktree, view map[string]string) map[string]string {
	seed := seedRefsOf(wt)
	own := "refs/heads/" + wt.viewBranch() // published as refs/heads/<wt.Branch>
	var names []string
	for name, oid := range view {
		if name == own || strings.HasPrefix(name, "refs/remotes/") || strings.HasPrefix(name, "refs/ohd/") || seed[name] == oid {
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	out := map[string]string{}
	for _, n := range names[:min(len(names), maxViewRefs)] {
		out[LiveRef(wt.ConversationID, n)] = view[n]
	}
	return out
}

// MirrorResult says what Mirror changed.
type MirrorResult struct {
	// Live is the host's mirror after Mirror: live ref -> object id.
	Live map[string]string
	// Updated and Deleted count the live refs written and removed.
	Updated, Deleted int
}

// Mirror makes the host's refs/ohd/live/<id>/ equal to want (Mirrored's
// answer): the objects the new values need come through the sandbox in
// one bounded, quarantined import (a branch must name a commit), then one
// ref transaction creates, moves and deletes the live refs.
func (m *Manager) Mirror(ctx context.Context, wt Worktree, sb Sandbox, want map[string]string) (MirrorResult, error) {
	res := MirrorResult{Live: map[string]string{}}
	if err := m.checkWorktree(wt); err != nil || wt.View == "" {
		if err == nil {
			err = fmt.Errorf("%w: %s has no git view", ErrInvalidWorktree, wt.Path)
		}
		return res, fmt.Errorf("worktree mirror: %w", err)
	}
	ct := commonTarget(wt.CommonDir, wt.UID, wt.GID)
	have, err := m.readRefsUnder(ctx, ct, LivePrefix(wt.ConversationID))
	if err != nil {
		return res, fmt.Errorf("worktree mirror %s: %w", wt.Path, err)
	}
	var tips, commits, nots []string
	seen := map[string]bool{}
	for ref, oid := range want {
		if have[ref] == oid || seen[oid] {
			continue
		}
		seen[oid] = true
		tips = append(tips, oid)
		if strings.HasPrefix(ref, LivePrefix(wt.ConversationID)+"heads/") || ref == LivePrefix(wt.ConversationID)+"stash" {
			commits = append(commits, oid)
		}
	}
	for _, oid := range have {
		nots = append(nots, oid)
	}
	sort.Strings(tips)
	nots = append(nots, wt.StartCommit)
	if len(tips) > 0 {
		keep, err := m.importObjects(ctx, wt, sb, tips, nots, commits)
		defer keep()
		if err != nil {
			return res, fmt.Errorf("worktree mirror %s: %w", wt.Path, err)
		}
	}
	var tx strings.Builder
	for ref, oid := range want {
		if have[ref] != oid {
			fmt.Fprintf(&tx, "update %s %s %s\n", ref, oid, orZero(have[ref]))
			res.Updated++
		}
	}
	for ref, oid := range have {
		if _, ok := want[ref]; !ok {
			fmt.Fprintf(&tx, "delete %s %s\n", ref, oid)
			res.Deleted++
		}
	}
	if tx.Len() > 0 {
		unlock, err := m.lockRepo(ctx, wt.CommonDir)
		if err != nil {
			return res, fmt.Errorf("worktree mirror %s: %w", wt.Path, err)
		}
		err = m.updateRefs(ctx, ct, tx.String(), "-m", "ohd: live mirror of conversation "+wt.ConversationID)
		unlock()
		if err != nil {
			return res, fmt.Errorf("worktree mirror %s: update the live refs: %w", wt.Path, err)
		}
	}
	for ref, oid := range want {
		res.Live[ref] = oid
	}
	return res, nil
}

// orZero is oid, or the null id (the ref must not exist) when it is "".
func orZero(oid string) string {
	if oid == "" {
		return strings.Repeat("0", 40)
	}
	return oid
}

// DropLive deletes conversation wt's live mirror on the host (at the end
// of a removal, once the view's refs are kept where they need to be;
// Remove calls it).
func (m *Manager) DropLive(ctx context.Context, wt Worktree) error {
	unlock, err := m.lockRepo(ctx, wt.CommonDir)
	if err != nil {
		return err
	}
	defer unlock()
	return m.dropLive(ctx, commonTarget(wt.CommonDir, wt.UID, wt.GID), wt.ConversationID)
}

// dropLive is DropLive with the repository's lock held.
func (m *Manager) dropLive(ctx context.Context, ct gitTarget, id string) error {
	have, err := m.readRefsUnder(ctx, ct, LivePrefix(id))
	if err != nil {
		return err
	}
	return m.dropLiveRefs(ctx, ct, id, have)
}

// dropLiveRefs deletes have, the live mirror of id as just read (each
// only at the value read).
func (m *Manager) dropLiveRefs(ctx context.Context, ct gitTarget, id string, have map[string]string) error {
	if len(have) == 0 {
		return nil
	}
	var tx strings.Builder
	for ref, oid := range have {
		fmt.Fprintf(&tx, "delete %s %s\n", ref, oid)
	}
	if err := m.updateRefs(ctx, ct, tx.String()); err != nil {
		return fmt.Errorf("drop the live mirror of %s: %w", id, err)
	}
	return nil
}

// madeByAgent reports which of names (view refs, values in refs) the agent
// made or moved: they differ from the view's seed and host (the host's
// branches, tags and stash) has no ref of the same name and value.
func madeByAgent(wt Worktree, names []string, refs, host map[string]string) map[string]bool {
	out := map[string]bool{}
	if len(names) == 0 || wt.View == "" {
		return out
	}
	seed := seedRefsOf(wt)
	for _, n := range names {
		out[n] = refs[n] != seed[n] && refs[n] != host[n]
	}
	return out
}
