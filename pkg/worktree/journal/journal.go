package journal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Journal is what a Restore under way has made, written to ohd's
// lock dir before each step that changes the repository and removed when
// the restore is done: a restore killed at any point leaves either
// nothing or its journal, from which the next Restore of the conversation
// undoes the half-made worktree and starts again (instead of refusing
// it as "already restored").
type Journal struct {
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
	UserStash     []StashEntry `json:"user_stash,omitempty"`
	UserStashRead bool         `json:"user_stash_read,omitempty"`
	// Holder is the process that ran the restore ("<pid> <start time>"):
	// its git children die with it (hardgit's Pdeathsig), so once it is
	// gone a ref lock its restore takes is a leftover of a killed git.
	Holder string `json:"holder,omitempty"`
}

// refLocks are the lock files of the refs a restore rewrites in
// place (refs/stash, and packed-refs, which deleting a packed ref locks);
// the branches and tags it makes are new refs, never locked before.
var refLocks = []string{"refs/stash.lock", "packed-refs.lock"}

// ProcessIdentity is "<pid> <start time in clock ticks>" of process pid,
// "" if there is none: a pid alone may be reused.
func ProcessIdentity(pid int) string {
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

// HolderGone says whether the journal's holder is a process that no
// longer runs (false when it is unknown, as in a journal of an earlier
// version: nothing is taken for stale then).
func (j *Journal) HolderGone() bool {
	f := strings.Fields(j.Holder)
	if len(f) != 2 {
		return false
	}
	pid, err := strconv.Atoi(f[0])
	return err == nil && ProcessIdentity(pid) != j.Holder
}

// ClearStaleRefLocks removes the ref locks a killed restore's git left in
// commonDir, so the retry is not refused with "cannot lock ref". It runs
// under the repository's lock, and only when the interrupted restore's
// process is gone.
func (j *Journal) ClearStaleRefLocks(commonDir string, log *slog.Logger) {
	if !j.HolderGone() {
		return
	}
	for _, name := range refLocks {
		p := filepath.Join(commonDir, name)
		if st, err := os.Lstat(p); err == nil && st.Mode().IsRegular() {
			if err := os.Remove(p); err == nil {
				log.Warn("removed a ref lock an interrupted restore left", "conversation", j.ID, "lock", p, "holder", j.Holder)
			}
		}
	}
}

// StashEntry is one entry of refs/stash's reflog.
type StashEntry struct {
	OID     string `json:"oid"`
	Message string `json:"message"`
}

// path is where the journal of a restore of conversation id lives in dir.
func path(dir, id string) string {
	return filepath.Join(dir, "restore-"+id+".json")
}

// Read returns the journal in dir of an interrupted restore of
// conversation id, or nil (none, or one that cannot be trusted: log says
// so).
func Read(dir, id string, log *slog.Logger) (*Journal, error) {
	b, err := os.ReadFile(path(dir, id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the journal of an interrupted restore: %w", err)
	}
	var j Journal
	if err := json.Unmarshal(b, &j); err != nil || j.ID != id || !filepath.IsAbs(j.Into) {
		// Torn or foreign: what it names cannot be trusted; the restore
		// goes on as if there were none (a half-made worktree is then
		// refused as already restored, with the command to remove it).
		log.Warn("ignoring an unreadable restore journal", "conversation", id, "err", err)
		return nil, nil
	}
	return &j, nil
}

// Write writes j into dir durably (temporary file, fsync, rename).
func Write(dir string, j *Journal) error {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	p := path(dir, j.ID)
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
	return syncDir(dir)
}

// Remove deletes the journal in dir of the restore of conversation id
// (it is done), durably.
func Remove(dir, id string) error {
	if err := os.Remove(path(dir, id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the restore journal: %w", err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
