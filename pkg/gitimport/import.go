package gitimport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ohd-dev/ohd/pkg/hardgit"
	"github.com/ohd-dev/ohd/pkg/packcheck"
)

// Importing what the agent sends. The view's objects reach the host's store as
// a received push's do, in four steps:
//
//  1. bounded: the sandbox's pack is read by packcheck, which refuses it
//     from its headers when it declares too many objects, an object or a
//     delta result too large, or too much in all, before git sees a byte;
//     what passes is written to a file in the quarantine;
//  2. quarantined: git index-pack --strict (unpack-objects --strict for a
//     small pack) writes the objects into the quarantine,
//     <common-dir>/objects/incoming-ohd-*, with the real store as its
//     alternate (GIT_OBJECT_DIRECTORY, GIT_ALTERNATE_OBJECT_DIRECTORIES,
//     GIT_QUARANTINE_PATH: what receive-pack sets);
//  3. checked: every tip must then be complete (rev-list --objects over
//     the quarantine and the real store, which also bounds the trees'
//     depth) and of the right type (a branch names a commit);
//  4. migrated: only then are the quarantine's packs and loose objects
//     renamed into the real store (packs before their indexes, as
//     receive-pack's tmp-objdir does). A refused import removes the
//     quarantine: no object of it reaches the real store, so the next
//     import of a commit on top must carry (and is refused for) the same
//     objects again.
//
// A quarantine left by a killed ohd is removed by the next import.

// DefaultMaxTreeDepth is Importer.MaxTreeDepth when it is 0: the depth git
// itself (core.maxTreeDepth, git 2.44 and later) accepts by default.
const DefaultMaxTreeDepth = 2048

// QuarantinePrefix names the quarantine directories in objects/.
const QuarantinePrefix = "incoming-ohd-"

// Refusal reasons (RefusalReason), besides packcheck's.
const (
	ReasonTreeTooDeep    = "tree_too_deep"
	ReasonNotACommit     = "not_a_commit"
	ReasonMissingObjects = "missing_objects"
	ReasonInvalidObjects = "invalid_objects"
	ReasonConflict       = "conflict"
	ReasonStaleLock      = "stale_lock"
)

// RefusedError is an import git's or ohd's validation refused; it wraps
// ErrRefused. Reason is one of the Reason constants or packcheck's.
type RefusedError struct {
	Reason string
	Err    error
}

func (e *RefusedError) Error() string { return e.Err.Error() }

// Unwrap makes errors.Is(err, ErrRefused) hold, and reaches the cause.
func (e *RefusedError) Unwrap() []error { return []error{ErrRefused, e.Err} }

