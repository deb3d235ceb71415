package worktree

import (
	"context"

	"github.com/ohd-dev/ohd/pkg/gitimport"
)

// What a view sends reaches the host's store through package gitimport:
// bounded, quarantined, checked and only then migrated.

// DefaultMaxTreeDepth is Options.MaxTreeDepth when it is 0: the depth git
// itself (core.maxTreeDepth, git 2.44 and later) accepts by default.
const DefaultMaxTreeDepth = gitimport.DefaultMaxTreeDepth

// RefusalReason is the reason of a refused publish or save (a label for
// metrics: packcheck's reasons, gitimport.ReasonTreeTooDeep, ...), ""
// when err is not a refusal.
func RefusalReason(err error) string { return gitimport.RefusalReason(err) }

// importer imports into a repository as this Manager's git, owner and
// limits.
func (m *Manager) importer() *gitimport.Importer {
	return &gitimport.Importer{
		Git:          m.runner(),
		Limits:       m.limits,
		MaxTreeDepth: m.maxTreeDepth,
		Started:      m.started,
		Log:          m.log,
		Chown:        m.chown,
	}
}

// importObjects brings the objects tips need into the host's store
// (gitimport.Importer.Import); the returned func drops the imported
// pack's .keep.
func (m *Manager) importObjects(ctx context.Context, wt Worktree, sb Sandbox, tips, nots, commits []string) (func(), error) {
	return m.importer().Import(ctx, gitimport.Repo{CommonDir: wt.CommonDir, UID: wt.UID, GID: wt.GID}, sb, tips, nots, commits)
}
