package admindir

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// TrashPrefix names where Remove moves an admin dir before deleting it:
// <CommonDir>/ohd-removing-<owner>, beside worktrees/, so git never lists
// it as a registration.
const TrashPrefix = "ohd-removing-"

// Remove deletes the admin dir admin of commonDir in one step as git and
// every later reader see it: it is renamed out of worktrees/ first, then
// deleted. os.RemoveAll alone, killed half way (a SIGKILL of ohd, a full
// disk), leaves a directory under worktrees/ that lost its gitdir and
// locked files but kept others: no git command lists it, Owns and FindOwn
// can no longer tell whose it is, so no retry removes it, and a worktree
// whose .git still names it is no repository at all ("not a git
// repository"). What a killed Remove leaves is the renamed directory,
// which SweepTrash removes. owner (a conversation id, say) makes the name
// unique among removals; the caller holds the repository lock. Between
// the two steps it calls moved (crash tests stop there).
func Remove(commonDir, admin, owner string, moved func()) error {
	trash := filepath.Join(commonDir, TrashPrefix+owner)
	if err := os.RemoveAll(trash); err != nil {
		return fmt.Errorf("remove admin dir %s: clear %s: %w", admin, trash, err)
	}
	if err := os.Rename(admin, trash); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("remove admin dir %s: %w", admin, err)
	}
	moved()
	if err := os.RemoveAll(trash); err != nil {
		return fmt.Errorf("remove admin dir %s (moved to %s): %w", admin, trash, err)
	}
	return nil
}

// SweepTrash deletes what Remove runs that were killed left in commonDir.
// Only Remove makes such a directory, and it is garbage from the moment
// it is renamed, so deleting one another Remove is still deleting loses
// nothing (its RemoveAll then finds it gone).
func SweepTrash(commonDir string, log *slog.Logger) {
	ents, err := os.ReadDir(commonDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), TrashPrefix) || !e.IsDir() {
			continue
		}
		p := filepath.Join(commonDir, e.Name())
		if err := os.RemoveAll(p); err != nil {
			log.Warn("remove what an interrupted admin dir removal left", "path", p, "err", err)
			continue
		}
		log.Info("removed what an interrupted admin dir removal left", "path", p)
	}
}
