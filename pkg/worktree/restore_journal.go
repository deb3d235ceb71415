package worktree

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/ohd-dev/ohd/pkg/worktree/admindir"
)

// restoreJournal is what a Restore under way has made, written to ohd's
// lock dir before each step that changes the repository and removed when
// the restore is done: a restore killed at any point leaves either
// nothing or its journal, from which the next Restore of the conversation
// undoes the half-made worktree and starts again (instead of refusing
// it as "already restored").
type restoreJournal struct {
	ID string `json:"id"`
	// Into is the worktree the restore makes; CommonDir its repository.
	Into      string `json:"into"`
	CommonDir string `json:"common_dir"`
	// CreatedBranch is the branch the restore makes (worktree add -b),
	// at CreatedAt; "" when it checks out an existing one.
	CreatedBranch string `json:"created_branch,omitempty"`
	CreatedAt     string `json:"created_at,omitempty"`
	// UserStash are the user's stash entries (newest first) as they were
	// before the restore rebuilt refs/stash; UserStashRead says they
	// were read (there may be none).
	UserStash     []stashEntry `json:"user_stash,omitempty"`
	UserStashRead bool         `json:"user_stash_read,omitempty"`
	// Holder is the process that ran the restore ("<pid> <start time>"):
	// its git children die with it (hardgit's Pdeathsig), so once it is
	// gone a ref lock its restore takes is a leftover of a killed git.
	Holder string `json:"holder,omitempty"`
}

// restoreRefLocks are the lock files of the refs a restore rewrites in
// place (refs/stash, and packed-refs, which deleting a packed ref locks);
// the branches and tags it makes are new refs, never locked before.
var restoreRefLocks = []string{"refs/stash.lock", "packed-refs.lock"}

// processIdentity is "<pid> <start time in clock ticks>" of process pid,
// "" if there is none: a pid alone may be reused.
func processIdentity(pid int) string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(b, ')') // the command may hold spaces
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return strconv.Itoa(pid) + " " + f[19]
}

// holderGone says whether the journal's holder is a process that no
// longer runs (false when it is unknown, as in a journal of an earlier
// version: nothing is taken for stale then).
func (j *restoreJournal) holderGone() bool {
	f := strings.Fields(j.Holder)
	if len(f) != 2 {
		return false
	}
	pid, err := strconv.Atoi(f[0])
	return err == nil && processIdentity(pid) != j.Holder
}

// clearStaleRefLocks removes the ref locks a killed restore's git left in
// commonDir, so the retry is not refused with "cannot lock ref". It runs
// under the repository's lock, and only when the interrupted restore's
// process is gone.
func (m *Manager) clearStaleRefLocks(commonDir string, j *restoreJournal) {
	if !j.holderGone() {
		return
	}
	for _, name := range restoreRefLocks {
		p := filepath.Join(commonDir, name)
		if st, err := os.Lstat(p); err == nil && st.Mode().IsRegular() {
			if err := os.Remove(p); err == nil {
				m.log.Warn("removed a ref lock an interrupted restore left", "conversation", j.ID, "lock", p, "holder", j.Holder)
			}
		}
	}
}

// stashEntry is one entry of refs/stash's reflog.
type stashEntry struct {
	OID     string `json:"oid"`
	Message string `json:"message"`
}

func (m *Manager) restoreJournalPath(id string) string {
	return filepath.Join(m.lockDir, "restore-"+id+".json")
}

