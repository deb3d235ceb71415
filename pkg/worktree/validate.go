package worktree

import (
	"fmt"
	"path/filepath"
	"strings"
)

// checkWorktree verifies that wt is internally consistent and belongs
// under this Manager's root, before anything acts on it: a corrupted or
// hand-made record must not make Remove delete some other directory or
// some other worktree's admin dir.
func (m *Manager) checkWorktree(wt Worktree) error { return m.checkRecord(wt, false) }

// checkRecord is checkWorktree; noAdmin allows a record without an admin
// dir (AdminID and AdminDir both empty), as Find returns when git never
// got to create one. Only Remove accepts that.
func (m *Manager) checkRecord(wt Worktree, noAdmin bool) error {
	if err := ValidateID(wt.ConversationID); err != nil {
		return err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w for conversation %s: %s", ErrInvalidWorktree, wt.ConversationID, fmt.Sprintf(format, args...))
	}
	paths := [][2]string{{"Repo", wt.Repo}, {"CommonDir", wt.CommonDir}, {"Path", wt.Path}}
	adminless := (noAdmin || wt.InPlace) && wt.AdminID == "" && wt.AdminDir == ""
	if !adminless {
		paths = append(paths, [2]string{"AdminDir", wt.AdminDir})
	}
	for _, p := range paths {
		if p[1] == "" || !filepath.IsAbs(p[1]) || filepath.Clean(p[1]) != p[1] || strings.ContainsAny(p[1], "\x00\n\r") {
			return bad("%s %q is not a clean absolute path", p[0], p[1])
		}
	}
	if wt.InPlace {
		return m.checkInPlace(wt, bad)
	}
	if want := filepath.Join(m.root, wt.ConversationID, filepath.Base(wt.Repo)); wt.Path != want {
		return bad("Path %s is not %s", wt.Path, want)
	}
	if !adminless {
		if wt.AdminID == "" || wt.AdminID == "." || wt.AdminID == ".." || strings.ContainsAny(wt.AdminID, "/\x00\n\r") {
			return bad("AdminID %q is not a directory name", wt.AdminID)
		}
		if want := filepath.Join(wt.CommonDir, "worktrees", wt.AdminID); wt.AdminDir != want {
			return bad("AdminDir %s is not %s", wt.AdminDir, want)
		}
	}
	if wt.Branch != BranchName(wt.ConversationID) {
		return bad("Branch %q is not %q", wt.Branch, BranchName(wt.ConversationID))
	}
	if want, _ := viewPaths(wt.Path); wt.View != "" && wt.View != want {
		return bad("View %s is not %s", wt.View, want)
	}
	if wt.StartCommit != "" && !isHexID(wt.StartCommit) {
		return bad("StartCommit %q is not a full commit id", wt.StartCommit)
	}
	return nil
}