func refused(reason string, format string, args ...any) error {
	return &RefusedError{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// RefusalReason is the reason of a refused publish or save (a label for
// metrics: packcheck's reasons, ReasonTreeTooDeep, ...), "" when err is
// not a refusal.
func RefusalReason(err error) string {
	var re *RefusedError
	if errors.As(err, &re) {
		return re.Reason
	}
	var pe *packcheck.Error
	if errors.As(err, &pe) {
		return pe.Reason
	}
	if errors.Is(err, ErrRefused) {
		return ReasonInvalidObjects
	}
	return ""
}

// quarantine is one import's temporary object directory.
type quarantine struct {
	dir  string // <common-dir>/objects/incoming-ohd-XXXX
	real string // <common-dir>/objects
}

// env is what makes git write into the quarantine and read both stores.
func (q quarantine) env() []string {
	return []string{"GIT_OBJECT_DIRECTORY=" + q.dir, "GIT_ALTERNATE_OBJECT_DIRECTORIES=" + q.real, "GIT_QUARANTINE_PATH=" + q.dir}
}

// newQuarantine makes an empty quarantine owned by the repository's
// owner, after removing those a killed ohd left (older than this ohd).
func (m *Importer) newQuarantine(wt Repo) (quarantine, error) {
	q := quarantine{real: filepath.Join(wt.CommonDir, "objects")}
	if old, _ := filepath.Glob(filepath.Join(q.real, QuarantinePrefix+"*")); len(old) > 0 {
		for _, d := range old {
			if st, err := os.Lstat(d); err == nil && st.IsDir() && st.ModTime().Before(m.Started) {
				_ = os.RemoveAll(d)
				m.log().Info("removed a quarantine left by an earlier ohd", "dir", d)
			}
		}
	}
	dir, err := os.MkdirTemp(q.real, QuarantinePrefix)
	if err != nil {
		return q, fmt.Errorf("make the import's quarantine: %w", err)
	}
	q.dir = dir
	for _, p := range []string{dir, filepath.Join(dir, "pack")} {
		if p != dir {
			if err := os.Mkdir(p, 0o755); err != nil {
				return q, fmt.Errorf("make the import's quarantine: %w", err)
			}
		}
		if err := os.Chmod(p, 0o755); err != nil {
			return q, err
		}
		if err := m.chown(p, wt.UID, wt.GID); err != nil {
			return q, err
		}
	}
	return q, nil
}

// remove deletes the quarantine and what is left in it.
func (q quarantine) remove() {
	if q.dir != "" {
		_ = os.RemoveAll(q.dir)
	}
}

// migrate moves the quarantine's objects into the real store: loose
// objects, then packs (.keep, .pack, .rev, then .idx, so no index names a
// pack that is not there yet). An object the store has already stays.
func (q quarantine) migrate(m *Importer, uid, gid int) error {
	ents, err := os.ReadDir(q.dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.IsDir() || len(e.Name()) != 2 {
			continue
		}
		src, dst := filepath.Join(q.dir, e.Name()), filepath.Join(q.real, e.Name())
		if err := os.Mkdir(dst, 0o755); err == nil {
			if err := m.chown(dst, uid, gid); err != nil {
				return err
			}
		} else if !errors.Is(err, fs.ErrExist) {
			return err
		}
		objs, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, o := range objs {
			if err := moveNoReplace(filepath.Join(src, o.Name()), filepath.Join(dst, o.Name())); err != nil {
				return err
			}
		}
	}
	packs, err := os.ReadDir(filepath.Join(q.dir, "pack"))
	if err != nil {
		return err
	}
	rank := func(name string) int {
		switch filepath.Ext(name) {
		case ".keep":
			return 0
		case ".pack":
			return 1
		case ".rev":
			return 2
		case ".idx":
			return 4
		}
		return 3
	}
	sort.SliceStable(packs, func(i, j int) bool { return rank(packs[i].Name()) < rank(packs[j].Name()) })
	for _, p := range packs {
		if err := moveNoReplace(filepath.Join(q.dir, "pack", p.Name()), filepath.Join(q.real, "pack", p.Name())); err != nil {
			return err
		}
	}
	return nil
}

// moveNoReplace renames src to dst unless dst exists (same name, same
// content: an object or pack named by its hash).
func moveNoReplace(src, dst string) error {
	if _, err := os.Lstat(dst); err == nil {
		return os.Remove(src)
	}
	if err := os.Rename(src, dst); err != nil {
		return fmt.Errorf("move %s into the object store: %w", filepath.Base(src), err)
	}
	return nil
}

// Import brings the objects tips need into the host's store: the
// sandbox packs what the view holds itself (its alternate is the host's
// store, whose objects are not packed again), minus what nots reach; the
// pack is bounded, quarantined, checked and migrated (see above). Each of
// commits (the tips branches name) must be a commit. The returned func drops the imported pack's .keep (call
// it after the refs are moved, or always: a pack whose refs never moved
// is an unreachable one for gc to collect).
func (m *Importer) Import(ctx context.Context, wt Repo, sb Sandbox, tips, nots, commits []string) (func(), error) {
	ct := wt.target()
	noop := func() {}
	if len(tips) == 0 {
		return noop, nil // nothing to bring (the caller left out what the host has)
	}
	present, err := m.Present(ctx, ct, append(append([]string{}, tips...), nots...))
	if err != nil {
		return noop, err
	}
	var revs strings.Builder
	need := false
	for _, t := range tips {
		if !present[t] {
			need = true
		}
		revs.WriteString(t + "\n")
	}
	if !need {
		return noop, nil // everything is on the host already (a fast-forward to a host commit)
	}
	for _, n := range nots {
		if isHexID(n) && present[n] {
			revs.WriteString("^" + n + "\n")
		}
	}
	q, err := m.newQuarantine(wt)
	defer q.remove()
	if err != nil {
		return noop, err
	}
	lim := m.Limits.WithDefaults()
	if len(tips) > 0 && len(tips[0]) == 64 {
		lim.HashSize = 32
	}
	packFile := filepath.Join(q.dir, "incoming.pack")
	sum, err := m.receivePack(ctx, wt, sb, revs.String(), packFile, lim)
	if err != nil {
		return noop, err
	}
	f, err := os.Open(packFile)
	if err != nil {
		return noop, err
	}
	defer f.Close()
	env := q.env()
	strict := "--strict=gitmodulesUpdate=error,gitmodulesUrl=error,gitmodulesPath=error,gitmodulesName=error"
	keep := noop
	if sum.Objects < 100 && sum.Expanded < 32<<20 {
		if _, err := m.git(ctx, ct, hardgit.Opts{In: f, Env: env}, "unpack-objects", "-q", strict); err != nil {
			return noop, refused(ReasonInvalidObjects, "%w: git unpack-objects: %v", ErrRefused, err)
		}
	} else {
		out, err := m.git(ctx, ct, hardgit.Opts{In: f, Env: env}, "-c", "core.bigFileThreshold=16m", "-c", "core.deltaBaseCacheLimit=32m",
			"index-pack", "--stdin", strict, "--keep=ohd import", "--threads=2", fmt.Sprintf("--max-input-size=%d", lim.MaxPackBytes))
		if err != nil {
			return noop, refused(ReasonInvalidObjects, "%w: git index-pack: %v", ErrRefused, err)
		}
		if kind, hash, _ := strings.Cut(strings.TrimSpace(out), "\t"); kind == "keep" && isHexID(hash) {
			keepFile := filepath.Join(q.real, "pack", "pack-"+hash+".keep")
			keep = func() { _ = os.Remove(keepFile) }
		}
	}
	f.Close()
	_ = os.Remove(packFile)
	if err := m.checkImport(ctx, ct, env, tips, commits); err != nil {
		return noop, err
	}
	if err := q.migrate(m, wt.UID, wt.GID); err != nil {
		keep()
		return noop, fmt.Errorf("import the view's objects: %w", err)
	}
	return keep, nil
}

// receivePack runs `ohctl view pack` in the sandbox with revs and writes
// what it sends to file, through packcheck.
func (m *Importer) receivePack(ctx context.Context, wt Repo, sb Sandbox, revs, file string, lim packcheck.Limits) (packcheck.Summary, error) {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return packcheck.Summary{}, err
	}
	defer f.Close()
	if err := m.chown(file, wt.UID, wt.GID); err != nil {
		return packcheck.Summary{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := sb.View(ctx, []string{"pack", "--git-dir", wt.CommonDir}, strings.NewReader(revs), pw)
		pw.CloseWithError(err)
		done <- err
	}()
	sum, cerr := packcheck.Copy(f, pr, lim)
	if cerr != nil {
		cancel()
	}
	pr.CloseWithError(io.ErrClosedPipe)
	serr := <-done
	var pe *packcheck.Error
	switch {
	case errors.As(cerr, &pe):
		return sum, &RefusedError{Reason: pe.Reason, Err: fmt.Errorf("%w: %v", ErrRefused, pe)}
	case serr != nil:
		return sum, fmt.Errorf("pack the view's objects in the sandbox: %w", serr)
	case cerr != nil:
		return sum, fmt.Errorf("receive the view's pack: %w", cerr)
	}
	return sum, f.Close()
}

// checkImport checks, with the quarantine's objects visible, that every
// tip is complete (its objects are all in the quarantine or the real
// store) and no tree nests deeper than the limit, then that each of
// commits is a commit.
func (m *Importer) checkImport(ctx context.Context, ct hardgit.Target, env []string, tips, commits []string) error {
	// The tips go through stdin (there can be many; argv has a limit).
	// rev-list reads them where --stdin stands, before --not, which
	// applies to --all only (git 2.39 takes no options in stdin). Its
	// output (an object per line, with its path) streams through a depth
	// check that stops it at the first path too deep.
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	dw := &depthWriter{max: m.maxTreeDepth(), stop: stop}
	_, err := m.git(rctx, ct, hardgit.Opts{Stdin: []byte(strings.Join(tips, "\n") + "\n"), Env: env, Out: dw},
		"rev-list", "--objects", "--stdin", "--not", "--all", "--")
	if dw.tooDeep {
		return refused(ReasonTreeTooDeep, "%w: the view's commit %s has a tree nested more than %d directories deep", ErrRefused, truncate(strings.Join(tips, ", "), 200), m.maxTreeDepth())
	}
	if err != nil {
		return refused(ReasonMissingObjects, "%w: the view's objects for %s are incomplete or corrupt after import: %v", ErrRefused, truncate(strings.Join(tips, ", "), 200), err)
	}
	if len(commits) == 0 {
		return nil
	}
	var in bytes.Buffer
	for _, t := range commits {
		in.WriteString(t + "\n")
	}
	out, err := m.git(ctx, ct, hardgit.Opts{Stdin: in.Bytes(), Env: env}, "cat-file", "--batch-check=%(objectname) %(objecttype)")
	if err != nil {
		return fmt.Errorf("look up the imported tips: %w", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		oid, typ, _ := strings.Cut(line, " ")
		if typ != "commit" {
			return refused(ReasonNotACommit, "%w: the view's branch names %s, a %s, not a commit", ErrRefused, truncate(oid, 64), truncate(typ, 20))
		}
	}
	return nil
}

// depthWriter reads `rev-list --objects` output (an object id, a space, a
// path) and notes a path with more than max components; it then calls
// stop (which kills git) and discards the rest.
type depthWriter struct {
	max     int
	stop    func()
	slashes int
	inPath  bool
	tooDeep bool
}

func (d *depthWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 && !d.tooDeep {
		line := p
		end := bytes.IndexByte(p, '\n')
		if end >= 0 {
			line, p = p[:end], p[end+1:]
		} else {
			p = nil
		}
		if !d.inPath {
			sp := bytes.IndexByte(line, ' ')
			if sp >= 0 {
				d.inPath, line = true, line[sp+1:]
			} else {
				line = nil
			}
		}
		d.slashes += bytes.Count(line, []byte{'/'})
		if d.slashes >= d.max {
			d.tooDeep = true
			d.stop()
		}
		if end >= 0 {
			d.slashes, d.inPath = 0, false
		}
	}
	return n, nil
}

// Present reports which of oids exist in the host's store (git run at ct).
func (m *Importer) Present(ctx context.Context, ct hardgit.Target, oids []string) (map[string]bool, error) {
	var in bytes.Buffer
	var ask []string
	for _, o := range oids {
		if isHexID(o) {
			in.WriteString(o + "\n")
			ask = append(ask, o)
		}
	}
	got := map[string]bool{}
	if len(ask) == 0 {
		return got, nil
	}
	out, err := m.git(ctx, ct, hardgit.Opts{Stdin: in.Bytes()}, "cat-file", "--batch-check=%(objectname) %(objecttype)")
	if err != nil {
		return nil, fmt.Errorf("look up objects: %w", err)
	}
	for _, line := range strings.Split(out, "\n") {
		if oid, typ, ok := strings.Cut(line, " "); ok && typ != "missing" && isHexID(oid) {
			got[oid] = true
		}
	}
	return got, nil
}