// readRestoreJournal returns the journal of an interrupted restore of
// id, or nil.
func (m *Manager) readRestoreJournal(id string) (*restoreJournal, error) {
	b, err := os.ReadFile(m.restoreJournalPath(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the journal of an interrupted restore: %w", err)
	}
	var j restoreJournal
	if err := json.Unmarshal(b, &j); err != nil || j.ID != id || !filepath.IsAbs(j.Into) {
		// Torn or foreign: what it names cannot be trusted; the restore
		// goes on as if there were none (a half-made worktree is then
		// refused as already restored, with the command to remove it).
		m.log.Warn("ignoring an unreadable restore journal", "conversation", id, "err", err)
		return nil, nil
	}
	return &j, nil
}

// writeRestoreJournal writes j durably (temporary file, fsync, rename).
func (m *Manager) writeRestoreJournal(j *restoreJournal) error {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	p := m.restoreJournalPath(j.ID)
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write the restore journal: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("write the restore journal: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write the restore journal: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write the restore journal: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("write the restore journal: %w", err)
	}
	return syncDir(m.lockDir)
}

func (m *Manager) removeRestoreJournal(id string) error {
	if err := os.Remove(m.restoreJournalPath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the restore journal: %w", err)
	}
	return syncDir(m.lockDir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// undoRestore removes what the interrupted restore j made: its worktree
// (registration and directory; a directory that is not that worktree is
// left alone unless empty) and the branch it created, if still where it
// was made. refs/stash is not touched here: the retry rebuilds it from the
// user's entries the journal kept.
func (m *Manager) undoRestore(ctx context.Context, commonDir string, j *restoreJournal) error {
	if filepath.Clean(j.CommonDir) != filepath.Clean(commonDir) {
		return nil // another repository's: nothing of it is here
	}
	uid, gid, err := owner(commonDir)
	if err != nil {
		return err
	}
	unlock, err := m.lockRepo(ctx, commonDir)
	if err != nil {
		return err
	}
	defer unlock()
	m.clearStaleRefLocks(commonDir, j)
	// A restore's git worktree add killed before it wrote gitdir leaves an
	// admin dir admindir.Find cannot find (found by TestFaultInjection: an
	// empty worktrees/restored3 that no git lists, for good).
	defer m.removeAbandonedAdminsAt(commonDir, j.Into, "restore", "initializing")
	if ok, _ := lexists(j.Into); ok {
		admin, ferr := admindir.Find(commonDir, j.Into)
		if ferr == nil {
			if err := admindir.Remove(commonDir, admin, "restore-"+filepath.Base(admin), func() { m.onStep("admin-moved") }); err != nil {
				return err
			}
		} else if ents, err := os.ReadDir(j.Into); err != nil || len(ents) > 0 {
			return fmt.Errorf("%w: %s is there but is not the worktree the restore was making: move it away and retry", ErrExists, j.Into)
		}
		if err := os.RemoveAll(j.Into); err != nil {
			return err
		}
	}
	if j.CreatedBranch != "" && isHexID(j.CreatedAt) {
		ct := commonTarget(commonDir, uid, gid)
		ref := "refs/heads/" + j.CreatedBranch
		if have, err := m.readRefsUnder(ctx, ct, ref); err == nil && have[ref] == j.CreatedAt {
			if _, err := m.git(ctx, ct, runOpts{}, "update-ref", "-d", ref, j.CreatedAt); err != nil {
				return err
			}
		}
	}
	m.log.Info("undid an interrupted restore; restoring again", "conversation", j.ID, "path", j.Into)
	return nil
}

// stashEntries lists refs/stash's entries, newest first (none if there
// is no stash).
func (m *Manager) stashEntries(ctx context.Context, ct gitTarget) ([]stashEntry, error) {
	have, err := m.readRefsUnder(ctx, ct, "refs/stash")
	if err != nil || have["refs/stash"] == "" {
		return nil, err
	}
	out, err := m.git(ctx, ct, runOpts{}, "log", "-g", "--no-decorate", "--format=%H%x09%gs", "refs/stash", "--")
	if err != nil {
		return nil, err
	}
	var list []stashEntry
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		oid, msg, ok := strings.Cut(line, "\t")
		if !ok || !isHexID(oid) {
			continue
		}
		list = append(list, stashEntry{OID: oid, Message: msg})
	}
	return list, nil
}

// restoreTags makes tags from the view's tags the removal kept
// (refs/ohd/kept/<id>/tags/<name>): the same name if free, else
// restored-<id prefix>/<name>; a tag already there with the same object
// (a retried restore) is left as it is.
func (m *Manager) restoreTags(ctx context.Context, ct gitTarget, id string, refs map[string]string, res *RestoreResult) error {
	prefix := KeptPrefix(id) + "tags/"
	var names []string
	for ref := range refs {
		if name, ok := strings.CutPrefix(ref, prefix); ok {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names)
	have, err := m.readRefsUnder(ctx, ct, "refs/tags/")
	if err != nil {
		return err
	}
	var tx strings.Builder
	for _, name := range names {
		oid := refs[prefix+name]
		local := name
		for _, cand := range []string{name, "restored-" + id[:8] + "/" + name} {
			local = cand
			if have["refs/tags/"+cand] == "" || have["refs/tags/"+cand] == oid {
				break
			}
		}
		switch cur := have["refs/tags/"+local]; {
		case cur == oid:
			res.Tags = append(res.Tags, local) // restored before
			continue
		case cur != "" || !validRefName("refs/tags/"+local):
			continue
		}
		fmt.Fprintf(&tx, "create refs/tags/%s %s\n", local, oid)
		res.Tags = append(res.Tags, local)
	}
	if tx.Len() > 0 {
		if _, err := m.git(ctx, ct, runOpts{Stdin: []byte(tx.String())}, "update-ref", "-m", "ohd: restore conversation "+id, "--stdin"); err != nil {
			return fmt.Errorf("make the tags: %w", err)
		}
	}
	return nil
}
