package worktree

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ohd-dev/ohd/pkg/freeze"
	"github.com/ohd-dev/ohd/pkg/hardgit"
)

// Sandbox runs `ohctl view ARGS...` where it can reach this conversation's
// worktree and git view and nothing else of the host: in practice the
// conversation's own container (pkg/conversation runs it there, or in a
// short-lived container of the same image, with no network and no broker
// directory, when the conversation's container is stopped). Everything
// that reads what the agent wrote (its worktree, its view's config,
// objects and refs) runs there; the host only imports the pack it gets
// back through git's validation and moves refs it owns.
type Sandbox interface {
	// View runs `ohctl view` with args, stdin and stdout; an error carries
	// the tail of the command's standard error.
	View(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error
}

// Collected is what `ohctl view collect` reports from inside the sandbox
// at the end of a conversation.
type Collected struct {
	// Snapshot is the commit recording uncommitted work (written into the
	// view's object store), or "" when nothing is uncommitted.
	Snapshot string `json:"snapshot,omitempty"`
	// Refs are the view's refs (name -> object id).
	Refs map[string]string `json:"refs"`
	// IgnoredFiles and IgnoredBytes count the ignored files of the
	// worktree, which are not kept.
	IgnoredFiles int   `json:"ignored_files"`
	IgnoredBytes int64 `json:"ignored_bytes"`
	// NestedRepos are the untracked nested repositories whose files the
	// snapshot holds (paths relative to the worktree); their own history
	// is not kept.
	NestedRepos []string `json:"nested_repos,omitempty"`
	// Stash are the view's stash entries, newest first (stash@{0}, the
	// value of refs/stash, then the older ones of its reflog), at most
	// maxStashEntries.
	Stash []string `json:"stash,omitempty"`
}

// maxStashEntries bounds the stash entries a removal keeps.
const maxStashEntries = 100

// RunView is `ohctl view` inside the sandbox. Its subcommands:
//
//	collect --id ID --worktree PATH --admin DIR [--freeze]
//	        records uncommitted work as a commit in the view, lists the
//	        view's refs and counts ignored files; prints Collected as JSON;
//	        with --freeze, first stops every other process of the
//	        container (pkg/freeze): a removal runs it in the conversation's
//	        own container, so the agent changes nothing after
//	collect --id ID --git-dir DIR --refs-only [--freeze]
//	        lists the view's refs only (in place: the files stay)
//	pack    --git-dir DIR
//	        reads rev-list arguments (an object id, or ^ and one) from
//	        stdin, one per line, and writes a pack of the objects they
//	        need that the view holds itself (not those of its alternate,
//	        the host's store): `git pack-objects --revs --local --stdout`
//	idle    waits until killed (the command of a sandbox container)
//	thaw    resumes the processes collect --freeze stopped (the save
//	        failed: the conversation runs on)
//
// It runs git as the current user with the same hardened environment as
// on the host: not because the agent's configuration could do harm here
// (the sandbox reaches nothing the agent could not), but so that what it
// reads is what the host would have read.
func RunView(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("ohctl view: a subcommand is required: collect, pack, idle or thaw")
	}
	flags := flag.NewFlagSet("ohctl view "+args[0], flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	id := flags.String("id", "", "conversation id")
	path := flags.String("worktree", "", "worktree path")
	admin := flags.String("admin", "", "the view's admin dir of the worktree")
	gitDir := flags.String("git-dir", "", "the view (the common dir's path in the sandbox)")
	refsOnly := flags.Bool("refs-only", false, "collect: list the view's refs only (in place: no snapshot)")
	freezeFirst := flags.Bool("freeze", false, "collect: stop every other process first (see freeze)")
	if err := flags.Parse(args[1:]); err != nil {
		return fmt.Errorf("ohctl view %s: %w", args[0], err)
	}
	switch args[0] {
	case "thaw":
		return freeze.Thaw()
	}
	m, err := insideManager()
	if err != nil {
		return fmt.Errorf("ohctl view %s: %w", args[0], err)
	}
	switch args[0] {
	case "idle":
		<-ctx.Done()
		return nil
	case "collect":
		// The agent is stopped first (a removal): in place too, where only
		// the refs are collected, so that it moves none after.
		if *freezeFirst {
			fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := freeze.All(fctx)
			cancel()
			if err != nil {
				return fmt.Errorf("ohctl view collect: %w", err)
			}
		}
		if *refsOnly {
			if ValidateID(*id) != nil || !filepath.IsAbs(*gitDir) {
				return errors.New("ohctl view collect --refs-only: --id and --git-dir are required (an absolute path)")
			}
			var c Collected
			if err := m.collectRefs(ctx, commonTarget(*gitDir, m.euid, os.Getegid()), &c); err != nil {
				return fmt.Errorf("ohctl view collect: %w", err)
			}
			return json.NewEncoder(stdout).Encode(c)
		}
		wt := Worktree{ConversationID: *id, Path: *path, AdminDir: *admin, UID: m.euid, GID: os.Getegid()}
		if ValidateID(*id) != nil || !filepath.IsAbs(*path) || !filepath.IsAbs(*admin) {
			return errors.New("ohctl view collect: --id, --worktree and --admin are required (absolute paths)")
		}
		wt.CommonDir = filepath.Dir(filepath.Dir(*admin))
		c, err := m.collect(ctx, wt)
		if err != nil {
			return fmt.Errorf("ohctl view collect: %w", err)
		}
		return json.NewEncoder(stdout).Encode(c)
	case "pack":
		if !filepath.IsAbs(*gitDir) {
			return errors.New("ohctl view pack: --git-dir is required (an absolute path)")
		}
		revs, err := readRevs(stdin)
		if err != nil {
			return fmt.Errorf("ohctl view pack: %w", err)
		}
		t := commonTarget(*gitDir, m.euid, os.Getegid())
		_, err = m.git(ctx, t, runOpts{In: strings.NewReader(revs), Out: stdout},
			"pack-objects", "--revs", "--local", "--stdout", "--quiet", "--delta-base-offset")
		if err != nil {
			return fmt.Errorf("ohctl view pack: %w", err)
		}
		return nil
	}
	return fmt.Errorf("ohctl view: unknown subcommand %q: use collect, pack, idle or thaw", args[0])
}

// discardLogger is the sandbox's logger: `ohctl view` logs nothing.
func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// insideManager is a Manager for the sandbox: git as the current user, no
// root, no worktree root.
func insideManager() (*Manager, error) {
	g, err := hardgit.Look()
	if err != nil {
		return nil, err
	}
	return &Manager{gitPath: g, timeout: 10 * time.Minute, euid: os.Geteuid(), onStep: func(string) {},
		log: discardLogger()}, nil
}

// maxRevsInput bounds the input of `view pack` (about 25,000 revisions:
// the host sends only those it lacks, see saveView).
const maxRevsInput = 1 << 20

// readRevs reads and checks the rev-list arguments of `view pack`: object
// ids, optionally negated, nothing else (no option can be slipped in).
// Input beyond maxRevsInput is an error: a shortened list would make a
// pack that lacks objects.
func readRevs(r io.Reader) (string, error) {
	in, err := io.ReadAll(io.LimitReader(r, maxRevsInput+1))
	if err != nil {
		return "", err
	}
	if len(in) > maxRevsInput {
		return "", fmt.Errorf("more than %d bytes of revisions: too many to pack at once", maxRevsInput)
	}
	var b strings.Builder
	for _, line := range strings.Split(string(in), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if !isHexID(strings.TrimPrefix(line, "^")) {
			return "", fmt.Errorf("bad revision line %q: want an object id or ^ and one", truncate(line, 80))
		}
		b.WriteString(line + "\n")
	}
	return b.String(), nil
}

// collect is `view collect`: the snapshot commit, the refs, the ignored
// files.
func (m *Manager) collect(ctx context.Context, wt Worktree) (Collected, error) {
	var c Collected
	// The view's refs are listed while the snapshot is made: the agent is
	// stopped, and the snapshot writes objects only, no ref, so neither
	// reads what the other writes (on the way of every removal: one git
	// run fewer waited for).
	refs := make(chan error, 1)
	go func() { refs <- m.collectRefs(ctx, commonTarget(wt.CommonDir, wt.UID, wt.GID), &c) }()
	snap, nested, ignored, err := m.snapshots().Commit(ctx, snapshotTree(wt), true)
	if rerr := <-refs; err == nil {
		err = rerr
	}
	if err != nil {
		return c, err
	}
	c.Snapshot, c.NestedRepos = snap, nested
	if c.IgnoredFiles, c.IgnoredBytes, err = sizeIgnored(wt, ignored); err != nil {
		return c, err
	}
	return c, nil
}

// collectRefs lists the view's refs and its stash entries into c.
func (m *Manager) collectRefs(ctx context.Context, ct gitTarget, c *Collected) error {
	var err error
	if c.Refs, err = m.viewRefs(ctx, ct); err != nil {
		return err
	}
	if _, ok := c.Refs["refs/stash"]; ok {
		out, err := m.git(ctx, ct, runOpts{}, "reflog", "show", "--format=%H", "refs/stash", "--")
		if err != nil {
			return fmt.Errorf("list the view's stash: %w", err)
		}
		for _, oid := range strings.Fields(out) {
			if len(c.Stash) < maxStashEntries && isHexID(oid) {
				c.Stash = append(c.Stash, oid)
			}
		}
	}
	return nil
}

// viewRefs lists the view's refs (name -> object id).
func (m *Manager) viewRefs(ctx context.Context, ct gitTarget) (map[string]string, error) {
	out, err := m.git(ctx, ct, runOpts{}, "for-each-ref", "--format=%(objectname) %(refname)")
	if err != nil {
		return nil, fmt.Errorf("list the view's refs: %w", err)
	}
	refs := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if oid, name, ok := strings.Cut(line, " "); ok && isHexID(oid) {
			refs[name] = oid
		}
	}
	return refs, nil
}

// countIgnored counts the worktree's ignored files and their bytes (regular
// files only; nothing is followed).
func (m *Manager) countIgnored(ctx context.Context, wt Worktree) (files int, bytes int64, err error) {
	out, err := m.git(ctx, worktreeTarget(wt), runOpts{}, "ls-files", "-z", "--others", "--ignored", "--exclude-standard")
	if err != nil {
		return 0, 0, fmt.Errorf("list ignored files: %w", err)
	}
	var names []string
	for _, name := range strings.Split(out, "\x00") {
		if name != "" {
			names = append(names, name)
		}
	}
	return sizeIgnored(wt, names)
}

// sizeIgnored counts the ignored files names (relative to the worktree)
// and the bytes of the regular ones (nothing is followed).
func sizeIgnored(wt Worktree, names []string) (files int, bytes int64, err error) {
	for _, name := range names {
		files++
		if st, err := os.Lstat(filepath.Join(wt.Path, name)); err == nil && st.Mode().IsRegular() {
			bytes += st.Size()
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return files, bytes, err
		}
	}
	return files, bytes, nil
}
